"""The SFT training loop of one stage: packed micro-batches, accumulation, AdamW, resumable.

One optimizer step: the sampler picks examples up to `batch_tokens` real tokens; they are packed
into rows of at most `max_length` tokens and the rows grouped into micro-batches of at most
`micro_batch_tokens` padded tokens; each micro-batch's summed token loss is divided by the step's
total number of loss tokens before backward, so the accumulated gradient is exactly that of the
token-mean loss over the whole step, however the step is split. Then clip, the optimizer (the stage's
`optimizer`: AdamW, or Muon and AdamW, training/optim/), next step.
Under torchrun (WORLD_SIZE > 1) the same loop runs on every rank with the model sharded by FSDP2
and the step's micro-batches split across ranks; see training/runtime/distributed.py. With
`distributed.sequence_parallel` > 1 the ranks of one sequence-parallel group share each micro-batch, split
along its tokens (training/runtime/ulysses.py); the micro-batches are dealt over the data-parallel ranks.

Resume: a checkpoint holds the weights, optimizer state, RNG states and the sampler's (epoch, cursor);
the learning rate is a pure function of the step. Continuing from it runs exactly the steps an
uninterrupted run would have run (tests/test_sft_resume.py checks the final weights are equal).
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.distributed import ProcessGroup

from passband.training.checkpoint import (ADAPTER_FOLDER, load_model_weights, read_trainer_state, read_weights,
                                          save_checkpoint)
from passband.training.runtime.checkpoint_shards import restore_training_state, save_sharded_checkpoint
from passband.training.runtime.activation_checkpointing import enable_checkpointing
from passband.training.runtime.meta_init import fill_weights, on_meta
from passband.training.lora.adapters import (adapter_checkpoint, attach_adapters, base_weights_in_bf16,
                                             load_adapter_state, read_adapter)
from passband.training.sft.config import StageConfig
from passband.training.runtime.distributed import (full_norm, rank, rank_micro_batches, sequence_parallel_size,
                                                   shard_for_training, trainer_mesh, world_size)
from passband.training.runtime.mesh import data_parallel_group, data_parallel_ranks, sequence_parallel_group
from passband.training.sft.model_loss import PackedLMLoss
from passband.training.runtime.varlen_attention import resolve_attention
from passband.training.runtime.device import fused_on, peak_memory_mb, resolve_device
from passband.training.heap import use_heap
from passband.training.sft.packing import SFTExample, collate_packed, group_micro_batches, pack_first_fit_decreasing
from passband.training.runtime.precision import resolve_precision
from passband.training.sft.sampler import SamplerState, StepSampler, count_steps
from passband.training.optim.optimizer import build_optimizer, set_scheduled_lr
from passband.training.runtime.schedule import lr_at

MetricsCallback = Callable[[dict[str, float], int], None]
CheckpointCallback = Callable[[Path, int], None]


@dataclass
class TrainResult:
    """What a stage run produced."""

    last_checkpoint: Path  # the stage-end checkpoint (or the last one written before stopping)
    num_steps: int  # optimizer steps completed in total, including those before a resume
    last_metrics: dict[str, float] = field(default_factory=dict)


def data_fingerprint(examples: list[SFTExample]) -> str:
    """sha256 of every example's tokens and mask, in order: a resume must see the same data."""
    digest = hashlib.sha256()
    for example in examples:
        digest.update(np.asarray(example.input_ids, dtype=np.int64).tobytes())
        digest.update(np.asarray(example.loss_mask, dtype=np.int8).tobytes())
        digest.update(b"|")
    return digest.hexdigest()


