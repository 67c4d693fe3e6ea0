"""Open the rollout engine an EngineConfig names."""

from __future__ import annotations

from pathlib import Path

from passband.training.engines.config import EngineConfig
from passband.training.engines.protocol import RolloutEngine


def open_engine(config: EngineConfig, model_dir: str | Path) -> RolloutEngine:
    """A live engine on the checkpoint in `model_dir`; the caller closes it (it holds worker
    processes and memory, so flows own its lifetime rather than a task)."""
    if config.kind == "vllm":
        from passband.training.engines.vllm_engine import VLLMEngine

        return VLLMEngine(Path(model_dir), config)
    from passband.training.engines.hf_engine import HFEngine

    return HFEngine(Path(model_dir), config)
