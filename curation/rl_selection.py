"""The RL sets: each task's pass-rate band, then stratified sampling and size alignment across tasks.

A task whose band holds no problem is not a reason to empty the others: alignment takes the
smallest *non-empty* pool, and the empty task comes back named, with its pass-rate histogram and
band, so the flow can warn (or, with `on_empty_task: fail`, refuse). Aligning to an empty pool
silently turned every other task's in-band rows into "not_sampled" (a smoke run that curated
nothing for RL while looking like a success).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from passband.curation.balance import BalanceConfig, align_sizes, stratified_sample
from passband.curation.bands import BandFilter, apply_band
from passband.curation.catalog import task as catalog_task


@dataclass(frozen=True)
class EmptyBand:
    """A task none of whose problems lies in its band."""

    task: str
    band: BandFilter
    pass_rates: dict[float, int]
    """How many of the task's problems got each pass rate, ascending (pass rates are k/n)."""

    def describe(self) -> str:
        """One line: the task, its band and where its problems fell instead."""
        total = sum(self.pass_rates.values())
        histogram = ", ".join(f"{rate:g} x{count}" for rate, count in self.pass_rates.items()) or "none"
        return (f"{self.task}: none of its {total} problems has a pass rate in its band {self.band} "
                f"(pass rates: {histogram})")


@dataclass
class RLSelection:
    """The RL rows per task, what was removed on the way (quarantined rows), and the empty tasks."""

    sets: dict[str, list[dict]]
    removed_by_band: list[dict] = field(default_factory=list)
    removed_by_balance: list[dict] = field(default_factory=list)
    empty: list[EmptyBand] = field(default_factory=list)
    aligned_to: int | None = None
    """The size the pools were aligned to (None: no alignment)."""


class EmptyBandError(ValueError):
    """`on_empty_task: fail` and a task's band holds no problem."""


def rl_bands(bands: dict[str, str | None]) -> dict[str, BandFilter]:
    """Each task's RL band: the one configured ("(0, 0.8]"), else the catalog task's recipe band."""
    return {name: BandFilter.parse(band) if band else catalog_task(name).default_band for name, band in bands.items()}


def select_rl_sets(
    rows_by_task: dict[str, list[dict]], bands: dict[str, BandFilter], balance: BalanceConfig,
    weights: dict[str, float] | None = None, proportions: dict[str, dict[str, float] | None] | None = None,
) -> RLSelection:
    """Rows with a `pass_rate` per task -> the RL rows per task (docs/recipe.md section 2).

    Per task the band keeps rows; then, with `balance.stratify_key`, a stratified draw of
    `round(target * weight)` rows (all in-band rows when alignment is off), else a uniform draw of
    `target`. The target is `balance.target_size`, or the smallest non-empty in-band pool. Tasks
    whose band holds nothing are listed in `empty` (their RL set is empty) and, with
    `balance.on_empty_task == "fail"`, raise EmptyBandError naming each.
    """
    weights, proportions = weights or {}, proportions or {}
    selection = RLSelection(sets={})
    in_band: dict[str, list[dict]] = {}
    for task_name, rows in rows_by_task.items():
        in_band[task_name], out = apply_band(rows, bands[task_name])
        selection.removed_by_band.extend(out)
        if not in_band[task_name]:
            selection.empty.append(EmptyBand(task_name, bands[task_name], _pass_rate_counts(rows)))
    if selection.empty and balance.on_empty_task == "fail":
        raise EmptyBandError("; ".join(empty.describe() for empty in selection.empty)
                             + " (balance.on_empty_task: fail; widen the band, add problems or samples, "
                             "or set it to 'warn' to align the other tasks without it)")
    if not balance.align_sizes:
        target = None
    else:
        target = balance.target_size or min((len(rows) for rows in in_band.values() if rows), default=0)
    selection.aligned_to = target
    if balance.stratify_key is None:
        if target is None:
            selection.sets = in_band
        else:
            selection.sets, selection.removed_by_balance = align_sizes(in_band, target, balance.seed)
        return selection
    for task_name, rows in in_band.items():
        total = len(rows) if target is None else min(len(rows), round(target * weights.get(task_name, 1.0)))
        selection.sets[task_name], out = stratified_sample(
            rows, balance.stratify_key, total=total, proportions=proportions.get(task_name), seed=balance.seed)
        selection.removed_by_balance.extend(out)
    return selection


def _pass_rate_counts(rows: list[dict]) -> dict[float, int]:
    counts = Counter(row["pass_rate"] for row in rows if row.get("pass_rate") is not None)
    return dict(sorted(counts.items()))


RL_STAGES = ("hygiene", "prefilter", "band", "balance")
"""The stages that remove a problem on its way to an RL set, in order."""


def rl_funnel(pool_sizes: dict[str, int], removed: list[dict], rl_sets: dict[str, list[dict]]) -> list[dict]:
    """Per task: the training pool (after the eval split), the problems each RL stage removed
    (removed records carry `task` and `stage`), and the rows kept for RL."""
    rows = []
    for task_name, pool in pool_sizes.items():
        counts = Counter(row["stage"] for row in removed if row["task"] == task_name and row["stage"] in RL_STAGES)
        rows.append({"task": task_name, "pool": pool, **{stage: counts[stage] for stage in RL_STAGES},
                     "rl": len(rl_sets.get(task_name, []))})
    return rows


def funnel_markdown(funnel: list[dict]) -> str:
    """The funnel as a markdown table (terminal and Prefect UI alike)."""
    header = ["task", "pool", *RL_STAGES, "rl"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(row[name]) for name in header) + " |" for row in funnel]
    return "\n".join(lines)
