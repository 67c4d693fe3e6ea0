"""Will this config's trainers fit their device? The memory model (training/memory_model.py) applied
to a resolved config, before any model loads.

`passband run` refuses a trainer whose estimated peak exceeds its device here (the GPU's memory
on CUDA, the host's RAM on the CPU) in one line naming the stage and the settings that would help;
`passband doctor FLOW ...` prints the whole estimate; `passband config` does neither (a config may
be meant for another machine). A pipeline stage placed on a work pool is left to that pool. Each trainer is checked on the device its
`device` setting resolves to on this machine, at the precision `precision` resolves to there.

What the estimate assumes: every micro-batch's sequences as long as the engine accepts
(`engine.max_model_len`) for RL, `micro_batch_tokens` for SFT; every figure is one rank's on the
`distributed` mesh (replicate x shard x sequence_parallel; one process by default): FSDP2 splits the
weights, gradients and optimizer state over shard x sequence_parallel and gathers a layer or two whole,
a sequence-parallel rank holds 1/sp of each micro-batch's activations (training/memory_model.py:
`per_rank`, `trainer_memory`'s sequence_parallel); RL's in-process engine on the
trainer's device (asleep during the update where `engine.sleep_while_training` resolves on), an
engine in its own process on the same device too, and none with `rollout.workers: task_workers`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from passband.training.memory_model import (DeviceFit, ModelShape, TrainerMemory, colocated_fit, engine_bytes, gib,
                                            kv_bytes_per_token, lora_parameters, per_rank, trainer_memory)
from passband.training.model_shapes import model_shape


@dataclass(frozen=True)
class Target:
    """A device to estimate for instead of this machine's: `passband doctor --gpu-gib 80` on a laptop."""

    device_type: str
    device_bytes: int


@dataclass(frozen=True)
class Estimate:
    """One trainer's estimate: `where` names its setting (rl, sft.stages.0, ...)."""

    where: str
    model: str
    shape: ModelShape
    trainer: TrainerMemory
    fit: DeviceFit
    assumptions: str
    remedies: tuple[str, ...]
    """Settings that would lower the estimate, as the user writes them."""

    def problem(self) -> str | None:
        """The one line that refuses it, or None when it fits."""
        if self.fit.fits:
            return None
        return (f"{self.where}: {self.model} needs about {self.fit.line()} ({self.assumptions}); "
                f"try {', '.join(self.remedies)} or a device with more memory (`passband doctor` with the same "
                f"flow and options prints the estimate by part)")

    def report(self) -> list[str]:
        shape = self.shape
        lines = [f"{self.where}: {self.model}, {shape.parameters / 1e9:.3f}B parameters "
                 f"({shape.layers} layers, hidden {shape.hidden}, MLP {shape.intermediate}, vocab {shape.vocab})",
                 f"  assumes {self.assumptions}", *("  " + line for line in self.trainer.lines())]
        lines += [f"  peak {phase:10s} {gib(value):8.2f} GiB" for phase, value in self.fit.phases.items()]
        lines.append(f"  {'fits' if self.fit.fits else 'DOES NOT FIT'}: {self.fit.line()}")
        return lines


@dataclass(frozen=True)
class Unplaceable:
    """A trainer whose `device` setting names a device this machine has not: the refusal, no estimate."""

    where: str
    reason: str

    def problem(self) -> str:
        return f"{self.where}: {self.reason}"

    def report(self) -> list[str]:
        return [self.problem()]


def estimates(config: BaseModel, where: str = "", ask_hub: bool = False,
              target: Target | None = None) -> Iterator[Estimate | Unplaceable | str]:
    """The estimate of every trainer in `config` (an RL or SFT config, or a pipeline holding them),
    its refusal where its device is not here, or a line saying why one has none; on `target` where given (a trainer set to device cpu stays there)."""
    from passband.flows.rl.config import RLConfig
    from passband.flows.sft import SFTConfig

    if isinstance(config, RLConfig):
        yield _rl_estimate(config, where or "rl", ask_hub, target)
    elif isinstance(config, SFTConfig):
        for index, stage in enumerate(config.stages):
            yield _sft_estimate(config, stage, f"{where or 'sft'}.stages.{index}", ask_hub, target)
    else:
        for name in type(config).model_fields:
            value = getattr(config, name)
            if isinstance(value, (RLConfig, SFTConfig)):
                yield from estimates(value, f"{where}.{name}" if where else name, ask_hub, target)


