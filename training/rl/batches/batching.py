"""The fixed batch one RL update trains on, and its construction from the engine's samples.

Rows are grouped contiguously: rows g*G .. g*G+G-1 are the G rollouts of prompt g, which is what
`group_advantages` expects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from passband.training.engines.protocol import Sample


@dataclass
class RolloutBatch:
    """B = num_prompts * group_size scored rollouts, one list entry per row."""

    prompt_ids: list[list[int]]
    """Prompt token ids (chat-templated), identical within a group; never empty."""
    response_ids: list[list[int]]
    """Sampled response token ids."""
    engine_logp: list[list[float]]
    """The rollout engine's log-prob of every response token, aligned with response_ids."""
    rewards: list[float]
    """Verifier reward in [0, 1]; may be NaN where valid is False (it is never read there)."""
    valid: list[bool]
    """False: masked out of the gradient entirely (unparsable or truncated, under invalid_reward 'mask')."""
    tasks: list[str]
    """Task name of each row (e.g. 'math', 'code', 'ifeval'), for per-task metrics."""
    group_size: int
    """G: rollouts per prompt."""
    truncated: list[bool] | None = None
    """True where the engine stopped at max_tokens (finish_reason 'length'); None if unknown."""
    temperature: float = 1.0
    """The temperature the responses were sampled at: the trainer's log-probs divide the logits by it,
    so that they are those of the sampled distribution (the engine's `engine_logp` are)."""
    # after temperature: RolloutBatch is built positionally, and a checkpoint's batch by keyword
    unscored: list[bool] | None = None
    """True where the row had no verdict (unparsable, error, timeout; truncated under mask_truncated) but
    invalid_reward 'zero' kept it in the gradient with reward 0; None: every such row is invalid instead."""
    loss_mask: list[list[int]] | None = None
    """Per response token, 1 where the policy sampled it, 0 on a multi-turn episode's environment tokens
    (tool results, the template's turn markers: context, never trained on nor compared with the engine;
    their engine_logp is 0.0); None: every response token was sampled."""

    def __post_init__(self) -> None:
        num_rows = len(self.response_ids)
        fields = {"prompt_ids": self.prompt_ids, "engine_logp": self.engine_logp, "rewards": self.rewards,
                  "valid": self.valid, "tasks": self.tasks}
        for name in ("truncated", "unscored", "loss_mask"):
            if getattr(self, name) is not None:
                fields[name] = getattr(self, name)
        for name, values in fields.items():
            if len(values) != num_rows:
                raise ValueError(f"RolloutBatch.{name} has {len(values)} rows but response_ids has {num_rows}")
        if self.group_size < 1 or num_rows % self.group_size != 0:
            raise ValueError(f"{num_rows} rows are not a whole number of groups of group_size={self.group_size}")
        for i in range(num_rows):
            if not self.prompt_ids[i]:
                raise ValueError(f"row {i}: empty prompt_ids (the first response token needs a context)")
            if len(self.engine_logp[i]) != len(self.response_ids[i]):
                raise ValueError(
                    f"row {i}: {len(self.engine_logp[i])} engine log-probs for {len(self.response_ids[i])} response tokens"
                )
            if self.loss_mask is not None and len(self.loss_mask[i]) != len(self.response_ids[i]):
                raise ValueError(f"row {i}: {len(self.loss_mask[i])} loss-mask entries for {len(self.response_ids[i])} response tokens")
            if self.valid[i] and not math.isfinite(self.rewards[i]):
                raise ValueError(f"row {i}: valid row has non-finite reward {self.rewards[i]!r}")
            first = i - i % self.group_size
            if self.prompt_ids[i] != self.prompt_ids[first]:
                raise ValueError(f"row {i}: prompt differs from row {first}, the first of its group (groups must be contiguous)")

    @property
    def num_rows(self) -> int:
        return len(self.response_ids)


def build_rollout_batch(
    samples_per_prompt: list[list[Sample]],
    rewards: list[list[float | None]],
    valid: list[list[bool]],
    tasks: list[str],
    mask_truncated: bool = True,
    temperature: float = 1.0,
    invalid_reward: Literal["mask", "zero"] = "mask",
) -> RolloutBatch:
    """Flatten the engine's samples (one list of G per prompt) into a `RolloutBatch`.

    rewards/valid: nested like `samples_per_prompt`; a None reward becomes NaN and must be invalid.
    tasks: one task name per prompt. mask_truncated: also mark samples that hit max_tokens
    invalid (docs/recipe.md section 4: a truncated output is unparsable, whatever the verifier extracted).
    temperature: the sampling temperature of the samples (RolloutBatch.temperature).
    invalid_reward: what a row without a verdict becomes: 'mask' invalid (out of the gradient), 'zero' a
    valid row with reward 0, marked in RolloutBatch.unscored (flows.rl.config.RewardConfig.invalid_reward).
    """
    if not (len(samples_per_prompt) == len(rewards) == len(valid) == len(tasks)):
        raise ValueError(
            f"{len(samples_per_prompt)} prompts of samples but {len(rewards)} reward lists, "
            f"{len(valid)} valid lists and {len(tasks)} tasks"
        )
    group_size = len(samples_per_prompt[0]) if samples_per_prompt else 1
    batch: dict[str, list] = {"prompt_ids": [], "response_ids": [], "engine_logp": [], "rewards": [], "valid": [],
                              "tasks": [], "truncated": [], "unscored": []}
    for p, (samples, group_rewards, group_valid) in enumerate(zip(samples_per_prompt, rewards, valid)):
        if not (len(samples) == len(group_rewards) == len(group_valid) == group_size):
            raise ValueError(
                f"prompt {p}: {len(samples)} samples, {len(group_rewards)} rewards, {len(group_valid)} valid flags; "
                f"expected group_size={group_size} of each"
            )
        for sample, reward, is_valid in zip(samples, group_rewards, group_valid):
            truncated = sample.finish_reason == "length"
            if reward is None and is_valid:
                raise ValueError(f"prompt {p} sample {sample.sample_index}: reward None but marked valid")
            batch["prompt_ids"].append(list(sample.prompt_token_ids))
            batch["response_ids"].append(list(sample.token_ids))
            batch["engine_logp"].append(list(sample.logprobs))
            scored = bool(is_valid) and not (mask_truncated and truncated)
            zeroed = not scored and invalid_reward == "zero"
            batch["rewards"].append(0.0 if zeroed else math.nan if reward is None else float(reward))
            batch["valid"].append(scored or zeroed)
            batch["unscored"].append(zeroed)
            batch["tasks"].append(tasks[p])
            batch["truncated"].append(truncated)
    if invalid_reward == "mask":  # no row is zeroed: the batch stays what it was before the setting
        del batch["unscored"]
    flat = [sample for samples in samples_per_prompt for sample in samples]
    if any(sample.loss_mask is not None for sample in flat):  # multi-turn rows: environment tokens masked
        batch["loss_mask"] = [[1] * len(s.token_ids) if s.loss_mask is None else list(s.loss_mask) for s in flat]
    return RolloutBatch(group_size=group_size, temperature=temperature, **batch)
