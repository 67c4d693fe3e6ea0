"""Worker-side half of the vLLM engine, loaded into each vLLM worker process as its
`worker_extension_cls` (the engine calls these methods through `collective_rpc`).

Weight sync: vLLM's in-place `reload_weights` re-runs the per-layer processing only for layers
that received weights. On the CPU backend that processing packs each matrix into a oneDNN handle
that the forward pass uses instead of the parameter. A tied LM head (SmolLM2 shares it with the
embedding) receives no weights of its own, so it kept the handle packed from the *old* weights:
logits came from the old output projection while everything below it was new (vllm_kl 2.2e-3
against the new weights on an fp32 engine, where a fresh engine gives ~1e-9).

fp32 LM head: vLLM's `head_dtype=float32` (an hf override) computes the logits in fp32 from
`lm_head.weight` cast up on every step; in a bf16 engine that weight is the bf16-rounded copy
(for SmolLM2 only 3% of the checkpoint's values are bf16-exact), so we replace it with the
checkpoint's fp32 values, untied from the bf16 input embedding.

Releasing the packed weights (`release_packed_weights`): the reload rebuilds every linear
layer's handle from the checkpoint (those whose weight was removed, through the layerwise reload;
those that keep it, the LM head, in `reload_weights_and_repack`), so between a rollout and the
next sync the old handles are dead weight beside the trainer. Dropping the layer's `cpu_linear`
(the closure that owns the handle) frees it; a forward pass before the next reload raises.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

HEAD_KEYS = ("lm_head.weight", "model.embed_tokens.weight")
"""Checkpoint keys of the output projection, the untied one first (HF Llama-family names)."""


class WeightSyncExtension:
    """Mixed into vLLM's worker class; `self` is the worker."""

    def reload_weights_and_repack(self, weights_path: str, fp32_lm_head: bool = False) -> int:
        """Reload every weight from the safetensors in `weights_path`, then rebuild the CPU
        GEMM handles of layers whose weight was kept (embedding and LM head) from the new
        values, and the fp32 LM head if one is in use. Returns how many handles were rebuilt
        (0 on GPU, where none exist)."""
        self.reload_weights(weights_path=weights_path, is_checkpoint_format=True)
        repacked = self._repack_kept_weights()
        if fp32_lm_head:  # the reload skips the untied head: it is not in the checkpoint's tie
            self.load_fp32_lm_head(weights_path)
        return repacked

    def load_tensors_and_repack(self, tensors: Iterable[tuple[str, torch.Tensor]], fp32_lm_head: bool = False) -> int:
        """`reload_weights_and_repack` from tensors handed over in memory (checkpoint names, the
        engine's dtype, an fp32 head with `fp32_lm_head`) instead of a folder of safetensors. In process
        `tensors` is the trainer's generator itself (engine_dtype.engine_tensors), read one cast tensor at
        a time; only the fp32 head is kept past its turn, to be set after the reload."""
        heads: dict[str, torch.Tensor] = {}

        def passing() -> Iterator[tuple[str, torch.Tensor]]:
            for name, tensor in tensors:
                if fp32_lm_head and name in HEAD_KEYS:
                    heads[name] = tensor
                yield name, tensor

        self.reload_weights(weights_iterator=passing(), is_checkpoint_format=True)
        repacked = self._repack_kept_weights()
        if fp32_lm_head:
            self._set_fp32_head(heads[next(key for key in HEAD_KEYS if key in heads)])
        return repacked

    def _repack_kept_weights(self) -> int:
        repacked = 0
        for module in self.model_runner.get_model().modules():
            # layers packed with remove_weight=True hold an empty weight and were re-processed
            # by the reload itself; only those that keep their weight can be stale
            if hasattr(module, "cpu_linear") and module.weight.numel() > 0:
                module.quant_method.process_weights_after_loading(module)
                repacked += 1
        return repacked

    def release_packed_weights(self) -> int:
        """Drop every linear layer's CPU GEMM handle until the next `reload_weights_and_repack`;
        returns how many were dropped (0 on GPU)."""
        released = 0
        for module in self.model_runner.get_model().modules():
            if hasattr(module, "cpu_linear"):
                module.cpu_linear = _released_linear
                released += 1
        return released

    def trim_heap(self) -> bool:
        """Return this worker's freed heap to the OS (training/heap.py); True if any was returned."""
        from passband.training.heap import trim_heap

        return trim_heap()

    def load_fp32_lm_head(self, weights_path: str) -> str:
        """Give the LM head its own fp32 weight read from the safetensors in `weights_path`
        (the engine runs it with head_dtype=float32). Returns the key it was read from."""
        from safetensors import safe_open

        for path in sorted(Path(weights_path).glob("*.safetensors")):
            with safe_open(str(path), "pt") as f:
                for key in HEAD_KEYS:
                    if key in f.keys():
                        self._set_fp32_head(f.get_tensor(key))
                        return key
        raise FileNotFoundError(f"none of {HEAD_KEYS} in the safetensors of {weights_path}")

    def _set_fp32_head(self, checkpoint_weight: torch.Tensor) -> None:
        head = self.model_runner.get_model().lm_head
        weight = checkpoint_weight.float()
        if head.weight.dtype == torch.float32:
            # already fp32 (our own copy, after the first load; or an fp32 engine's own head, which
            # the reload has just given these values): in place, sparing a second vocabulary-sized tensor
            head.weight.data[: weight.shape[0]].copy_(weight)
            return
        # vLLM pads the vocabulary to a multiple of 64; padded rows stay zero
        padded = torch.zeros(head.weight.shape, dtype=torch.float32, device=head.weight.device)
        padded[: weight.shape[0]] = weight
        head.weight = torch.nn.Parameter(padded, requires_grad=False)


def _released_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    raise RuntimeError("the engine's packed weights were released (EngineConfig.release_weights_while_training) "
                       "and no load_weights has rebuilt them since: load weights before generating")
