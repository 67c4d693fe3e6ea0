"""A verifier's result as the step that ends an episode."""

from __future__ import annotations

from passband.curation.verifiers.result import VerifyResult
from passband.training.episodes.environment import Step

VERDICT_STATUSES = ("pass", "fail", "timeout")
"""Statuses whose score is a reward (RL's SCORED_STATUSES: a verifier timeout is the program's own)."""


def final_step(result: VerifyResult, tool_calls: int = 0) -> Step:
    """The step ending an episode with `result`: its score as reward where the status is a verdict."""
    reward = result.score if result.status in VERDICT_STATUSES else None
    return Step(done=True, reward=reward, status=result.status, detail=result.detail, tool_calls=tool_calls)
