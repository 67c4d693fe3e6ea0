"""The settings of a reward model: a sequence-classification checkpoint whose one logit scores a
(prompt, completion) pair. The scoring itself needs torch and lives with the judge
(training/judge/reward_model.py); this config sits here so that `VerifierSettings.rewards` can name it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from passband.curation.catalog.task import Options


class RewardModelConfig(Options):
    """A scalar reward model run through transformers: reward = sigmoid(logit), in (0, 1)."""

    model: str
    """A local folder holding a sequence-classification checkpoint with one label (num_labels=1)."""
    batch_size: int = Field(8, ge=1)
    """(prompt, completion) pairs per forward pass."""
    max_length: int = Field(1024, ge=1)
    """Tokens kept of each pair (its end is cut: the completion's tail)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the model runs, decided as the trainers decide (auto: CUDA when torch sees a GPU)."""
