"""Instruction following: writing tasks with IFEval constraints, checked strict or loose."""

from typing import Literal

from pydantic import Field

from passband.curation.bands import BandFilter
from passband.curation.catalog.task import EvalDefaults, Options, Task
from passband.curation.suites.ifeval_suite import generate_ifeval
from passband.curation.verifiers.ifeval import reference_error, verify_ifeval
from passband.curation.verifiers.result import VerifyResult

# Integer difficulties (shared with math and code configs) map onto the named pools.
LEVELS = ("easy", "mixed", "hard")


class IfevalSettings(Options):
    """How instructions are checked."""

    mode: Literal["strict", "loose"] = "strict"
    """IFEval's mode; loose also tries the text without its first/last line and without '*'."""


class IfevalSuiteOptions(Options):
    """Options of the procedural instruction-following suite."""

    max_constraints: int = Field(3, ge=1)
    """Constraints per prompt are uniform in 1..max_constraints."""


class IfevalTask(Task):
    name = "ifeval"
    Settings = IfevalSettings
    SuiteOptions = IfevalSuiteOptions
    # Stricter than math and code so that kept prompts still challenge (docs/recipe.md section 2).
    default_band = BandFilter.parse("(0, 0.4]")
    eval_defaults = EvalDefaults(num_problems=8, difficulty="easy", n=4, max_tokens=256)
    verifier = staticmethod(verify_ifeval)

    def problems(self, num_problems: int, seed: int, difficulty: int | str,
                 options: IfevalSuiteOptions) -> list[dict]:
        level = difficulty if isinstance(difficulty, str) else LEVELS[min(int(difficulty), len(LEVELS) - 1)]
        return generate_ifeval(num_problems, seed, options.max_constraints, difficulty=level)

    def verify(self, completions: list[str], references: list, settings: IfevalSettings) -> list[VerifyResult]:
        return verify_ifeval(completions, references, mode=settings.mode)

    def reference_error(self, reference: object) -> str | None:
        # The verifier's own check (ids, kwarg names, types and values), so a row that would
        # crash scoring is quarantined when it loads.
        return reference_error(reference)


IFEVAL = IfevalTask()
