"""Dynamic sampling (DAPO): fill each update with groups that carry signal.

A group whose valid rewards are all equal has advantage 0 on every row and teaches nothing
(docs/recipe.md section 4). With dynamic sampling on, an iteration samples rounds of prompts from
the seeded cursor, keeps the groups whose rewards differ, and stops once it holds
`prompts_per_step` of them or after `max_rounds` rounds. Informative groups past the batch are
dropped (carrying them to the next iteration would train on stale rollouts); when the rounds run out
short, `when_short` says what the batch becomes.

Round 0 draws exactly what the loop without dynamic sampling draws (prompts_per_step x oversample
prompts from the same cursor, the iteration's own seed), so with oversample 1 an iteration whose
first round is full of signal trains on the same batch either way. Every prompt drawn advances the
cursor, so a resumed run draws what the uninterrupted one drew.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

Group = TypeVar("Group")

ROUND_SEED_STRIDE = 1_000_000_007
"""Round r of an iteration samples with the iteration's seed + r x this: a prime far above any
iteration count, so no round repeats another iteration's or round's seed."""


class DynamicSamplingConfig(BaseModel):
    """Over-sample and keep only groups whose rewards differ (DAPO's dynamic sampling)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    max_rounds: int = Field(3, ge=1)
    """Sampling rounds per iteration, the first included; each round draws the prompts still
    missing (x `oversample`) from the cursor."""
    oversample: float = Field(1.0, ge=1.0)
    """Prompts drawn per missing group in every round (DAPO draws a whole extra batch: 2.0 here
    when about half the groups carry no signal)."""
    when_short: Literal["fill", "fail"] = "fill"
    """After `max_rounds` with fewer informative groups than `prompts_per_step`: `fill` tops the
    batch up with zero-variance groups in draw order (what the loop without dynamic sampling would
    train on; they add no gradient), `fail` stops the run naming the iteration (DAPO's choice: the
    data is too easy or too hard for the model)."""


def round_prompts(missing: int, oversample: float) -> int:
    """Prompts a round draws to find `missing` informative groups."""
    return math.ceil(missing * oversample)


def round_seed(iteration_seed: int, round_index: int) -> int:
    return iteration_seed + round_index * ROUND_SEED_STRIDE


@dataclass
class GroupPool(Generic[Group]):
    """The groups one iteration has kept so far, across rounds, in draw order."""

    need: int
    """prompts_per_step: informative groups the batch holds when full."""
    informative: list[Group] = field(default_factory=list)
    zero_variance: list[Group] = field(default_factory=list)
    sampled: int = 0
    """Groups sampled over all rounds."""
    dropped_excess: int = 0
    """Informative groups sampled past a full batch."""

    @property
    def missing(self) -> int:
        return self.need - len(self.informative)

    def add_round(self, groups: list[Group], zero_variance: list[bool]) -> None:
        """One round's groups with their zero-variance flags."""
        if len(groups) != len(zero_variance):
            raise ValueError(f"add_round got {len(groups)} groups and {len(zero_variance)} zero-variance flags")
        self.sampled += len(groups)
        for group, zero in zip(groups, zero_variance):
            if zero:
                self.zero_variance.append(group)
            elif self.missing > 0:
                self.informative.append(group)
            else:
                self.dropped_excess += 1

    def batch(self, when_short: Literal["fill", "fail"], iteration: int, rounds: int) -> list[Group]:
        """The groups to train on: `need` of them, informative first (draw order within each kind)."""
        if self.missing > 0 and when_short == "fail":
            raise RuntimeError(
                f"RL iteration {iteration}: dynamic sampling found {len(self.informative)} of {self.need} groups "
                f"with differing rewards in {rounds} round(s) ({self.sampled} groups sampled); the prompts are "
                "too easy or too hard for the model. Raise dynamic_sampling.max_rounds or oversample, "
                "or set dynamic_sampling.when_short=fill")
        return self.informative + self.zero_variance[: max(self.missing, 0)]

    def metrics(self, rounds: int) -> dict[str, float]:
        kept_informative = len(self.informative)
        return {"dynamic_sampling/rounds": float(rounds), "dynamic_sampling/sampled_groups": float(self.sampled),
                "dynamic_sampling/informative_groups": float(kept_informative),
                "dynamic_sampling/filled_zero_variance_groups": float(min(max(self.missing, 0), len(self.zero_variance))),
                "dynamic_sampling/dropped_excess_groups": float(self.dropped_excess),
                "dynamic_sampling/sampled_zero_variance_frac": len(self.zero_variance) / max(self.sampled, 1)}
