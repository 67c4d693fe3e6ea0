"""LoRA adapters served by vLLM (`algo.lora.engine_weights: adapter`): the engine keeps the base weights it
started with and applies the newest adapter version to every request, a LoRARequest per version.

vLLM caches loaded adapters by their integer id, so each version gets a fresh id: the same id again
would serve the adapter cached under it, i.e. the previous version's weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from passband.training.lora.adapters import ADAPTER_CONFIG

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The values vLLM's `max_lora_rank` accepts (vllm/config/lora.py: MaxLoRARanks)."""


def lora_serving(max_rank: int | None) -> dict[str, Any]:
    """vLLM `LLM(...)` arguments serving one adapter of rank <= `max_rank` at a time (none: {})."""
    if max_rank is None:
        return {}
    fitting = [rank for rank in VLLM_LORA_RANKS if rank >= max_rank]
    if not fitting:
        raise ValueError(f"LoRA rank {max_rank}: vLLM serves adapters up to rank {VLLM_LORA_RANKS[-1]}; use "
                         "algo.lora.engine_weights: merged for a larger rank")
    return {"enable_lora": True, "max_lora_rank": fitting[0], "max_loras": 1}


def is_adapter_dir(path: Path) -> bool:
    """Whether `path` holds a peft adapter (training/lora/adapters.py: write_adapter) rather than full weights."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def next_adapter_request(previous: Any, adapter_dir: Path) -> Any:
    """The LoRARequest of the adapter in `adapter_dir`, with an id no earlier request of this engine had."""
    from vllm.lora.request import LoRARequest

    next_id = 1 if previous is None else previous.lora_int_id + 1
    return LoRARequest(lora_name=f"adapter-{next_id}", lora_int_id=next_id, lora_path=str(adapter_dir))
