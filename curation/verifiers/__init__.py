"""Verifiers: batched `(completions, references, settings) -> list[VerifyResult]` functions.

Each verifier can be called directly. `verify` picks one by task name through the task
catalog (curation/catalog); new code should use the catalog (`task(name).verify` with typed
settings, or `catalog.verify.verify_groups`) instead.
"""

from passband.curation.verifiers.code import CodeSettings, verify_code
from passband.curation.verifiers.math import verify_math
from passband.curation.verifiers.result import STATUSES, VerifyResult

# The tasks `passband verify` (flows/verify_cmd.py) knows how to read rows of; the catalog's
# TASKS is the full list.
TASKS = ("math", "code", "ifeval")

__all__ = ["STATUSES", "TASKS", "CodeSettings", "VerifyResult", "verify", "verify_code", "verify_math"]


def verify(task: str, completions: list[str], references: list, **settings) -> list[VerifyResult]:
    """Verify with the task's verifier function; `settings` are its keyword arguments
    (math: rule, timeout_s; code: settings, max_workers; ifeval: mode)."""
    # The catalog imports the verifier modules of this package, so it is imported on use.
    from passband.curation.catalog import task as catalog_task

    return catalog_task(task).verifier(completions, references, **settings)
