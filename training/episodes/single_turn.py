"""Any single-turn task as an environment: one model turn, graded by the task's verifier."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from passband.curation.catalog.task import Options, Task
from passband.training.chat import to_messages
from passband.training.episodes.environment import Messages, Step
from passband.training.episodes.verdict import final_step


@dataclass
class SingleTurnEpisode:
    """The one-turn case: the first step ends the episode, whatever `final` says."""

    messages: Messages
    reference: Any
    task: Task
    settings: Options
    tools: list[dict[str, Any]] = field(default_factory=list)

    def step(self, text: str, final: bool) -> Step:
        return final_step(self.task.verify([text], [self.reference], self.settings)[0])


@dataclass(frozen=True)
class SingleTurnEnvironment:
    """`task`'s rows as one-turn episodes, verified with `settings`, opened under `system`."""

    task: Task
    settings: Options
    system: str | None = None

    def open(self, row: dict[str, Any]) -> SingleTurnEpisode:
        return SingleTurnEpisode(to_messages(row["prompt"], self.system), row["reference"], self.task, self.settings)
