"""What collecting an iteration's rollouts reads of the RL flow's settings, and nothing else.

The RL flow builds one `RolloutSettings` from its config (flows/rl/config.py: RLConfig.rollout_settings)
and hands it to `collect_rollouts` and `RolloutsAhead`, so the rollout code depends on these fields
alone, not on the whole flow config (which lives a floor above and may not be imported here). Every
field is the config's own object (no copy of a setting's values), so the numbers are the flow's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from passband.curation.catalog import VerifierSettings
from passband.training.engines.config import SamplingConfig
from passband.training.episodes.code_feedback import CodeFeedbackConfig
from passband.training.episodes.math_python import MathToolConfig
from passband.training.episodes.setups import EnvironmentConfig
from passband.training.rl.batches.dynamic_sampling import DynamicSamplingConfig
from passband.training.rl.batches.overlong import OverlongShaping
from passband.training.rl.batches.partial import PartialRolloutConfig


@dataclass(frozen=True)
class RolloutSettings:
    """The RL config's settings of one iteration's rollouts: which prompts, how sampled, how scored, how batched."""

    seed: int
    """The run's seed: the prompt cursor's order and, through `iteration_seed`, each iteration's sampling."""
    task_weights: dict[str, float]
    """Every training task's share of a batch's prompts (relative; RLConfig.weights())."""
    prompts_per_step: int
    """Prompt groups per batch (P)."""
    system_prompt: str | None
    """The chat template's system message (None: the model's default)."""
    sampling: SamplingConfig
    """How rollouts are sampled (`n` is the group size G); its seed is set per iteration."""
    verifiers: VerifierSettings
    """Each task's verifier settings (reward.verifiers), also the episodes' graders."""
    math_tool: MathToolConfig | None
    """Math rows as Python-tool episodes (None: single-turn)."""
    code_feedback: CodeFeedbackConfig | None
    """Code rows as test-feedback episodes (None: single-turn)."""
    environments: dict[str, EnvironmentConfig]
    """Tasks whose rows run as episodes of the user's environment."""
    dynamic_sampling: DynamicSamplingConfig | None
    """DAPO's rounds until the batch holds P groups whose rewards differ (None: one round)."""
    overlong: dict[str, OverlongShaping]
    """Every training task's overlong shaping (reward.overlong_shaping over the datasets)."""
    mask_truncated: bool
    """reward.mask_truncated: a cut answer is masked (under the `masked` shaping)."""
    invalid_reward: Literal["mask", "zero"]
    """reward.invalid_reward: what a rollout without a verdict trains as."""
    partial: PartialRolloutConfig | None = None
    """rollout.partial: sample in rounds, train on the groups complete, carry the rest (None: off)."""


def iteration_seed(seed: int, iteration: int) -> int:
    """The seed of iteration `iteration`'s rollouts and Clip-Cov choice, from the run's `seed`: by the
    iteration, not the engine's history, so a resumed run draws what the uninterrupted one drew there."""
    return seed * 1_000_003 + iteration
