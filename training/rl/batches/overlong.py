"""What a truncated answer trains as (docs/recipe.md section 4.4), per task, before the batch is built.

Three choices (`OverlongShaping.truncated`):
- `masked` (the default): what `reward.mask_truncated` says, as before the setting existed: an answer
  the engine cut at `max_tokens` (finish_reason 'length') is left out of the gradient (mask_truncated
  false: it keeps its verifier reward like any answer).
- `zero`: a cut answer gets reward 0 and stays in the gradient, whatever its verifier read.
- `soft`: DAPO's soft overlong punishment (training/rl/algebra/overlong.py) added to the task reward:
  an answer in the last `buffer_tokens` before the limit loses up to 1, linearly, even when it
  ended by itself; a cut answer gets -1 added to its verdict (0 where it has none: a cut answer is
  mostly unparsable) and stays in the gradient. Answers without a verdict that were not cut
  (unparsable, error) follow `invalid_reward` as before, with no length term.

A multi-turn episode's `max_tokens` bounds each turn, not the episode's tokens, so its rows get
only the cut rule (-1 when its last turn was cut), not the buffer's slope.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from passband.training.engines.protocol import Sample
from passband.training.rl.algebra.overlong import soft_overlong_penalty

TruncatedReward = Literal["masked", "zero", "soft"]


class OverlongShaping(BaseModel):
    """What an answer that reached `sampling.max_tokens` trains as."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    truncated: TruncatedReward = "masked"
    """'masked': out of the gradient under `reward.mask_truncated` (the default, as before); 'zero':
    reward 0, kept in the gradient; 'soft': DAPO's soft overlong punishment (DAPO eq. 13) added to the
    task reward: 0 up to max_tokens - buffer_tokens, then linear down to -1 at max_tokens, so a cut
    answer gets -1 and is kept in the gradient, and an answer inside the buffer loses some reward
    even when it ended by itself."""
    buffer_tokens: int = Field(0, ge=0)
    """L_cache: the tokens before `sampling.max_tokens` over which 'soft' falls from 0 to -1
    (DAPO: 4096 of 20480). 'soft' needs 1 <= buffer_tokens < sampling.max_tokens; 0 otherwise."""

    @model_validator(mode="after")
    def _buffer_only_for_soft(self) -> "OverlongShaping":
        if self.truncated == "soft" and self.buffer_tokens < 1:
            raise ValueError("overlong truncated: soft needs buffer_tokens >= 1 (the tokens before max_tokens "
                             "over which the penalty falls to -1; DAPO: 4096 of 20480)")
        if self.truncated != "soft" and self.buffer_tokens:
            raise ValueError(f"overlong buffer_tokens={self.buffer_tokens} applies to truncated: soft only "
                             f"(got truncated: {self.truncated}); drop it or set truncated: soft")
        return self

    def check_limit(self, max_tokens: int, where: str) -> None:
        """ValueError in one line when the buffer does not fit below the sampling limit."""
        if self.truncated == "soft" and self.buffer_tokens >= max_tokens:
            raise ValueError(f"{where}.buffer_tokens={self.buffer_tokens} must be below sampling.max_tokens="
                             f"{max_tokens} (the penalty starts at max_tokens - buffer_tokens)")


@dataclass
class ShapedRewards:
    """Rewards and valid flags nested like the samples, to build the batch from with mask_truncated
    off (the masking is decided here, per task), and the shaping's metrics."""

    rewards: list[list[float | None]]
    valid: list[list[bool]]
    metrics: dict[str, float]
    """Per task whose shaping is not 'masked': `{task}/overlong_penalised`, the fraction of its rows
    whose reward the shaping lowered or replaced; under 'soft' also `{task}/overlong_penalty_mean`,
    the mean length reward added over its rows (<= 0)."""


def shape_overlong(samples_per_prompt: Sequence[Sequence[Sample]], rewards: Sequence[Sequence[float | None]],
                   valid: Sequence[Sequence[bool]], tasks: Sequence[str], shaping: dict[str, OverlongShaping],
                   max_tokens: int, mask_truncated: bool = True) -> ShapedRewards:
    """Each prompt's rewards and valid flags after its task's `shaping` (a task not named gets
    OverlongShaping(): masked); `max_tokens` is L_max, the limit the samples were drawn with."""
    out_rewards, out_valid = [], []
    counts: dict[str, list[float]] = {}  # task -> [rows, penalised, sum of length rewards]
    for samples, group_rewards, group_valid, task in zip(samples_per_prompt, rewards, valid, tasks):
        rule = shaping.get(task, OverlongShaping())
        tally = counts.setdefault(task, [0.0, 0.0, 0.0]) if rule.truncated != "masked" else [0.0, 0.0, 0.0]
        shaped_rewards, shaped_valid = [], []
        for sample, reward, is_valid in zip(samples, group_rewards, group_valid):
            cut = sample.finish_reason == "length"
            tally[0] += 1
            if rule.truncated == "masked":
                shaped_rewards.append(reward)
                shaped_valid.append(bool(is_valid) and not (mask_truncated and cut))
            elif rule.truncated == "zero":
                shaped_rewards.append(0.0 if cut else reward)
                shaped_valid.append(True if cut else bool(is_valid))
                tally[1] += cut
            else:
                verdict = float(reward) if is_valid and reward is not None and math.isfinite(reward) else None
                length_reward = -1.0 if cut else 0.0 if sample.loss_mask is not None else soft_overlong_penalty(
                    len(sample.token_ids), max_tokens, rule.buffer_tokens)
                if cut or verdict is not None:  # in the gradient: the verdict (0 if none) plus the length term
                    shaped_rewards.append((verdict or 0.0) + length_reward)
                    shaped_valid.append(True)
                    tally[1] += length_reward < 0
                    tally[2] += length_reward
                else:  # not cut and no verdict: invalid_reward decides, as without the setting
                    shaped_rewards.append(reward)
                    shaped_valid.append(False)
        out_rewards.append(shaped_rewards)
        out_valid.append(shaped_valid)
    metrics = {}
    for task, (num_rows, penalised, total) in sorted(counts.items()):
        metrics[f"{task}/overlong_penalised"] = penalised / num_rows
        if shaping[task].truncated == "soft":
            metrics[f"{task}/overlong_penalty_mean"] = total / num_rows
    return ShapedRewards(out_rewards, out_valid, metrics)