def memory_check(config: BaseModel) -> tuple[list[str], list[str]]:
    """The preflight's lines (nothing is asked of the network): (problems: a trainer that cannot fit its
    device here, notes: a trainer whose model's shape is not known here, or whose stage a pipeline
    places on a work pool, so it goes unchecked here)."""
    placed = getattr(config, "placement", {})
    problems, notes = [], []
    for found in estimates(config):
        if isinstance(found, str):
            notes.append(found)
        elif found.where.split(".")[0] in placed:
            notes.append(f"{found.where}: runs on work pool {placed[found.where.split('.')[0]]!r}, not checked here "
                         f"(`passband doctor` with --gpu-gib sizes it for that pool's GPU)")
        elif found.problem():
            problems.append(found.problem())
    return problems, notes


def device_bytes(device: Any, target: Target | None = None) -> int:
    """What `device` holds: the target's, a GPU's memory, or the host's RAM for the CPU."""
    import torch

    if target is not None and device.type == target.device_type:
        return target.device_bytes
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _placement(setting: str, precision_setting: str, target: Target | None) -> tuple[Any, str] | str:
    """(device, precision) as the trainer would resolve them here, or on `target`; the one-line reason
    when `setting` names a device this machine has not (`device: cuda` on a CPU box)."""
    import torch

    from passband.training.runtime.device import device_problem, resolve_device
    from passband.training.runtime.precision import resolve_precision

    if target is not None and setting != "cpu":
        device = torch.device(target.device_type)
    elif (problem := device_problem(setting)) is not None:  # the user's setting: a preflight line, not a traceback
        return problem
    else:
        device = resolve_device(setting)
    return device, resolve_precision(precision_setting, device)


def _rl_estimate(config: Any, where: str, ask_hub: bool, target: Target | None) -> Estimate | Unplaceable | str:
    shape = model_shape(config.model, ask_hub)
    if isinstance(shape, str):
        return f"{where}: no memory estimate: {shape}"
    algo, engine, mesh = config.algo, config.engine, config.distributed.mesh
    placement = _placement(algo.device, algo.precision, target)
    if isinstance(placement, str):
        return Unplaceable(f"{where}.algo.device", placement)
    device, precision = placement
    # a token budget bounds a micro-batch's tokens, but a row is never split: the longest row alone may pass it
    tokens = (max(algo.micro_batch_tokens, engine.max_model_len) if algo.micro_batch_tokens is not None
              else algo.micro_batch_size * engine.max_model_len)
    trainer = per_rank(trainer_memory(
        shape, precision, tokens, algo.logprob_chunk_size, kl_reference=algo.kl_coef > 0,
        lora_parameters=lora_parameters(shape, algo.lora.rank) if algo.lora else None,
        checkpointing=algo.activation_checkpointing,
        # packed rows run the varlen kernel whatever algo.attention says ('auto' packs the Llama/Qwen2 shapes here)
        eager_sequence_tokens=engine.max_model_len if algo.attention == "eager" and algo.pack_rows is False else None,
        optimizer=algo.optimizer, sequence_parallel=mesh.sequence_parallel), shape, precision, _state_shards(mesh))
    total = device_bytes(device, target)
    cuda = device.type == "cuda"
    dtype = engine.dtype if engine.dtype != "auto" else ("bfloat16" if cuda else engine.resolved_dtype())
    if engine.kv_cache_gib == "batch":  # the flow sizes it to one rollout batch; bounded here by max_model_len
        num_sequences = config.prompts_per_step * config.sampling.n
        kv_gib = num_sequences * engine.max_model_len * kv_bytes_per_token(shape, dtype) / 2**30
    else:
        kv_gib = engine.kv_cache_gib
    # rollouts on task workers sample on the workers' devices: nothing of the engine beside the trainer
    local = config.rollout.workers == "local"
    engine_on_device = engine_bytes(shape, dtype, total, engine.memory_fraction, kv_gib) if local else 0
    sleeps = engine.kind == "vllm" and engine.sleeps_while_training(cuda)
    # the synchronous loop releases the update's cache before the engine wakes; rollouts ahead sample
    # during the update, so no hand-over frees it (flows/rl/loop.py)
    releases = config.rollout.max_off_policy_steps == 0
    fit = colocated_fit(trainer, engine_on_device, f"{device.type} device", total, sleeps, releases)
    per_micro_batch = (f"{tokens} tokens" if algo.micro_batch_tokens is not None
                       else f"{algo.micro_batch_size} sequences x {engine.max_model_len} tokens")
    assumptions = (f"{per_micro_batch} per micro-batch, {precision}, "
                   f"{algo.attention} attention, activation checkpointing {algo.activation_checkpointing}"
                   + _mesh_words(mesh)
                   + f", engine {gib(engine_on_device):.1f} GiB in {dtype}{' asleep while training' if sleeps else ''}")
    remedies = [f"a smaller {where}.algo.micro_batch_{'tokens' if algo.micro_batch_tokens is not None else 'size'}"]
    remedies += _checkpointing_remedies(f"{where}.algo.activation_checkpointing", algo.activation_checkpointing)
    remedies += [f"{where}.algo.attention: sdpa"] * (algo.attention == "eager")
    remedies += [f"{where}.algo.lora"] * (algo.lora is None)
    return Estimate(where, config.model, shape, trainer, fit, assumptions, tuple(remedies))


