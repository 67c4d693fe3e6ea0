"""The task catalog: every task the pipeline knows, registered once in `TASKS`.

Adding a task is one file in this package and one line here; `TaskName`, `VerifierSettings`
and `task()` follow from `TASKS`. A user's task is no line here: `task()` finds it by entry point
or import path (user.py), and `VerifierSettings.rewards` names rewards of the user's own
(a function or a reward server) for tasks of the user's rows.
"""

from typing import Any, Literal

from pydantic import Field, create_model, field_validator

from passband.curation.catalog.code import CODE
from passband.curation.catalog.ifeval import IFEVAL
from passband.curation.catalog.structured import STRUCTURED
from passband.curation.catalog.math import MATH
from passband.curation.catalog.proof_grading import PROOF_GRADING
from passband.curation.catalog.reward_model import RewardModelConfig
from passband.curation.catalog.reward_server import RewardServerConfig
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


# Left out of the dump at their defaults, so that no stored shard's key moves (see _field).
_USER_FIELDS: dict[str, Any] = {
    "rewards": (dict[str, str | RewardServerConfig | RewardModelConfig], Field(
        {}, exclude_if=lambda rewards: not rewards, description=(
            "Task name -> a reward of your own for the rows of that task (docs/your-reward.md): an import path "
            "`mypkg.rewards:score` of a batched function (completions, references) -> scores, a reward server "
            "{url, batch_size, timeout_s, retries, backoff_s, concurrency}, or a reward model {model, batch_size, "
            "max_length, device, engine, combine, verifier_weight, kv_cache_gib} (a sequence-classification checkpoint, "
            "reward sigmoid(logit), alone or combined with the task's verifier). Your code runs in "
            "passband's process only with PASSBAND_ALLOW_USER_CODE=1."))),
    "max_error_fraction": (float, Field(0.5, ge=0, le=1, exclude_if=lambda fraction: fraction == 0.5, description=(
        "Stop the run when more than this fraction of one batch's rollouts of a task of your own (a reward, "
        "a reward server, an entry-point or import-path task) come back `error`; fewer are masked as ours are."))),
}

def _combined_models_have_verifiers(rewards: dict[str, Any]) -> dict[str, Any]:
    """A reward model combined with a verifier (sum, gate) needs a task that has one."""
    from passband.curation.catalog.user import names_user_code  # reads installed metadata

    for name, spec in rewards.items():
        if isinstance(spec, RewardModelConfig) and spec.combine != "replace" and not (
                name in TASKS or names_user_code(name)):
            raise ValueError(f"rewards.{name}: combine {spec.combine!r} adds the task's own verifier, and {name!r} is "
                             "not a catalog task, a passband.tasks entry point or an import path; use combine: replace")
    return rewards


VerifierSettings = create_model(
    "VerifierSettings",
    __base__=Options,
    __doc__="Each task's verifier settings, one field per task, all defaulted.",
    __validators__={"_combined_models_have_verifiers": field_validator("rewards")(_combined_models_have_verifiers)},
    **{name: _field(name, t.Settings) for name, t in TASKS.items()},
    **_USER_FIELDS,
)


def task(name: str) -> Task:
    """The task called `name`: built in, or the user's by entry point or import path (user.py);
    ValueError naming the valid tasks otherwise."""
    if name in TASKS:
        return TASKS[name]
    from passband.curation.catalog.user import load_user_task, names_user_code  # reads installed metadata

    if not names_user_code(name):
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}, an entry point of the "
                         "passband.tasks group or an import path module:attribute")
    return load_user_task(name)


def row_task(name: str, declared: str | None = None) -> Task | None:
    """The task of rows whose `task` is `name`: built in, or the user's by entry point, or by import
    path when the config `declared` it (a source's `task`); None for any other name (one the config
    scores with `VerifierSettings.rewards`, or none). A data row alone never names an import path:
    a file from elsewhere could otherwise run any callable it names (`subprocess:call`) on the
    completions."""
    if name in TASKS:
        return TASKS[name]
    from passband.curation.catalog.user import is_import_path, load_user_task, names_user_code  # installed metadata

    if is_import_path(name) and name != declared:
        return None
    return load_user_task(name) if names_user_code(name) else None


__all__ = ["TASKS", "EvalDefaults", "Task", "TaskName", "VerifierSettings", "row_task", "task"]
