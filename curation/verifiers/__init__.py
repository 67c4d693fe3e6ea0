"""Verifiers: batched `(completions, references, settings) -> list[VerifyResult]` functions.

`verify` dispatches on the task name; each verifier can also be called directly.
"""

from passband.curation.verifiers.code import CodeSettings, verify_code
from passband.curation.verifiers.math import verify_math
from passband.curation.verifiers.result import STATUSES, VerifyResult

TASKS = ("math", "code", "ifeval")

__all__ = ["STATUSES", "TASKS", "CodeSettings", "VerifyResult", "verify", "verify_code", "verify_math"]


def verify(task: str, completions: list[str], references: list, **settings) -> list[VerifyResult]:
    """Verify with the task's verifier; `settings` are that verifier's keyword arguments."""
    if task == "math":
        return verify_math(completions, references, **settings)
    elif task == "code":
        return verify_code(completions, references, **settings)
    elif task == "ifeval":
        from passband.curation.verifiers.ifeval import verify_ifeval  # written alongside; imported lazily

        return verify_ifeval(completions, references, **settings)
    raise ValueError(f"task must be one of {TASKS}, got {task!r}")
