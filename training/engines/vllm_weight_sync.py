"""Worker-side half of the vLLM weight sync, loaded into each vLLM worker process as its
`worker_extension_cls` (the engine calls these methods through `collective_rpc`).

Why it exists: vLLM's in-place `reload_weights` re-runs the per-layer processing only for layers
that received weights. On the CPU backend that processing packs each matrix into a oneDNN handle
that the forward pass uses instead of the parameter. A tied LM head (SmolLM2 shares it with the
embedding) receives no weights of its own, so it kept the handle packed from the *old* weights:
logits came from the old output projection while everything below it was new (vllm_kl 2.2e-3
against the new weights on an fp32 engine, where a fresh engine gives ~1e-9).
"""

from __future__ import annotations


class WeightSyncExtension:
    """Mixed into vLLM's worker class; `self` is the worker."""

    def reload_weights_and_repack(self, weights_path: str) -> int:
        """Reload every weight from the safetensors in `weights_path`, then rebuild the CPU
        GEMM handles of layers whose weight was kept (embedding and LM head) from the new
        values. Returns how many handles were rebuilt (0 on GPU, where none exist)."""
        self.reload_weights(weights_path=weights_path, is_checkpoint_format=True)
        repacked = 0
        for module in self.model_runner.get_model().modules():
            # layers packed with remove_weight=True hold an empty weight and were re-processed
            # by the reload itself; only those that keep their weight can be stale
            if hasattr(module, "cpu_linear") and module.weight.numel() > 0:
                module.quant_method.process_weights_after_loading(module)
                repacked += 1
        return repacked
