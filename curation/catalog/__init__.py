"""The task catalog: every task the pipeline knows, registered once in `TASKS`.

Adding a task is one file in this package and one line here; `TaskName`, `VerifierSettings`
and `task()` follow from `TASKS`.
"""

from typing import Literal

from pydantic import create_model

from passband.curation.catalog.code import CODE
from passband.curation.catalog.ifeval import IFEVAL
from passband.curation.catalog.structured import STRUCTURED
from passband.curation.catalog.math import MATH
from passband.curation.catalog.task import EvalDefaults, Options, Task

TASKS: dict[str, Task] = {
    "math": MATH,
    "code": CODE,
    "ifeval": IFEVAL,
    "structured": STRUCTURED,
}

TaskName = Literal[tuple(TASKS)]  # type: ignore[valid-type]
"""A task name, for pydantic config fields."""

VerifierSettings = create_model(
    "VerifierSettings",
    __base__=Options,
    __doc__="Each task's verifier settings, one field per task, all defaulted.",
    **{name: (t.Settings, t.Settings()) for name, t in TASKS.items()},
)


def task(name: str) -> Task:
    """The task called `name`; ValueError naming the valid tasks otherwise."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}")
    return TASKS[name]


__all__ = ["TASKS", "EvalDefaults", "Task", "TaskName", "VerifierSettings", "task"]
