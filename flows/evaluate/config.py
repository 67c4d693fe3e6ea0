"""The one eval config: held-out sets, how they are sampled and how they are scored.

It is a flows config (flows/config.py: Config), so a partial mapping merges over the values each
flow's default chose and a `null` suite entry removes it, wherever the EvalConfig sits.

The evaluate flow is an EvalConfig with a checkpoint and a baseline around it; SFT and RL hold one
as their `eval`. Each flow's defaults are values of this class (RL: shorter samples; SFT's presets:
boxed math at T=0.6), never a class of their own. The default sets and sampling come from the
catalog's per-task `eval_defaults` (curation/catalog/<task>.py), the one place a task says how it
is evaluated. The math answer-format agreement is checked here, once (`check_answer_format`).
"""

from __future__ import annotations

from typing import ClassVar

from collections.abc import Iterable

from pydantic import Field, model_validator

from passband.curation.catalog import TASKS, TaskName, VerifierSettings
from passband.flows.common_config import ProblemSource, SamplingConfig
from passband.flows.config import Config
from passband.training.judge.config import JudgeConfig

DEFAULT_TASKS = ("math", "code", "ifeval")
"""The tasks evaluated when a flow names no sets of its own."""


def default_suites(tasks: Iterable[str] = DEFAULT_TASKS) -> dict[str, ProblemSource]:
    """Each task's held-out suite from its catalog `eval_defaults`, named after the task."""
    suites = {}
    for name in tasks:
        defaults = TASKS[name].eval_defaults
        suites[name] = ProblemSource(suite=name, num_problems=defaults.num_problems, seed=defaults.seed,
                                     difficulty=defaults.difficulty)
    return suites


def default_sampling(tasks: Iterable[str] = DEFAULT_TASKS) -> SamplingConfig:
    """One sampling for every default set: the most samples and tokens any of their tasks asks for,
    at temperature 1 (the model's own distribution, the one RL trains)."""
    defaults = [TASKS[name].eval_defaults for name in tasks]
    return SamplingConfig(n=max(d.n for d in defaults), temperature=1.0, max_tokens=max(d.max_tokens for d in defaults))


def check_answer_format(sources: Iterable[ProblemSource], verifiers: VerifierSettings, where: str) -> None:
    """ValueError when a generated math suite or a math benchmark asks for another answer format than
    the math verifier reads (plain: the last number, boxed: the last \\boxed{}); `where` names the
    verifier setting."""
    asked = {source.answer_format for source in sources if source.asks_math_format}
    if asked - {verifiers.math.answer_format}:
        raise ValueError(f"math suites ask for {sorted(asked)} but {where}.math.answer_format is "
                         f"{verifiers.math.answer_format!r}; make them agree")


class EvalConfig(Config):
    """Held-out evaluation: the sets, their sampling and their verifiers."""

    suites: dict[str, ProblemSource] = default_suites()
    """Eval sets generated or loaded, name -> source (`humaneval` is a suite too). Names become
    metric prefixes (`math/pass@1`); a name may not also be a dataset name. Training rows whose
    prompt is an eval prompt are dropped. Set {} to evaluate only `datasets`. Default: each of math,
    code and ifeval at its catalog eval defaults."""
    datasets: dict[str, str] = {}
    """Eval sets from dataset artifacts in the suite row schema, name -> URI (curate's `eval_math`, ...)."""
    verifiers: VerifierSettings = VerifierSettings()
    """Each task's verifier settings; math.answer_format must match what the math suites ask for."""
    # Left out of the dump while empty: an evaluation without judges keeps its cache and run keys.
    judges: dict[TaskName, JudgeConfig] = Field({}, exclude_if=lambda judges: not judges)
    """Task -> a judge model that scores that task's samples instead of its verifier (docs/recipe.md
    section 9); the judge's texts and scores become columns of the per-sample rows. Local sampling
    only (the evaluate flow refuses task-worker shards with judges)."""
    sampling: SamplingConfig = default_sampling()
    """n samples per problem give pass@1..pass@n (default: the catalog's eval defaults, at T=1)."""

    no_sets_hint: ClassVar[str] = " (or set eval: null)"
    """How to go without eval sets, in the error that asks for one: SFT's and RL's `eval` can be off."""

    @model_validator(mode="after")
    def _consistent(self) -> EvalConfig:
        if not self.datasets and not self.suites:
            raise ValueError(f"give at least one eval set in datasets or suites{self.no_sets_hint}")
        clashes = sorted(self.datasets.keys() & self.suites.keys())
        if clashes:
            raise ValueError(f"eval set name(s) {clashes} appear in both datasets and suites; rename one")
        check_answer_format(self.suites.values(), self.verifiers, "verifiers")
        return self

    def set_names(self) -> set[str]:
        """Every eval set's name (suites and datasets)."""
        return {*self.suites, *self.datasets}
