"""The settings of a judge: which model, how it is sampled, how its analyses become one score.

Plain pydantic beside the runner that reads them (training/judge/judge.py); flows name one per
judged task (`reward.judges: {<task>: JudgeConfig}` in RL, `judges` in evaluate).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from passband.training.engines.config import EngineConfig, SamplingConfig


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)


class MeanAggregation(_Settings):
    """The rollout's score is the mean of the parsed analyses' scores."""

    kind: Literal["mean"] = "mean"
    """Plain mean over the n analyses (an unparsable one counts for nothing)."""


class ScaledAggregation(_Settings):
    """The recipe's scaled verification: every analysis that scored below 1 is meta-checked
    `num_reviews` times by the meta-rubric, and the label is the lowest score that at least `k`
    analyses with confirmed issues give (curation/grading/aggregate.py scaled_label)."""

    kind: Literal["scaled"] = "scaled"
    """Scaled verification."""
    k: int = Field(2, ge=1)
    """Analyses that must agree on a score for it to be the label (no agreement: `unparsable`)."""
    num_reviews: int = Field(2, ge=1)
    """Meta-reviews sampled per analysis that scored below 1 (m)."""


Aggregation = Annotated[MeanAggregation | ScaledAggregation, Field(discriminator="kind")]


class JudgeConfig(_Settings):
    """A model that scores a task's rollouts instead of the task's program."""

    model: str
    """The judge's checkpoint: `smollm2-135m-instruct`, a checkpoint artifact URI or a local dir."""
    engine: EngineConfig = EngineConfig()
    """The judge's own engine, opened beside the policy's (vLLM in its own processes by default;
    `kind: hf` runs it in this process)."""
    sampling: SamplingConfig = SamplingConfig(n=4, temperature=1.0, max_tokens=384)
    """How analyses are sampled; `n` analyses per rollout (meta-reviews use the same settings
    with n = aggregation.num_reviews). The seed is mixed with each (prompt, rollout) pair, so a
    rollout's analyses do not depend on what else is judged with it."""
    aggregation: Aggregation = MeanAggregation()
    """How the n analyses become one score: `mean`, or `scaled` verification with meta-reviews."""
    system_prompt: str | None = None
    """System message of the judge's chat template (None: the model's default)."""

    @model_validator(mode="after")
    def _k_within_n(self) -> "JudgeConfig":
        if isinstance(self.aggregation, ScaledAggregation) and self.aggregation.k > self.sampling.n:
            raise ValueError(f"judge {self.model}: aggregation.k={self.aggregation.k} exceeds "
                             f"sampling.n={self.sampling.n}, so no label could ever be agreed; lower k or raise n")
        return self
