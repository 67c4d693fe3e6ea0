"""The RL trainer: the policy being trained, its optimizer, the frozen reference, and a typed state.

`RLState` is what a checkpoint must carry besides weights, optimizer and RNG for a resumed run
to continue exactly where it stopped: the iteration, the prompt cursor (prompts drawn per task,
so no prompt is replayed or skipped), the rollouts sampled ahead and not yet trained on, the best
evaluation so far and the summary metrics. It is
stored as trainer_state.json in the checkpoint directory (training/checkpoint.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from passband.training.rl.config import RLAlgoConfig
from passband.training.runtime.activation_checkpointing import enable_checkpointing
from passband.training.checkpoint import ADAPTER_FOLDER
from passband.training.rl.monitoring.timeline import Span

if TYPE_CHECKING:
    from passband.training.rl.batches.batching import RolloutBatch


@dataclass
class BestCheckpoint:
    """The best held-out evaluation so far and the checkpoint that scored it."""

    metric: str
    """The config's best_metric, e.g. `mean/pass@1`."""
    value: float
    iteration: int
    uri: str


@dataclass
class RLState:
    """Everything of the RL loop's progress that is not a tensor."""

    iteration: int = 0
    """Outer iterations completed."""
    consumed: dict[str, int] = field(default_factory=dict)
    """Prompts drawn so far per task: the prompt cursor (training/rl/batches/prompt_cursor.py)."""
    prompt_ids: list[str] = field(default_factory=list)
    """Problem ids of the last iteration's prompts (a resume test compares them)."""
    best: BestCheckpoint | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    """The run's summary metrics so far (a resumed run's summary continues them)."""
    entropy_reward: list[tuple[float, float]] = field(default_factory=list)
    """(entropy, reward) per iteration: the history of the entropy-ceiling fit."""
    drift_history: list[dict[str, float]] = field(default_factory=list)
    """The watched per-task series of every iteration (training/rl/monitoring/drift.py): the drift alerts' history."""
    stopped_early: bool = False
    """The early-stop signal (the entropy ceiling or a drift alert) ended the run before num_iterations."""
    timeline: list[Span] = field(default_factory=list)
    """What each role of the loop did when, over every process of the run (training/rl/monitoring/timeline.py)."""
    in_flight: list[dict[str, Any]] = field(default_factory=list)
    """With rollout.max_off_policy_steps k >= 1, the rollouts of iterations iteration+1 ..
    iteration+k, sampled before this checkpoint and not yet trained on ({"iteration": i} and
    flows/rl_rollouts.Rollouts.to_json): a resumed run trains on them rather than sampling them
    anew with newer weights, so it repeats the uninterrupted run (training/rl/batches/staleness.py)."""

    carried: list[dict[str, Any]] = field(default_factory=list)
    """With rollout.partial, the groups whose answers were still being written when the last iteration
    ended (training/rl/batches/partial.py: OpenGroup.to_json, tokens, engine log-probs and versions so
    far): a resumed run continues them where the uninterrupted one would have, none is lost or resampled."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RLState":
        best = data.get("best")
        return cls(iteration=data["iteration"], consumed=dict(data["consumed"]), prompt_ids=list(data["prompt_ids"]),
                   best=BestCheckpoint(**best) if best else None, metrics=dict(data["metrics"]),
                   entropy_reward=[(h, r) for h, r in data.get("entropy_reward", [])],
                   drift_history=[dict(values) for values in data.get("drift_history", [])],
                   stopped_early=data.get("stopped_early", False),
                   timeline=[Span(**span) for span in data.get("timeline", [])],
                   in_flight=list(data.get("in_flight", [])), carried=list(data.get("carried", [])))


@dataclass
class RLTrainer:
    """The policy (fp32 master weights), its optimizer, the frozen reference and the loop's state."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    ref_model: torch.nn.Module | None
    """The start model, frozen; loaded only when the config's kl_coef > 0."""
    tokenizer: Any
    weights_dir: Path
    """Where the engine loads its first weights from (the start model or the resumed checkpoint)."""
    state: RLState
    base_dir: Path | None = None
    """What LoRA adapters sit on: the run's start model, or with `lora.start: continue` the base its adapter
    was trained on (None: the torchrun ranks', which refuse LoRA)."""


