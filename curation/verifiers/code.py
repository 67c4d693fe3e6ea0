"""Code verifier: run the completion's code in the sandbox against the reference.

Reference formats:
- {"tests": "<python>", "entry_point": "name" (optional)}: the tests run after the candidate
  code in one script; pass iff it exits 0 (HumanEval style: when the tests define `check` and
  never call it, `check(<entry_point>)` is appended).
- {"cases": [{"input": "...", "output": "..."}, ...]}: the code runs once per case with the
  input on stdin; stdout must equal the output token for token (whitespace-normalized).
  Score is the fraction of cases passed; status is pass only when all pass.
"""

import re
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tqdm import tqdm

from passband.curation.verifiers.result import VerifyResult, check_batch
from passband.curation.verifiers.sandbox import SandboxLimits, SandboxOutcome, run_python

EXTRACT_MODES = ("entry_block", "last_block", "whole")

_FENCED_BLOCK = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_CALLS_CHECK = re.compile(r"^check\s*\(", re.MULTILINE)
_DEFINES_CHECK = re.compile(r"^def check\s*\(", re.MULTILINE)


@dataclass(frozen=True)
class CodeSettings:
    """How code is taken from a completion and run."""

    extract: str = "entry_block"
    """"entry_block": the last fenced block that defines the reference's entry point (models often
    follow the solution with a usage block such as `print(add(2, 3))`, which alone fails the
    tests), else the last block; "last_block": the last ```python (or bare ```) fenced block;
    "whole": the completion."""
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    """Sandbox limits for each run (one run per sample for tests, per case for cases)."""


def extract_code(completion: str, mode: str = "entry_block", entry_point: str | None = None) -> str | None:
    """The code to run, or None when there is no (non-empty) code block.

    "entry_block" without an entry point (cases-format references name none) is "last_block".
    """
    if mode == "whole":
        code = completion
    elif mode in ("entry_block", "last_block"):
        blocks = _FENCED_BLOCK.findall(completion)
        if mode == "entry_block" and entry_point:
            defines_entry = re.compile(rf"^def {re.escape(entry_point)}\s*\(", re.MULTILINE)
            blocks = [block for block in blocks if defines_entry.search(block)] or blocks
        code = blocks[-1] if blocks else None
    else:
        raise ValueError(f"extract must be one of {EXTRACT_MODES}, got {mode!r}")
    if code is None or not code.strip():
        return None
    return code


def reference_error(reference: object) -> str | None:
    """Why `reference` is not a valid code reference, or None when it is."""
    if not isinstance(reference, dict):
        return f"reference must be an object with 'tests' or 'cases', got {type(reference).__name__}"
    if "tests" in reference:
        if not isinstance(reference["tests"], str):
            return "reference 'tests' must be a string of Python source"
        if not isinstance(reference.get("entry_point", ""), str):
            return "reference 'entry_point' must be a string"
        return None
    if "cases" in reference:
        cases = reference["cases"]
        if not isinstance(cases, list) or not cases:
            return "reference 'cases' must be a non-empty list"
        for number, case in enumerate(cases):
            if not (isinstance(case, dict) and isinstance(case.get("input"), str)
                    and isinstance(case.get("output"), str)):
                return f"reference case {number} must have string 'input' and 'output'"
        return None
    return "reference has neither 'tests' nor 'cases'"

PROGRESS_MIN_SAMPLES = 64
"""Batches at least this large show a progress bar."""


def verify_code(
    completions: list[str],
    references: list[dict],
    settings: CodeSettings = CodeSettings(),
    max_workers: int = 2,
) -> list[VerifyResult]:
    """One result per completion; samples run in parallel, at most max_workers sandboxes at once."""
    check_batch(completions, references, reference_error)
    # Sandboxed runs take ~0.1-1 s each: a bar on stderr (rate, ETA) for batches that take a while.
    with ThreadPoolExecutor(max_workers=max_workers) as pool, tqdm(
            total=len(completions), desc="verify code", unit="sample", file=sys.stderr, mininterval=5,
            disable=len(completions) < PROGRESS_MIN_SAMPLES, leave=False) as bar:
        results = []
        for result in pool.map(lambda pair: _verify_one(*pair, settings), zip(completions, references)):
            results.append(result)
            bar.update()
        return results


def _verify_one(completion: str, reference: dict, settings: CodeSettings) -> VerifyResult:
    code = extract_code(completion, settings.extract, reference.get("entry_point"))
    if code is None:
        return VerifyResult(0.0, "unparsable", "no code block found")
    if "tests" in reference:
        return _run_tests(code, reference["tests"], reference.get("entry_point"), settings.limits)
    return _run_cases(code, reference["cases"], settings.limits)


def _run_tests(code: str, tests: str, entry_point: str | None, limits: SandboxLimits) -> VerifyResult:
    source = f"{code}\n\n{tests}\n"
    if entry_point and _DEFINES_CHECK.search(tests) and not _CALLS_CHECK.search(tests):
        source += f"\ncheck({entry_point})\n"
    outcome = run_python(source, limits=limits)
    if outcome.timed_out:
        return VerifyResult(0.0, "timeout", f"no exit within {limits.wall_timeout_s} s")
    if outcome.returncode == 0:
        return VerifyResult(1.0, "pass", "tests passed")
    return VerifyResult(0.0, "fail", _failure(outcome))


def _run_cases(code: str, cases: list[dict], limits: SandboxLimits) -> VerifyResult:
    num_passed = 0
    num_timed_out = 0
    first_problem = ""
    for number, case in enumerate(cases):
        outcome = run_python(code, stdin=case["input"], limits=limits)
        if outcome.timed_out:
            num_timed_out += 1
            problem = f"case {number}: no exit within {limits.wall_timeout_s} s"
        elif outcome.returncode != 0:
            problem = f"case {number}: {_failure(outcome)}"
        elif outcome.stdout.split() != case["output"].split():
            problem = f"case {number}: expected {case['output'][:80]!r}, got {outcome.stdout[:80]!r}"
        else:
            num_passed += 1
            continue
        first_problem = first_problem or problem
    score = num_passed / len(cases)
    summary = f"{num_passed}/{len(cases)} cases passed"
    if num_passed == len(cases):
        return VerifyResult(1.0, "pass", summary)
    status = "timeout" if num_timed_out else "fail"
    return VerifyResult(score, status, f"{summary}; {first_problem}")


def _failure(outcome: SandboxOutcome) -> str:
    """Exit status and the last line of stderr (usually the exception), kept short, and the source line
    the traceback points at when it shows one (the failing assert: what code feedback shows the model)."""
    lines = outcome.stderr.strip().splitlines()
    last_line = lines[-1][:200] if lines else ""
    # a traceback frame's source is indented 4 spaces; 3.11+ may add a line of carets under it
    source = [line.strip() for line in lines[:-1] if line.startswith("    ") and line.strip().strip("^~ ")]
    where = f" at `{source[-1][:200]}`" if source else ""
    return f"exit {outcome.returncode}: {last_line}{where}"
