"""Code: function-writing problems (procedural, or HumanEval), run against tests in the sandbox."""

from typing import Literal

from pydantic import Field

from passband.curation.bands import BandFilter
from passband.curation.catalog.task import EvalDefaults, Options, Task
from passband.curation.suites.code_suite import generate_code
from passband.curation.verifiers.code import CodeSettings, verify_code
from passband.curation.verifiers.result import VerifyResult
from passband.curation.verifiers.sandbox import SandboxLimits


class CodeTaskSettings(Options):
    """How code is taken from a completion and run (the fields of verifiers.code.CodeSettings)."""

    extract: Literal["entry_block", "last_block", "whole"] = "entry_block"
    """"entry_block": the last fenced block defining the entry point, else the last block;
    "last_block": the last fenced block; "whole": the completion."""
    limits: SandboxLimits = SandboxLimits()
    """Sandbox limits for each run (one run per sample for tests, per case for cases)."""
    max_workers: int = Field(2, ge=1)
    """Sandboxes running at once."""


class CodeSuiteOptions(Options):
    """The procedural code suite has no options beyond (num_problems, seed, difficulty)."""


class CodeTask(Task):
    name = "code"
    Settings = CodeTaskSettings
    SuiteOptions = CodeSuiteOptions
    default_band = BandFilter.parse("(0, 0.8]")
    eval_defaults = EvalDefaults(num_problems=8, difficulty=0, n=4, max_tokens=256)
    verifier = staticmethod(verify_code)

    def problems(self, num_problems: int, seed: int, difficulty: int | str,
                 options: CodeSuiteOptions) -> list[dict]:
        return generate_code(num_problems, seed, int(difficulty))

    def humaneval(self, num_problems: int | None) -> list[dict]:
        """The first `num_problems` HumanEval problems as code rows (a fixed set: no seed; None: all)."""
        from passband.curation.suites.humaneval import load_humaneval  # reads a gzip of 164 problems

        return load_humaneval()[:num_problems]

    def verify(self, completions: list[str], references: list, settings: CodeTaskSettings) -> list[VerifyResult]:
        code_settings = CodeSettings(extract=settings.extract, limits=settings.limits)
        return verify_code(completions, references, code_settings, max_workers=settings.max_workers)

    def reference_error(self, reference: object) -> str | None:
        """A code reference holds `tests` (Python source) or `cases` (stdin/stdout pairs)."""
        if not isinstance(reference, dict):
            return f"code reference must be an object, got {type(reference).__name__}"
        if "tests" in reference:
            if not isinstance(reference["tests"], str) or not reference["tests"].strip():
                return "code reference 'tests' must be non-empty Python source"
            if not isinstance(reference.get("entry_point", ""), str):
                return "code reference 'entry_point' must be a str"
            return None
        if "cases" in reference:
            cases = reference["cases"]
            if not isinstance(cases, list) or not cases:
                return "code reference 'cases' must be a non-empty list"
            if not all(isinstance(case, dict) and isinstance(case.get("input"), str)
                       and isinstance(case.get("output"), str) for case in cases):
                return "each code case needs str 'input' and 'output'"
            return None
        return "code reference needs 'tests' or 'cases'"


CODE = CodeTask()
