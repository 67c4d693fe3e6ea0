"""The one result type every verifier returns, one per completion.

`unparsable` (no final answer, no code block, truncated output) is kept apart from `fail`
because RL masks unparsable samples out of the gradient instead of rewarding them 0.
"""

from collections.abc import Callable
from dataclasses import dataclass

STATUSES = ("pass", "fail", "unparsable", "timeout", "error")


@dataclass(frozen=True)
class VerifyResult:
    """Verdict on one completion.

    score: reward in [0, 1] (1.0 for a pass; a fraction for partially passed test cases).
    status: one of STATUSES.
    detail: a short human-readable reason (which case failed, what was extracted).
    """

    score: float
    status: str
    detail: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        if not 0.0 <= self.score <= 1.0:
            raise ValueError(f"score must be in [0, 1], got {self.score!r}")


def check_batch(completions: list[str], references: list, reference_error: Callable[[object], str | None]) -> None:
    """Refuse a batch before verifying any of it: one reference per completion, each one usable
    (`reference_error` is the task's reason a reference cannot be used, or None)."""
    if len(completions) != len(references):
        raise ValueError(f"{len(completions)} completions but {len(references)} references")
    for index, reference in enumerate(references):
        error = reference_error(reference)
        if error is not None:
            raise ValueError(f"reference {index}: {error}")
