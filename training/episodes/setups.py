"""Which tasks run as multi-turn episodes: the two built-in environments' settings and the user's
own environments, in one function, so RL's rollouts, RL's held-out evaluation, the evaluate flow and
curation open the same episodes."""

from __future__ import annotations

import hashlib
import importlib
import inspect
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from passband.curation.catalog.user import OPT_IN, is_import_path, user_code_allowed
from passband.training.episodes.code_feedback import CodeFeedbackConfig, CodeFeedbackEnvironment
from passband.training.episodes.environment import EpisodeBudget
from passband.training.episodes.math_python import MathPythonEnvironment, MathToolConfig


class EnvironmentConfig(BaseModel):
    """A task's rows as episodes of an environment of the user's own code (docs/multi-turn.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    environment: str
    """Import path `module:attribute` of an Environment (training/episodes/environment.py: a class
    built with no arguments, or an instance) whose `open(row)` returns an Episode. It runs in
    passband's process, so it needs PASSBAND_ALLOW_USER_CODE=1, as a task of the user's does. The
    reward is the task's verifier on the episode's last turn, as for the built-in environments."""
    budget: EpisodeBudget = EpisodeBudget()
    """Turns, tokens (sampled and environment ones) and seconds per step of each episode."""

    @field_validator("environment")
    @classmethod
    def _import_path(cls, value: str) -> str:
        if not is_import_path(value):
            raise ValueError(f"environment {value!r} is not an import path module:attribute (e.g. mypkg.envs:Wordle)")
        return value


def load_environment(path: str) -> Any:
    """The Environment `path` names (a class is built with no arguments); ValueError in one line when
    the user has not opted in or the object has no `open`."""
    if not user_code_allowed():
        raise ValueError(f"environment {path!r} is your own code, which would run inside passband's process: "
                         f"set {OPT_IN}=1 to allow it")
    module, _, attribute = path.partition(":")
    found: Any = importlib.import_module(module)
    for part in attribute.split("."):
        found = getattr(found, part)
    found = found() if inspect.isclass(found) else found
    if not callable(getattr(found, "open", None)):
        raise ValueError(f"environment {path!r} is a {type(found).__name__} without open(row) -> Episode "
                         "(training/episodes/environment.py: Environment)")
    return found


def environment_source_version(path: str) -> str:
    """12 hex of a sha256 of the module that defines environment `path`: a shard sampled with it is
    keyed by its code, so an edit resamples (imported only under the opt-in, as load_environment)."""
    defining = load_environment(path).__class__.__module__
    return hashlib.sha256(inspect.getsource(importlib.import_module(defining)).encode()).hexdigest()[:12]


def episode_setups(math_tool: MathToolConfig | None, code_feedback: CodeFeedbackConfig | None, verifiers: Any,
                   environments: dict[str, EnvironmentConfig] | None = None) -> dict[str, Any]:
    """Task -> (open an episode of a row, its EpisodeBudget): math rows with the Python tool when
    `math_tool` is set, code rows with test feedback when `code_feedback` is set, each graded by
    `verifiers` (a VerifierSettings: the rollouts' or the evaluation's), and each task of
    `environments` with the user's environment. Empty: every task single-turn."""
    setups = {}
    if math_tool is not None:
        setups["math"] = (MathPythonEnvironment(math_tool.environment, verifiers.math).open, math_tool.budget)
    if code_feedback is not None:
        setups["code"] = (CodeFeedbackEnvironment(code_feedback.environment, verifiers.code).open,
                          code_feedback.budget)
    for task, config in (environments or {}).items():
        setups[task] = (load_environment(config.environment).open, config.budget)
    return setups


def check_environments(math_tool: Any, code_feedback: Any, environments: dict[str, EnvironmentConfig]) -> None:
    """Refuse a task given two environments (a config validator's check, torch- and import-free)."""
    twice = sorted({*(["math"] if math_tool is not None else []), *(["code"] if code_feedback is not None else [])}
                   & set(environments))
    if twice:
        raise ValueError(f"environments.{twice[0]} and the built-in "
                         f"{'math_tool' if twice[0] == 'math' else 'code_feedback'} both run {twice[0]!r} rows "
                         "as episodes; keep one")
