"""The policy's tensors in the engine's dtype, streamed: one cast tensor alive at a time.

The engine runs its body in `EngineConfig.dtype` and casts whatever it is given on load
(vLLM's weight loader: `param.copy_(loaded)`, which rounds fp32 to bf16 to nearest even, as
`Tensor.to` does), so casting here first gives the engine the same bits while the file it reads,
and the pages it maps while reading it, are half the size. The LM head stays fp32 when the
engine keeps an fp32 head (`lm_head_fp32`): it reads the head's fp32 values back from the same
files (vllm_weight_sync.py: load_fp32_lm_head; hf_engine.py: _cast_body). A tied head (SmolLM2's)
is the input embedding, so that is the tensor kept fp32; the engine still casts its embedding.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import torch

SHARD_BYTES = 64 * 2**20
"""Bytes per safetensors shard (a tensor larger than that gets a shard to itself): what one
write holds in memory, and what an engine maps at once while it reads them."""


def head_name(model: torch.nn.Module) -> str:
    """The state-dict name of `model`'s output projection: lm_head.weight, or the input embedding's
    name when the head is tied to it (the first name of the shared tensor, the one written). By
    parameter identity, so it holds for a model sharded by FSDP2 (its parameters are DTensors)."""
    head = model.get_output_embeddings().weight
    return next(name for name, parameter in model.named_parameters() if parameter is head)


def engine_tensors(state: Mapping[str, torch.Tensor], head: str, dtype: torch.dtype,
                   lm_head_fp32: bool, to_host: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """(checkpoint name, tensor) of every tensor of `state` (a model's own state dict, or the full
    one its torchrun ranks gathered), each cast to `dtype` as it is yielded, the output projection
    `head` (head_name) left in fp32 when `lm_head_fp32`. A tensor shared by two names (tied
    embeddings in a model's own state dict) is yielded once, under the first, as save_pretrained does.
    `to_host` False: each stays on its device (an engine on the same GPU reads it there)."""
    seen: set[int] = set()
    for name, tensor in state.items():
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        keep_fp32 = lm_head_fp32 and name == head
        # cast where the tensor lives (on a GPU: half the bytes to copy out), then to host memory
        cast = tensor.to(torch.float32 if keep_fp32 else dtype)
        yield name, (cast.cpu() if to_host else cast).contiguous()


def write_shards(tensors: Iterator[tuple[str, torch.Tensor]], out_dir: Path,
                 shard_bytes: int = SHARD_BYTES) -> dict[str, int]:
    """Write `tensors` into `out_dir` as safetensors shards of about `shard_bytes`, in the order
    they come; {file name: size in bytes}. Only the shard being filled is held."""
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    sizes: dict[str, int] = {}
    shard: dict[str, torch.Tensor] = {}
    held = 0

    def flush() -> None:
        name = f"model-{len(sizes) + 1:05d}.safetensors"
        save_file(shard, str(out_dir / name), metadata={"format": "pt"})
        sizes[name] = (out_dir / name).stat().st_size
        shard.clear()

    for name, tensor in tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if shard and held + nbytes > shard_bytes:
            flush()
            held = 0
        shard[name] = tensor
        held += nbytes
    if shard:
        flush()
    return sizes
