"""Code with test feedback: each model turn is an attempt, run against the problem's tests in the
sandbox by the code verifier; a failing attempt is answered with what failed (the exception and the
test line it failed at, or the first failing case) and the model tries again, up to `max_attempts`.
The reward is the last attempt's verdict: an attempt that passes ends the episode at once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from passband.curation.catalog.code import CODE, CodeTaskSettings
from passband.training.chat import to_messages
from passband.training.episodes.environment import EpisodeBudget, Messages, Step
from passband.training.episodes.verdict import final_step

SYSTEM = ("You are a helpful assistant who writes Python. Reply with your solution in one ```python block. "
          "If it fails the tests you will be told what failed; then reply with the whole corrected solution.")
"""The system message of every episode."""
RETRY = "Your solution failed the tests: {detail}\nFix it and reply with the whole corrected solution in one ```python block."
"""The observation after a failed attempt ({detail}: the verifier's)."""


class CodeFeedbackSettings(BaseModel):
    """How code-with-feedback episodes run."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    max_attempts: int = Field(3, ge=1)
    """Attempts per episode, the first included; the last is graded whatever it gives (the episode's
    turn budget may end it earlier: EpisodeBudget.max_turns)."""
    system: str = SYSTEM
    """The system message."""


@dataclass
class CodeFeedbackEpisode:
    """One problem: attempts until one passes or none is left; each failure is fed back."""

    messages: Messages
    reference: dict[str, Any]
    settings: CodeFeedbackSettings
    code: CodeTaskSettings
    tools: list[dict[str, Any]] = field(default_factory=list)
    attempts: int = 0
    """Attempts graded so far."""

    def step(self, text: str, final: bool) -> Step:
        result = CODE.verify([text], [self.reference], self.code)[0]
        self.attempts += 1
        if result.status == "pass" or final or self.attempts >= self.settings.max_attempts:
            return final_step(result)
        # a failing, unparsable or timed-out attempt is feedback; the next turn is graded afresh
        return Step(done=False, observation=[{"role": "user", "content": RETRY.format(detail=result.detail)}],
                    detail=result.detail)


@dataclass(frozen=True)
class CodeFeedbackEnvironment:
    """Code rows (the code suite's {prompt, reference: {tests | cases, entry_point}}) as episodes with
    test feedback, graded with `code` (the code task's verifier settings)."""

    settings: CodeFeedbackSettings = CodeFeedbackSettings()
    code: CodeTaskSettings = CodeTaskSettings()

    def open(self, row: dict[str, Any]) -> CodeFeedbackEpisode:
        return CodeFeedbackEpisode(to_messages(row["prompt"], self.settings.system), row["reference"], self.settings,
                                   self.code)


class CodeFeedbackConfig(BaseModel):
    """Code rows as multi-turn episodes with test feedback (docs/multi-turn.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    environment: CodeFeedbackSettings = CodeFeedbackSettings()
    """Attempts per episode and the system message."""
    budget: EpisodeBudget = EpisodeBudget(max_turns=3, episode_tokens=768)
    """Turns, tokens (sampled and environment ones) and seconds per environment step of an episode."""
