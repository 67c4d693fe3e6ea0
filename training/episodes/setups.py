"""Which tasks run as multi-turn episodes, from the two built-in environments' settings: one
function, so RL's rollouts, RL's held-out evaluation and the evaluate flow open the same episodes."""

from __future__ import annotations

from typing import Any

from passband.training.episodes.code_feedback import CodeFeedbackConfig, CodeFeedbackEnvironment
from passband.training.episodes.math_python import MathPythonEnvironment, MathToolConfig


def episode_setups(math_tool: MathToolConfig | None, code_feedback: CodeFeedbackConfig | None,
                   verifiers: Any) -> dict[str, Any]:
    """Task -> (open an episode of a row, its EpisodeBudget): math rows with the Python tool when
    `math_tool` is set, code rows with test feedback when `code_feedback` is set, each graded by
    `verifiers` (a VerifierSettings: the rollouts' or the evaluation's). Empty: every task single-turn."""
    setups = {}
    if math_tool is not None:
        setups["math"] = (MathPythonEnvironment(math_tool.environment, verifiers.math).open, math_tool.budget)
    if code_feedback is not None:
        setups["code"] = (CodeFeedbackEnvironment(code_feedback.environment, verifiers.code).open,
                          code_feedback.budget)
    return setups
