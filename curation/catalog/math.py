"""Math: procedural word and symbol problems, a final answer checked by math-verify."""

from typing import Literal

from pydantic import Field

from passband.curation.bands import BandFilter
from passband.curation.catalog.task import EvalDefaults, Options, Task
from passband.curation.suites.math_suite import extraction_rule_for, generate_math, render_prompt
from passband.curation.verifiers.math import verify_math
from passband.curation.verifiers.result import VerifyResult

AnswerFormat = Literal["plain", "boxed"]


class MathSettings(Options):
    """How a math completion is read."""

    answer_format: AnswerFormat = "plain"
    """What the prompts asked for; picks the extraction rule (plain -> last number, boxed -> last
    \\boxed{}). Must equal the suite's answer_format, or every answer is read the wrong way."""
    timeout_s: int | None = Field(5, ge=1)
    """Bound on math-verify's parse and compare per sample (main thread only)."""

    @property
    def rule(self) -> str:
        """The extraction rule of `curation.verifiers.math`."""
        return extraction_rule_for(self.answer_format)


class MathSuiteOptions(Options):
    """Options of the procedural math suite."""

    subdomains: list[str] | None = None
    """Sub-domains to draw from (None: all five)."""
    answer_format: AnswerFormat = "plain"
    """The instruction appended to every question ("just the number" or "\\boxed{}")."""
    balanced: bool = True
    """Every sub-domain gets an equal share (an error when one runs out of distinct problems); off,
    a sub-domain that runs out leaves the cycle and the others fill the rest (difficulty 0: 160
    balanced, 361 unbalanced)."""


class MathTask(Task):
    name = "math"
    Settings = MathSettings
    SuiteOptions = MathSuiteOptions
    default_band = BandFilter.parse("(0, 0.8]")
    eval_defaults = EvalDefaults(num_problems=16, difficulty=0, n=4, max_tokens=256)
    text_reference = True
    verifier = staticmethod(verify_math)

    def problems(self, num_problems: int, seed: int, difficulty: int | str,
                 options: MathSuiteOptions) -> list[dict]:
        return generate_math(num_problems, seed, int(difficulty), options.subdomains, options.answer_format,
                             options.balanced)

    def render_prompt(self, question: str, answer_format: AnswerFormat) -> str:
        """The prompt for `question`: the question and the answer-format instruction."""
        return render_prompt(question, answer_format)

    def verify(self, completions: list[str], references: list, settings: MathSettings) -> list[VerifyResult]:
        return verify_math(completions, references, rule=settings.rule, timeout_s=settings.timeout_s)

    def reference_error(self, reference: object) -> str | None:
        if not isinstance(reference, str) or not reference.strip():
            return f"math reference must be a non-empty str, got {reference!r:.80}"
        return None


MATH = MathTask()