class PolicyTrainer(Protocol):
    """The RL trainer as the loop sees it, wherever it runs: in the flow's process
    (tasks/steps/rl.py: InProcessTrainer) or on torchrun ranks (tasks/steps/rl_torchrun.py: RanksTrainer).
    Built by tasks/steps/rl.py: rl_trainer, the one place that knows which."""

    tokenizer: Any
    weights_dir: Path
    """Where the engine loads its first weights from (the start model or the resumed checkpoint)."""
    base_dir: Path | None
    """What LoRA adapters sit on (None: no adapters)."""
    state: RLState

    @property
    def weights_root(self) -> Path:
        """Where weight versions are published (training/weights/versions.py layout)."""

    def update(self, batch: RolloutBatch, seed: int, version: int) -> dict[str, float]:
        """One `rl_update` on `batch` (Clip-Cov's choice seeded with `seed`); its metrics. The weights it
        leaves are weight version `version`."""

    def publish(self, version: int) -> Path:
        """The weights now, published as `version` under `weights_root` for whoever loads them; its folder."""

    def hand_over(self, engine: Any, version: int, ahead: bool) -> Path | None:
        """The update's weights (version `version`) to the rollouts: with `ahead`, published for the thread
        sampling ahead; else into `engine`. The version folder this process wrote (None: it wrote none)."""

    def release(self) -> None:
        """The device's cached memory back to the driver before an engine wakes on it (issue 67 item 1); the
        ranks release in their own processes after each update, so theirs does nothing."""

    def save(self, out_dir: Path) -> Path:
        """A checkpoint (weights, optimizer, RNG, `state`) of this iteration; its path."""

    def close(self) -> None:
        """Stop what the trainer runs on (its ranks); the flow then holds no trainer."""


def open_trainer(model_dir: Path, tasks: list[str], algo: RLAlgoConfig, resume_dir: Path | None = None,
                 base_dir: Path | None = None, trust_remote_code: bool = False) -> RLTrainer:
    """A fresh trainer at `model_dir`, or one continued from the checkpoint directory `resume_dir`,
    on the config's device (`algo.device`).

    The reference model is always `model_dir`, the start of the run. `trust_remote_code`: the model
    ships its own code and the run allowed it (EngineConfig.trust_remote_code). `base_dir` (LoRA with
    `lora.start: continue`): the base that `model_dir`'s adapter was trained on; the policy is that base
    with `model_dir`'s adapter (or the resumed checkpoint's), and the reference the base (adapters off).
    """
    from passband.training.runtime.checkpoint_shards import restore_training_state
    from passband.training.lora.adapters import (attach_adapters, base_weights_in_bf16, load_adapter_state,
                                                 read_adapter)
    from passband.training.model_source import load_tokenizer
    from passband.training.rl.update import build_optimizer
    from passband.training.runtime.device import resolve_device
    from passband.training.runtime.precision import resolve_precision

    device = resolve_device(algo.device)  # the one decision: policy, reference, AdamW and batches follow it
    weights_dir = Path(resume_dir or model_dir)
    base = Path(base_dir or model_dir)
    # LoRA: the base is the start model (or the one its adapter sits on); a resumed run puts its adapters
    # back on it, a continued one the start checkpoint's
    model = load_policy(base if algo.lora else weights_dir, algo, trust_remote_code=trust_remote_code).to(device)
    if algo.lora:
        attach_adapters(model, algo.lora, algo.lora.seed)
        adapter_from = resume_dir or (model_dir if base != Path(model_dir) else None)
        if adapter_from is not None:
            load_adapter_state(model, read_adapter(Path(adapter_from) / ADAPTER_FOLDER))
        if resolve_precision(algo.precision, device) == "bf16_autocast":  # the same bits in half the memory
            base_weights_in_bf16(model)
    optimizer = build_optimizer(model, algo)
    state = RLState(consumed={name: 0 for name in tasks})
    if resume_dir is not None:  # AdamW and RNG, whatever number of ranks wrote it (the weights are read above)
        state = RLState.from_json(restore_training_state(weights_dir, model, optimizer))
    ref_model = None
    if algo.kl_coef > 0:  # with adapters the reference is the policy itself, adapters off (update.py)
        ref_model = model if algo.lora else load_reference(Path(model_dir), algo, trust_remote_code=trust_remote_code).to(device)
    return RLTrainer(model, optimizer, ref_model, load_tokenizer(Path(model_dir), trust_remote_code), weights_dir,
                     state, base)


