"""The base of a task: what the pipeline needs to know about math, code, ifeval, ...

A task bundles its problem suite (seeded rows), its verifier with typed settings, the recipe's
pass-rate band and its held-out evaluation defaults. Each task is one subclass in one file of
this package and one line in `TASKS` (curation/catalog/__init__.py); nothing else dispatches
on task names.
"""

from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from passband.curation.bands import BandFilter
from passband.curation.verifiers.result import VerifyResult


class Options(BaseModel):
    """Base of every task's `Settings` and `SuiteOptions`: typed, no unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class EvalDefaults(Options):
    """The held-out evaluation a task gets when a flow names no suite of its own (the default sets
    and sampling of flows/evaluate/config.py: EvalConfig, which the evaluate flow, SFT and RL share)."""

    num_problems: int = Field(ge=1)
    """Problems in the held-out suite."""
    difficulty: int | str
    """Difficulty of the held-out suite (the task's own scale)."""
    seed: int = 9001
    """Seed of the held-out suite; far from training seeds (0, 1, ...) so prompts differ."""
    n: int = Field(4, ge=1)
    """Samples per problem (pass@1..pass@n)."""
    max_tokens: int = Field(128, ge=1)
    """Generated tokens per sample."""


class Task:
    """One task. Subclasses set the class attributes and implement the three methods."""

    name: ClassVar[str]
    """The row's `task` value and the key in TASKS."""
    Settings: ClassVar[type[Options]]
    """The verifier's settings; every field has a default."""
    SuiteOptions: ClassVar[type[Options]]
    """Options of the procedural suite beyond (num_problems, seed, difficulty)."""
    default_band: ClassVar[BandFilter]
    """The recipe's pass-rate band (docs/recipe.md section 2) for curating this task."""
    eval_defaults: ClassVar[EvalDefaults]
    """Held-out evaluation defaults."""
    text_reference: ClassVar[bool] = False
    """True when a reference is plain text (math's answer); False: an object, which user files
    may store as JSON text."""
    verifier: ClassVar[Callable[..., list[VerifyResult]]]
    """The batched verifier function itself, `(completions, references, **keyword settings)`;
    `verify` calls it with `Settings` translated (kept for `curation.verifiers.verify`)."""

    def problems(self, num_problems: int, seed: int, difficulty: int | str, options: Options) -> list[dict]:
        """Seeded suite rows {id, task, subdomain, prompt, reference, source} (+ extras)."""
        raise NotImplementedError

    def verify(self, completions: list[str], references: list[Any], settings: Options) -> list[VerifyResult]:
        """One result per completion, all in one batched call."""
        raise NotImplementedError

    def reference_error(self, reference: Any) -> str | None:
        """Why `reference` cannot be a reference of this task (row validation), or None."""
        raise NotImplementedError

    def assemble(self, row: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
        """A loaded row before validation, with what the task builds from its own columns (proof
        grading renders its prompt from `problem` and `solution`); (None, reason) when it cannot.
        Most tasks' rows are whole as loaded."""
        return row, None

    def __repr__(self) -> str:
        return f"<task {self.name}>"