def validate_examples(examples: list[SFTExample], max_length: int) -> None:
    """Every example fits a row and has at least one token to learn (a target after position 0)."""
    for index, example in enumerate(examples):
        if len(example.input_ids) > max_length:
            raise ValueError(f"example {index} has {len(example.input_ids)} tokens, more than max_length={max_length}")
        if not any(example.loss_mask[1:]):
            raise ValueError(f"example {index} has no loss tokens after its first token")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train_step(
    loss_module: PackedLMLoss,
    examples: list[SFTExample],
    max_length: int,
    micro_batch_tokens: int,
    pad_id: int,
    device: torch.device,
    num_ranks: int = 1,
    this_rank: int = 0,
    data_group: ProcessGroup | None = None,
) -> dict[str, float]:
    """Forward and backward over one step's examples (gradients accumulate; no optimizer step).

    With num_ranks > 1 every rank passes the whole step's examples and runs its share of the
    micro-batches (`rank_micro_batches`); the metrics returned are the whole step's on every rank.
    Under sequence parallelism num_ranks and this_rank count data-parallel ranks (the ranks of one SP group
    run the same micro-batches and each returns its whole loss), and the metrics are summed over
    `data_group` (training/runtime/mesh.py: data_parallel_group; None: every rank).
    """
    lengths = [len(e.input_ids) for e in examples]
    rows = pack_first_fit_decreasing(lengths, max_length)
    row_lengths = [sum(lengths[i] for i in row) for row in rows]
    num_loss_tokens = sum(sum(e.loss_mask[1:]) for e in examples)
    # Summed on the device in float64 (what adding python floats did), read once after the last micro-batch.
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    num_padding = 0
    num_padded = 0
    groups = group_micro_batches(row_lengths, micro_batch_tokens)
    for index, counts in rank_micro_batches(len(groups), num_ranks, this_rank):
        batch = collate_packed(examples, [rows[g] for g in groups[index]], pad_id)  # on the host
        micro_loss = loss_module(
            batch.input_ids.to(device), batch.position_ids.to(device), batch.targets.to(device),
            batch.cu_seqlens.to(device), batch.max_document_length,
        )
        if not counts:  # a rank's padding pass: same collectives as the others, zero gradient
            (micro_loss * 0.0).backward()
            continue
        (micro_loss / num_loss_tokens).backward()
        loss_sum += micro_loss.detach().double()
        num_padding += batch.num_padding_tokens
        num_padded += batch.input_ids.numel()
    totals = torch.cat([loss_sum[None], torch.tensor([num_padding, num_padded], dtype=torch.float64).to(device)])
    if num_ranks > 1:
        torch.distributed.all_reduce(totals, group=data_group)
    loss_sum, num_padding, num_padded = totals.tolist()  # the step's one read of its metrics
    return {
        "loss": loss_sum / num_loss_tokens,
        "num_loss_tokens": float(num_loss_tokens),
        "num_tokens": float(sum(lengths)),
        "num_rows": float(len(rows)),
        "padding_fraction": num_padding / num_padded,
    }


@dataclass
class StageCheckpointer:
    """The stage's checkpoints, out_dir/step_NNNNNN: every `checkpoint_every` steps and at the last one
    (`should_save`), in one process the HF layout with AdamW beside it, under ranks each rank's shards."""

    out_dir: Path
    cfg: StageConfig
    total_steps: int
    fingerprint: str
    num_ranks: int

    def should_save(self, step: int) -> bool:
        return step == self.total_steps or bool(self.cfg.checkpoint_every and step % self.cfg.checkpoint_every == 0)

    def save(self, step: int, model: Any, tokenizer: Any, optimizer: torch.optim.Optimizer,
             sampler_state: SamplerState) -> Path:
        """The checkpoint after optimizer step `step` (counted from 1); a resume reads its trainer state."""
        trainer_state = {
            "stage": self.cfg.name,
            "seed": self.cfg.seed,
            "data_fingerprint": self.fingerprint,
            "total_steps": self.total_steps,
            "step": step,
            "epoch": sampler_state.epoch,
            "cursor": sampler_state.cursor,
        }
        name = f"step_{step:06d}"
        if self.num_ranks == 1:
            return save_checkpoint(self.out_dir, name, model, tokenizer, optimizer, trainer_state,
                                   **adapter_checkpoint(model, tokenizer.name_or_path))
        # every rank writes its shards
        return save_sharded_checkpoint(self.out_dir, name, model, tokenizer, optimizer, trainer_state)


@dataclass
class _Stage:
    """One stage set up to train: the (sharded) loss module, its AdamW, the sampler and the step where the run
    stands, and the checkpoint schedule."""

    loss_module: Any
    optimizer: torch.optim.Optimizer
    sampler: StepSampler
    step: int
    total_steps: int
    device: torch.device
    pad_id: int
    checkpointer: StageCheckpointer
    previous_attention: str  # restored at the end: eval/generation need masks


