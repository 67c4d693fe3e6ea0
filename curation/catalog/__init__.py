"""The task catalog: every task the pipeline knows, registered once in `TASKS`.

Adding a task is one file in this package and one line here; `TaskName`, `VerifierSettings`
and `task()` follow from `TASKS`.
"""

from typing import Any, Literal

from pydantic import Field, create_model

from passband.curation.catalog.code import CODE
from passband.curation.catalog.ifeval import IFEVAL
from passband.curation.catalog.structured import STRUCTURED
from passband.curation.catalog.math import MATH
from passband.curation.catalog.proof_grading import PROOF_GRADING
from passband.curation.catalog.task import EvalDefaults, Options, Task

TASKS: dict[str, Task] = {
    "math": MATH,
    "code": CODE,
    "ifeval": IFEVAL,
    "structured": STRUCTURED,
    "proof_grading": PROOF_GRADING,
}

TaskName = Literal[tuple(TASKS)]  # type: ignore[valid-type]
"""A task name, for pydantic config fields."""

# The tasks whose settings, defaults included, are in every stored shard's key: pass-rate and eval
# shards hash VerifierSettings' dump, and the key seeds the shard's sampling (tasks/sampling/).
# A task registered later is dumped only when its settings differ from their defaults, so that
# registering it reseeds no stored shard and moves none of the other tasks' numbers.
KEYED_TASKS = ("math", "code", "ifeval", "structured")


def _field(name: str, settings: type[Options]) -> tuple[type[Options], Any]:
    if name in KEYED_TASKS:
        return settings, settings()
    default = settings()
    return settings, Field(default, exclude_if=lambda value: value == default)


VerifierSettings = create_model(
    "VerifierSettings",
    __base__=Options,
    __doc__="Each task's verifier settings, one field per task, all defaulted.",
    **{name: _field(name, t.Settings) for name, t in TASKS.items()},
)


def task(name: str) -> Task:
    """The task called `name`; ValueError naming the valid tasks otherwise."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}")
    return TASKS[name]


__all__ = ["TASKS", "EvalDefaults", "Task", "TaskName", "VerifierSettings", "task"]
