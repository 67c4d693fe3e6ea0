"""Tasks and rewards from the user's own code, found through Python's own mechanisms.

A row's task may name, besides a built-in task of `TASKS`:
- an entry point of the `passband.tasks` group (`[project.entry-points."passband.tasks"]
  mytask = "mypkg.tasks:MyTask"` in the user package's pyproject.toml), by its name;
- an import path `mypkg.tasks:MyTask`, written as the task itself.
Either names a `Task` (subclass or instance, the shape of catalog/task.py) or a batched reward
function `score(completions, references) -> list` (reward_function.py says what it may return).

Importing runs the user's code inside passband's own process, where it can do anything the flow
can (read the artifact store's credentials, write checkpoints). So it happens only when the
user opted in with PASSBAND_ALLOW_USER_CODE=1; otherwise the name is refused in one line that
says so. (Our sandbox, curation/verifiers/sandbox.py, runs `python -I` with no site packages and
no network, so it cannot import the user's package: in-process by opt-in is the honest choice.)
"""

from __future__ import annotations

import functools
import importlib
import os
from importlib.metadata import entry_points
from typing import Any

from passband.curation.catalog.reward_function import GuardedTask, RewardFunction, check_error_fraction
from passband.curation.catalog.reward_server import RewardServer, RewardServerConfig
from passband.curation.catalog.task import Task
from passband.curation.verifiers.result import VerifyResult

ENTRY_POINT_GROUP = "passband.tasks"
OPT_IN = "PASSBAND_ALLOW_USER_CODE"
"""Environment variable that lets passband import and run a user's task or reward in its own process."""


def user_code_allowed() -> bool:
    """True when the user opted in (PASSBAND_ALLOW_USER_CODE=1)."""
    return os.environ.get(OPT_IN) == "1"


def is_import_path(name: str) -> bool:
    """`module.path:attribute`, the form of an import path in config."""
    module, colon, attribute = name.partition(":")
    return bool(colon and module and attribute)


@functools.cache  # read once per process: row validation asks for every row
def entry_point_names() -> list[str]:
    """The names installed packages declare in the `passband.tasks` group."""
    return sorted(point.name for point in entry_points(group=ENTRY_POINT_GROUP))


def names_user_code(name: str) -> bool:
    """True when `name` is an import path or an installed entry point: a task of the user's code."""
    return is_import_path(name) or name in entry_point_names()


@functools.cache  # rows are validated one by one: import and look the entry points up once
def load_user_task(name: str) -> GuardedTask:
    """The task `name` names (an import path or a `passband.tasks` entry point), under the
    contract of reward_function.GuardedTask. ValueError in one line when the user has not opted
    in, when nothing has that name, or when the object is neither a Task nor a callable."""
    return GuardedTask(name, _user_object(name))


def _user_object(name: str) -> Any:
    """The user's Task, or RewardFunction around the user's function, that `name` names."""
    if not names_user_code(name):
        raise ValueError(f"task {name!r}: no entry point of that name in group {ENTRY_POINT_GROUP!r} "
                         f"(installed: {', '.join(entry_point_names()) or 'none'}) and not an import path module:attribute")
    if not user_code_allowed():
        raise ValueError(f"task {name!r} is your own code, which would run inside passband's process: "
                         f"set {OPT_IN}=1 to allow it")
    found = _load(name)
    if isinstance(found, type) and issubclass(found, Task):
        found = found()
    if isinstance(found, Task) or all(hasattr(found, method) for method in ("verify", "reference_error")):
        return found
    if callable(found):
        return RewardFunction(found)
    raise ValueError(f"task {name!r} is a {type(found).__name__}: expected a Task (class or instance) "
                     "or a batched reward function (completions, references) -> scores")


def _load(name: str) -> Any:
    if is_import_path(name):
        module, _, attribute = name.partition(":")
        found: Any = importlib.import_module(module)
        for part in attribute.split("."):
            found = getattr(found, part)
        return found
    (point,) = [point for point in entry_points(group=ENTRY_POINT_GROUP) if point.name == name]
    return point.load()


def user_scorer(name: str, rewards: dict[str, Any]) -> Task:
    """What scores rows of the task `name`: the reward `rewards` names for it (an import path or
    a reward server; a reward model reads prompts too, so training/judge/score.py scores it),
    else the user's task `name` itself."""
    spec = rewards.get(name)
    if isinstance(spec, RewardServerConfig):
        return RewardServer(name, spec)
    if spec is not None:
        return GuardedTask(name, _user_object(spec))
    return load_user_task(name)


def verify_user_groups(
    tasks_of_rows: list[str], references: list[Any], completions: list[list[str]],
    rewards: dict[str, Any], max_error_fraction: float,
) -> list[list[VerifyResult]]:
    """results[i][j] for completion j of row i, where every row's task is the user's (not built
    in): catalog/verify.py's verify_groups for them, one call per task, and UserRewardError when
    more than `max_error_fraction` of one task's rollouts are `error`."""
    results: list[list[VerifyResult]] = [[] for _ in completions]
    for name in dict.fromkeys(tasks_of_rows):
        rows = [i for i, row_task in enumerate(tasks_of_rows) if row_task == name]
        flat = user_scorer(name, rewards).verify([text for i in rows for text in completions[i]],
                                                 [references[i] for i in rows for _ in completions[i]])
        check_error_fraction(name, flat, max_error_fraction)
        for i in rows:
            results[i], flat = flat[:len(completions[i])], flat[len(completions[i]):]
    return results