def _resume_state(resume_from: Path, expected: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's trainer state, refused unless it is this stage's (same name, seed, data, steps)."""
    state = read_trainer_state(resume_from)
    differing = {k: (state.get(k), v) for k, v in expected.items() if state.get(k) != v}
    if differing:
        raise ValueError(f"cannot resume from {resume_from}: (checkpoint, now) differ for {differing}")
    return state


def _prepare_model(model: Any, cfg: StageConfig, resume_from: Path | None,
                   start_weights: Path | None) -> tuple[PackedLMLoss, torch.device, str]:
    """The stage's weights (and adapters) in `model`, set to train, wrapped in the loss and sharded on the
    device the config resolves to; returns the loss module, the device the parameters ended on, and the
    attention implementation to restore at the end (eval/generation need masks)."""
    built_on_meta = on_meta(model)  # under ranks: filled once sharded
    if built_on_meta and resume_from is None and start_weights is None:
        raise ValueError("a model built on meta needs start_weights (or resume_from) to be filled from")
    if resume_from is not None and not built_on_meta and cfg.lora is None:
        load_model_weights(model, read_weights(resume_from))
    if cfg.lora is not None:  # adapters on the stage's start model; a resumed stage's are its checkpoint's
        attach_adapters(model, cfg.lora, cfg.lora.seed)
        if resume_from is not None:
            load_adapter_state(model, read_adapter(resume_from / ADAPTER_FOLDER))
    enable_checkpointing(model, cfg.activation_checkpointing)
    model.train()
    previous_attention = model.config._attn_implementation
    run_on = resolve_device(cfg.device)  # the one decision; the model, AdamW and every batch follow it
    precision = resolve_precision(cfg.precision, run_on)
    if cfg.lora is not None and precision == "bf16_autocast":  # the same bits in half the memory
        base_weights_in_bf16(model)
    # Ulysses (distributed.sequence_parallel > 1): each micro-batch split along its tokens over the group
    sequence_group = sequence_parallel_group(trainer_mesh(run_on.type))
    use_heap(cfg.heap, cfg.micro_batch_tokens // sequence_parallel_size())
    loss_module = PackedLMLoss(model, cfg.loss_chunk_size,
                               resolve_attention(cfg.attention, run_on, sequence_group is not None), precision,
                               cfg.lm_head_fp32, sequence_group)
    if world_size() == 1:
        model.to(run_on)  # a no-op on the CPU; under ranks FSDP2 moves each shard instead
    loss_module = shard_for_training(loss_module, run_on, precision)
    if built_on_meta:  # each rank's shards: read by rank 0 and broadcast, or its own of a sharded checkpoint
        fill_weights(model, resume_from or start_weights, run_on)
    # the device after sharding, which moves the parameters to the rank's device
    return loss_module, next(model.parameters()).device, previous_attention


def _set_up(model: Any, tokenizer: Any, examples: list[SFTExample], cfg: StageConfig, out_dir: Path,
            resume_from: Path | None, start_weights: Path | None) -> _Stage:
    """Everything before the first step: the data checked, seeds, the resumed state, the model, AdamW, sampler."""
    validate_examples(examples, cfg.max_length)
    lengths = [len(e.input_ids) for e in examples]
    total_steps = cfg.num_steps if cfg.num_steps is not None else count_steps(lengths, cfg.batch_tokens, cfg.seed, cfg.num_epochs)
    fingerprint = data_fingerprint(examples)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    seed_everything(cfg.seed)
    state = None
    if resume_from is not None:
        state = _resume_state(resume_from, {"stage": cfg.name, "seed": cfg.seed, "data_fingerprint": fingerprint,
                                            "total_steps": total_steps})
    loss_module, device, previous_attention = _prepare_model(model, cfg, resume_from, start_weights)
    # Built on the sharded parameters: under FSDP2 each rank's optimizer holds its shard's state.
    optimizer = build_optimizer(model, cfg.optimizer, cfg.lr, cfg.weight_decay, fused=bool(fused_on(device)))
    step, sampler_state = 0, SamplerState()
    if state is not None:  # AdamW and RNG, whatever number of ranks wrote it
        restore_training_state(resume_from, model, optimizer)
        step, sampler_state = state["step"], SamplerState(state["epoch"], state["cursor"])
    return _Stage(loss_module=loss_module, optimizer=optimizer,
                  sampler=StepSampler(lengths, cfg.batch_tokens, cfg.seed, sampler_state), step=step,
                  total_steps=total_steps, device=device, pad_id=pad_id,
                  checkpointer=StageCheckpointer(out_dir, cfg, total_steps, fingerprint, world_size()),
                  previous_attention=previous_attention)


def _optimizer_step(model: Any, examples: list[SFTExample], stage: _Stage, cfg: StageConfig) -> dict[str, float]:
    """One step: the scheduled rate, the sampler's examples forward and backward, clip, AdamW; its metrics."""
    start = time.perf_counter()
    lr = lr_at(stage.step, cfg.lr, cfg.warmup_steps, stage.total_steps, cfg.schedule)
    set_scheduled_lr(stage.optimizer, cfg.optimizer, cfg.lr,
                     lambda peak: lr_at(stage.step, peak, cfg.warmup_steps, stage.total_steps, cfg.schedule))
    step_examples = [examples[i] for i in stage.sampler.next_step()]
    mesh = trainer_mesh(stage.device.type)  # None in one process
    metrics = train_step(stage.loss_module, step_examples, cfg.max_length, cfg.micro_batch_tokens, stage.pad_id,
                         stage.device, *data_parallel_ranks(mesh), data_parallel_group(mesh))
    max_norm = cfg.grad_clip if cfg.grad_clip is not None else float("inf")
    grad_norm = full_norm(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
    stage.optimizer.step()
    stage.optimizer.zero_grad(set_to_none=True)
    stage.step += 1
    elapsed = time.perf_counter() - start
    metrics.update(
        lr=lr,
        grad_norm=float(grad_norm),
        tokens_per_s=metrics["num_tokens"] / elapsed,
        epoch=float(stage.sampler.state.epoch),
        peak_memory_mb=peak_memory_mb(stage.device),
    )
    return metrics


def train_stage(
    model: Any,
    tokenizer: Any,
    examples: list[SFTExample],
    stage_cfg: StageConfig,
    out_dir: Path,
    resume_from: Path | None = None,
    on_metrics: MetricsCallback | None = None,
    on_checkpoint: CheckpointCallback | None = None,
    start_weights: Path | None = None,
) -> TrainResult:
    """Train `model` in place on `examples` for one stage; checkpoints go to out_dir/step_NNNNNN.

    on_metrics(metrics, step) is called after every optimizer step (step counts from 1);
    on_checkpoint(path, step) after every checkpoint is complete on disk. `resume_from` is a
    checkpoint directory of this same stage (same name, seed and data), else a ValueError.

    Under torchrun (WORLD_SIZE > 1) every rank calls this with the same arguments; the model is
    sharded in place with FSDP2, every rank writes its shards of each checkpoint, rank 0 the rest
    and calls the callbacks. A model built on `meta` (training/runtime/meta_init.py, the ranks' launch) is
    filled after sharding from `resume_from`, else from `start_weights` (rank 0 reads it).
    """
    stage = _set_up(model, tokenizer, examples, stage_cfg, out_dir, resume_from, start_weights)
    is_rank_0 = rank() == 0
    last_checkpoint = resume_from
    metrics: dict[str, float] = {}
    while stage.step < stage.total_steps:
        metrics = _optimizer_step(model, examples, stage, stage_cfg)
        if on_metrics is not None and is_rank_0:
            on_metrics(metrics, stage.step)
        if stage.checkpointer.should_save(stage.step):
            last_checkpoint = stage.checkpointer.save(stage.step, model, tokenizer, stage.optimizer,
                                                      stage.sampler.state)
            if on_checkpoint is not None and is_rank_0:
                on_checkpoint(last_checkpoint, stage.step)
            if world_size() > 1:  # rank 0 has written (and committed) it before any rank returns its path
                torch.distributed.barrier()
    model.set_attn_implementation(stage.previous_attention)
    if last_checkpoint is None:
        raise ValueError(f"stage {stage_cfg.name!r} ran no steps and has no checkpoint (total_steps={stage.total_steps})")
    return TrainResult(last_checkpoint=last_checkpoint, num_steps=stage.step, last_metrics=metrics)