def _sft_estimate(config: Any, stage: Any, where: str, ask_hub: bool,
                  target: Target | None) -> Estimate | Unplaceable | str:
    shape = model_shape(config.model, ask_hub)
    if isinstance(shape, str):
        return f"{where}: no memory estimate: {shape}"
    placement = _placement(stage.device, stage.precision, target)
    if isinstance(placement, str):
        return Unplaceable(where, placement)
    device, precision = placement
    mesh = config.distributed.mesh
    trainer = per_rank(trainer_memory(
        shape, precision, stage.micro_batch_tokens, stage.loss_chunk_size,
        lora_parameters=lora_parameters(shape, stage.lora.rank) if stage.lora else None,
        checkpointing=stage.activation_checkpointing, optimizer=stage.optimizer,
        sequence_parallel=mesh.sequence_parallel), shape, precision, _state_shards(mesh))
    fit = DeviceFit(f"{device.type} device", device_bytes(device, target), {"training": trainer.peak})
    assumptions = (f"{stage.micro_batch_tokens} tokens per micro-batch, {precision}, activation checkpointing "
                   f"{stage.activation_checkpointing}" + _mesh_words(mesh))
    remedies = [f"a smaller {where}.micro_batch_tokens"]
    remedies += _checkpointing_remedies(f"{where}.activation_checkpointing", stage.activation_checkpointing)
    remedies += [f"{where}.lora"] * (stage.lora is None)
    return Estimate(where, config.model, shape, trainer, fit, assumptions, tuple(remedies))


def _state_shards(mesh: Any) -> int:
    """The ranks FSDP2 splits the weights and optimizer state over: shard merged with sequence_parallel
    (the recipe's DP-shard x SP; replicas hold copies)."""
    return mesh.shard * mesh.sequence_parallel


def _mesh_words(mesh: Any) -> str:
    if mesh.world_size == 1:
        return ""
    return (f", per rank of {mesh.world_size} (replicate {mesh.replicate} x shard {mesh.shard} x sequence_parallel "
            f"{mesh.sequence_parallel})")


def _checkpointing_remedies(setting: str, value: str) -> list[str]:
    """The checkpointing settings that keep less than `value` does, as the user writes them."""
    lighter = {"none": ["selective", "every-layer"], "selective": ["every-layer"], "every-layer": []}[value]
    return [f"{setting}: {choice}" for choice in lighter]
