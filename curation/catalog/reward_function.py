"""The verifier contract around a user's code: whatever it returns or raises becomes one
VerifyResult per completion, so statuses, masking and quarantine work as they do for ours.

A batched reward function `score(completions, references)` returns one item per completion:
- a number in [0, 1]: the score, status `pass` at 1.0 and `fail` below (both are verdicts);
- None: `unparsable` (no answer to judge; RL masks it out of the gradient, as TRL's None);
- (score, status) or (score, status, detail), or {"score", "status", "detail"}: a status of
  curation.verifiers.result.STATUSES given by the user;
- a VerifyResult.
An item outside these forms (a string, a score of 1.7 or NaN, an unknown status) is that row's
`error` with the reason, never a score. A call that raises makes every row of the call `error`
with the exception's one line; a call that returns the wrong number of items likewise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from passband.curation.bands import BandFilter
from passband.curation.catalog.task import Options, Task
from passband.curation.verifiers.result import STATUSES, VerifyResult


USER_DEFAULT_BAND = BandFilter.parse("(0, 0.8]")
"""The pass-rate band curate keeps for RL from a task of the user's that declares no `default_band`:
the recipe's band of math and code (docs/recipe.md section 2)."""


class NoSettings(Options):
    """A user task or reward without verifier settings of its own."""


class UserRewardError(RuntimeError):
    """More of a batch errored than `max_error_fraction` allows: the run stops here."""


def one_line(error: BaseException) -> str:
    """`Type: first line of the message`: what a row's detail keeps of an exception."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def as_result(item: Any) -> VerifyResult:
    """One item a user's reward returned, as a VerifyResult (module docstring); `error` with the
    reason when the item is none of the accepted forms."""
    if isinstance(item, VerifyResult):
        return item
    if item is None:
        return VerifyResult(0.0, "unparsable", "the reward returned None")
    if isinstance(item, dict):
        item = (item.get("score"), item.get("status", "pass" if item.get("score") == 1 else "fail"),
                item.get("detail", ""))
    if isinstance(item, bool | int | float):
        item = (item, "pass" if item == 1 else "fail")
    if not isinstance(item, tuple | list) or not 2 <= len(item) <= 3:
        return VerifyResult(0.0, "error", f"the reward returned {type(item).__name__} {str(item)[:80]!r}, not a score")
    score, status, detail = (*item, "")[:3]
    if status == "unparsable" and score is None:
        return VerifyResult(0.0, "unparsable", str(detail))
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score) or not 0 <= score <= 1:
        return VerifyResult(0.0, "error", f"the reward returned score {score!r}, not a number in [0, 1]")
    if status not in STATUSES:
        return VerifyResult(0.0, "error", f"the reward returned status {status!r}, not one of {STATUSES}")
    return VerifyResult(float(score), status, str(detail))


def guarded_results(call: Callable[[], Sequence[Any]], count: int) -> list[VerifyResult]:
    """`call()`'s items as `count` VerifyResults; every row `error` when it raises or returns another count."""
    try:
        items = list(call())
    except Exception as error:  # the contract: a user's exception is a verdict `error`, not a crash
        return [VerifyResult(0.0, "error", one_line(error))] * count
    if len(items) != count:
        return [VerifyResult(0.0, "error", f"the reward returned {len(items)} results for {count} completions")] * count
    return [as_result(item) for item in items]


def check_error_fraction(name: str, results: list[VerifyResult], max_error_fraction: float) -> None:
    """UserRewardError in one line when more than `max_error_fraction` of `results` are `error`
    (a reward that fails that often is broken, and training on the rest would hide it)."""
    errors = [r for r in results if r.status == "error"]
    if results and len(errors) / len(results) > max_error_fraction:
        raise UserRewardError(f"task {name!r}: {len(errors)} of {len(results)} rollouts of the batch are `error` "
                              f"(over max_error_fraction {max_error_fraction}); first: {errors[0].detail}")


class RewardFunction(Task):
    """A task made of a batched reward function alone: the user's rows carry prompts and
    references, the function scores completions against them."""

    Settings: ClassVar[type[Options]] = NoSettings
    text_reference: ClassVar[bool] = True  # a reference is passed as the row stores it

    def __init__(self, function: Callable[[list[str], list[Any]], Sequence[Any]]) -> None:
        self.function = function

    def verify(self, completions: list[str], references: list[Any], settings: Options) -> list[VerifyResult]:
        return [as_result(item) for item in self.function(completions, references)]

    def reference_error(self, reference: Any) -> str | None:
        return None  # any reference is the function's business


class GuardedTask(Task):
    """A user's task (or RewardFunction) under the contract: its verify never raises, its
    results are VerifyResults, its rows are named `name` (the entry point or import path)."""

    def __init__(self, name: str, user_task: Any) -> None:
        self.name = name  # type: ignore[misc]  # an instance's name: the one its rows carry
        self.user_task = user_task
        self.Settings = getattr(user_task, "Settings", NoSettings)  # type: ignore[misc]
        self.text_reference = getattr(user_task, "text_reference", False)  # type: ignore[misc]
        # curate's RL band when the config sets none: the task's own, else the recipe's for our tasks
        self.default_band = getattr(user_task, "default_band", USER_DEFAULT_BAND)  # type: ignore[misc]

    def verify(self, completions: list[str], references: list[Any], settings: Options | None = None) -> list[VerifyResult]:
        chosen = self.Settings() if settings is None else settings
        return guarded_results(lambda: self.user_task.verify(completions, references, chosen), len(completions))

    def reference_error(self, reference: Any) -> str | None:
        return self.user_task.reference_error(reference)

    def assemble(self, row: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
        return self.user_task.assemble(row) if hasattr(self.user_task, "assemble") else (row, None)