def release_for_engine(trainer: RLTrainer) -> None:
    """Hand the device to the engine after an update (before it wakes or loads the new weights): the
    gradients dropped and torch's cached blocks (the update's activations, logits, autograd graph) back
    to the driver, which vLLM's sleep mode allocates from when it wakes. The weights, AdamW state and
    reference stay: the next update needs them (training/memory_model.py counts them beside the engine)."""
    from passband.training.heap import release_device_memory

    trainer.optimizer.zero_grad(set_to_none=True)
    release_device_memory()


def close_trainer(trainer: RLTrainer) -> None:
    """The trainer's device memory back at its end, for the engines that follow (a pipeline's evaluation):
    AdamW's moments and the gradients dropped and the cache emptied. The weights go when the caller drops
    the trainer; the next engine's start-up empties the cache again (vllm_engine.check_device_room)."""
    trainer.optimizer.state.clear()
    release_for_engine(trainer)


def load_policy(weights_dir: Path, algo: RLAlgoConfig, on_meta: bool = False,
                trust_remote_code: bool = False) -> torch.nn.Module:
    """The policy at `weights_dir`, dropout off, with the config's attention and activation checkpointing;
    with `on_meta` its weights are not read: parameters on the meta device (training/runtime/meta_init.py).
    `trust_remote_code`: run the model's own code (EngineConfig.trust_remote_code)."""
    from passband.training.runtime.meta_init import empty_causal_lm
    from passband.training.model_source import load_causal_lm

    # eval(): no dropout, so the trainer's log-probs at theta_k are deterministic (RL needs that).
    model = (empty_causal_lm(weights_dir, trust_remote_code) if on_meta
             else load_causal_lm(weights_dir, trust_remote_code=trust_remote_code)).eval()
    model.set_attn_implementation(algo.attention)
    if algo.activation_checkpointing != "none":
        # transformers checkpoints its decoder layers only in training mode: train() with every
        # dropout probability set to 0 is as deterministic as eval().
        _zero_dropout(model)
        # With no dropout there is no randomness to replay, and torch's default (preserve_rng_state)
        # sets the process-wide CPU generator to each layer's stashed state in backward: with rollouts
        # sampled ahead (max_off_policy_steps >= 1) the engine draws from that generator on another
        # thread at the same moment, so its samples came out different from run to run.
        enable_checkpointing(model, algo.activation_checkpointing, preserve_rng_state=False)
        model.train()
    return model


def load_reference(model_dir: Path, algo: RLAlgoConfig, on_meta: bool = False,
                   trust_remote_code: bool = False) -> torch.nn.Module:
    """The frozen reference policy: the run's start model (`on_meta`: as `load_policy`)."""
    from passband.training.runtime.meta_init import empty_causal_lm
    from passband.training.model_source import load_causal_lm

    ref_model = (empty_causal_lm(model_dir, trust_remote_code) if on_meta
                 else load_causal_lm(model_dir, trust_remote_code=trust_remote_code)).eval().requires_grad_(False)
    ref_model.set_attn_implementation(algo.attention)
    return ref_model


def _zero_dropout(model: torch.nn.Module) -> None:
    """Every dropout of `model` off, in any mode: nn.Dropout modules and attention dropout rates."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        if isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = 0.0


def save_trainer(trainer: RLTrainer, out_dir: Path) -> Path:
    """Write the trainer's checkpoint (weights, optimizer, RNG, RLState; LoRA: merged weights and the
    adapters) into `out_dir`; its path."""
    from passband.training.checkpoint import save_checkpoint
    from passband.training.lora.adapters import adapter_checkpoint

    return save_checkpoint(out_dir, f"iter-{trainer.state.iteration:06d}", trainer.model, trainer.tokenizer,
                           trainer.optimizer, trainer.state.to_json(),
                           **adapter_checkpoint(trainer.model, str(trainer.base_dir)))
