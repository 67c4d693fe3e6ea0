"""Pass-rate band filter, difficulty labels and pass-rate histograms.

The band filter keeps a problem iff its pass rate lies in an interval such as (0, 0.8]: open at 0
because a never-solved problem gives no learning signal, closed or open at the top depending on
how easy a problem may be. Difficulty labels (unsolved / hard / medium / easy / solved) stay in
the dataset so that SFT stages and RL can pick by band.
"""

import math
import re
from fractions import Fraction
from collections.abc import Sequence
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from passband.curation.config import CurationConfig
from passband.curation.rows import quarantine

_INTERVAL = re.compile(r"^\s*([\(\[])\s*([^,\s]+)\s*,\s*([^\]\)\s]+)\s*([\)\]])\s*$")


class BandFilter(BaseModel):
    """An interval of pass rates; a row is kept iff its pass rate lies inside."""

    model_config = ConfigDict(frozen=True)

    alpha: float = Field(ge=0.0, le=1.0, description="Lower end of the kept pass rates.")
    beta: float = Field(ge=0.0, le=1.0, description="Upper end of the kept pass rates.")
    alpha_inclusive: bool = Field(
        default=False, description="Keep pass_rate == alpha (closed lower end); False keeps only > alpha."
    )
    beta_inclusive: bool = Field(
        default=True, description="Keep pass_rate == beta (closed upper end); False keeps only < beta."
    )

    @model_validator(mode="after")
    def _not_empty(self) -> "BandFilter":
        if self.alpha > self.beta:
            raise ValueError(f"BandFilter: alpha ({self.alpha}) > beta ({self.beta}); swap them")
        if self.alpha == self.beta and not (self.alpha_inclusive and self.beta_inclusive):
            raise ValueError(
                f"BandFilter: alpha == beta == {self.alpha} with an open end keeps nothing; "
                "close both ends (alpha_inclusive and beta_inclusive) or widen the band"
            )
        return self

    @classmethod
    def parse(cls, text: str) -> "BandFilter":
        """Parse interval notation: "(0, 0.8]", "[0.1, 1)", "(0, 10/16]" (fractions allowed)."""
        match = _INTERVAL.match(text)
        if match is None:
            raise ValueError(f"BandFilter.parse: {text!r} is not an interval like '(0, 0.8]'")
        left, alpha, beta, right = match.groups()
        try:
            alpha_value, beta_value = float(Fraction(alpha)), float(Fraction(beta))
        except (ValueError, ZeroDivisionError) as error:
            raise ValueError(f"BandFilter.parse: bad number in {text!r}: {error}") from error
        return cls(
            alpha=alpha_value, beta=beta_value, alpha_inclusive=left == "[", beta_inclusive=right == "]"
        )

    def contains(self, p: float) -> bool:
        """Whether pass rate `p` lies in the band."""
        above = p >= self.alpha if self.alpha_inclusive else p > self.alpha
        below = p <= self.beta if self.beta_inclusive else p < self.beta
        return above and below

    def __str__(self) -> str:
        left = "[" if self.alpha_inclusive else "("
        right = "]" if self.beta_inclusive else ")"
        return f"{left}{self.alpha:g}, {self.beta:g}{right}"


def _parsed_band(text: str) -> str:
    BandFilter.parse(text)  # raises ValueError naming what is wrong with the interval
    return text


Band = Annotated[str, AfterValidator(_parsed_band)]
"""A pass-rate band in interval notation ("(0, 0.8]"), checked when a config is read, so a
typo fails before any rollout rather than after."""

def apply_band(rows: list[dict], band: BandFilter, column: str = "pass_rate") -> tuple[list[dict], list[dict]]:
    """Keep rows whose `column` lies in `band`; the rest come back with a removed_reason.

    A row without the column, or with None/NaN there, has no measured pass rate and is removed
    with reason "missing column <column>" (apply_band runs after estimation, so this is a bug
    upstream worth seeing, not a row to keep).
    """
    return _split_by_band(rows, band, column, keep_missing=False)


def prefilter_by_column(
    rows: list[dict], column: str, band: BandFilter, keep_missing: bool = False
) -> tuple[list[dict], list[dict]]:
    """Cheap pre-filter on a pass rate the data already carries (e.g. 0 < p <= 10/16).

    Rows missing the column (absent, None or NaN) are removed with reason "missing column
    <column>" by default, because the pre-filter's point is to spend no rollouts on problems
    outside the band and an unmeasured row is not known to be inside. With keep_missing=True
    they are kept, so that the full pass-rate estimation decides about them.
    """
    return _split_by_band(rows, band, column, keep_missing=keep_missing)


def _split_by_band(
    rows: list[dict], band: BandFilter, column: str, keep_missing: bool
) -> tuple[list[dict], list[dict]]:
    kept, removed = [], []
    for row in rows:
        value = row.get(column)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            if keep_missing:
                kept.append(row)
            else:
                removed.append(quarantine(row, f"missing column {column}"))
        elif band.contains(value):
            kept.append(row)
        else:
            removed.append(quarantine(row, f"outside_band:{column}={value:g} not in {band}"))
    return kept, removed


class DifficultyBands(BaseModel):
    """Difficulty labels from pass-rate edges.

    With edges e_0=0 < e_1 < ... < e_m=1 and m+2 labels: p == 0 gets labels[0];
    e_{i-1} < p <= e_i gets labels[i] for i < m; e_{m-1} < p < 1 gets labels[m]; p == 1 gets
    labels[m+1]. The endpoints have their own labels because p=0 and p=1 carry no signal.
    """

    model_config = ConfigDict(frozen=True)

    edges: tuple[float, ...] = Field(
        default=(0.0, 0.3, 0.7, 1.0),
        description="Strictly increasing pass-rate edges, first 0 and last 1; interior bins are (lo, hi].",
    )
    labels: tuple[str, ...] = Field(
        default=("unsolved", "hard", "medium", "easy", "solved"),
        description="len(edges) + 1 labels: p == 0, each interior bin from low to high, p == 1.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> "DifficultyBands":
        if len(self.edges) < 2 or self.edges[0] != 0.0 or self.edges[-1] != 1.0:
            raise ValueError(f"DifficultyBands: edges must start at 0 and end at 1, got {self.edges}")
        if any(lo >= hi for lo, hi in zip(self.edges, self.edges[1:])):
            raise ValueError(f"DifficultyBands: edges must be strictly increasing, got {self.edges}")
        if len(self.labels) != len(self.edges) + 1:
            raise ValueError(
                f"DifficultyBands: {len(self.edges)} edges need {len(self.edges) + 1} labels, got {len(self.labels)}"
            )
        if len(set(self.labels)) != len(self.labels):
            raise ValueError(f"DifficultyBands: labels must be distinct, got {self.labels}")
        return self


def label_band(p: float, bands: DifficultyBands) -> str:
    """The difficulty label of pass rate `p` (see DifficultyBands for the bin rules)."""
    if not 0.0 <= p <= 1.0:  # also refuses NaN
        raise ValueError(f"label_band: pass rate {p} outside [0, 1]")
    if p == 0.0:
        return bands.labels[0]
    if p == 1.0:
        return bands.labels[-1]
    for index, upper in enumerate(bands.edges[1:], start=1):
        if p <= upper:
            return bands.labels[index]
    raise AssertionError("unreachable: p < 1 == edges[-1]")


def label_rows(
    rows: list[dict], bands: DifficultyBands, column: str = "pass_rate", out: str = "band"
) -> list[dict]:
    """Copies of `rows` with `out` set to the difficulty label of `column` (which must be present)."""
    labeled = []
    for row in rows:
        if row.get(column) is None:
            raise ValueError(f"label_rows: row {row.get('id')!r} has no {column!r}")
        labeled.append({**row, out: label_band(row[column], bands)})
    return labeled


def pass_rate_histogram(
    rows: list[dict], bins: int = 10, column: str = "pass_rate", task_key: str = "task"
) -> dict[str, dict]:
    """Counts of pass rates in `bins` equal-width bins over [0, 1], per task.

    Returns {task: {"bin_edges": [bins + 1 floats], "counts": [bins ints]}}. Bins are [lo, hi)
    except the last, [lo, 1]. The bin index is floor(p * bins) computed after rounding p * bins
    to 9 decimals, so rates like 3/10 land in the bin starting at 0.3 despite float error.
    """
    if bins < 1:
        raise ValueError(f"pass_rate_histogram: bins must be >= 1, got {bins}")
    histogram: dict[str, dict] = {}
    for row in rows:
        p = row[column]
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"pass_rate_histogram: row {row.get('id')!r} has {column}={p} outside [0, 1]")
        entry = histogram.setdefault(
            row[task_key], {"bin_edges": [i / bins for i in range(bins + 1)], "counts": [0] * bins}
        )
        entry["counts"][min(math.floor(round(p * bins, 9)), bins - 1)] += 1
    return histogram


def band_counts(rows: list[dict], column: str = "band", task_key: str = "task") -> dict[str, dict[str, int]]:
    """How many rows carry each difficulty label, per task: {task: {label: count}}."""
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        per_task = counts.setdefault(row[task_key], {})
        per_task[row[column]] = per_task.get(row[column], 0) + 1
    return counts


def pass_rate_metrics(rows_by_task: dict[str, list[dict]], bins: int, labels: Sequence[str]) -> dict[str, float]:
    """Labeled rows per task -> `{task}/pass_rate_mean`, the histogram's `{task}/hist_binNN` counts (tasks
    with rows) and `{task}/band/{label}` counts (every task and label, 0 when empty)."""
    metrics: dict[str, float] = {f"{task}/pass_rate_mean": sum(row["pass_rate"] for row in rows) / max(len(rows), 1)
                                 for task, rows in rows_by_task.items()}
    all_rows = [row for rows in rows_by_task.values() for row in rows]
    for task, entry in pass_rate_histogram(all_rows, bins=bins).items():
        metrics |= {f"{task}/hist_bin{index:02d}": count for index, count in enumerate(entry["counts"])}
    counts = band_counts(all_rows)
    for task in rows_by_task:
        metrics |= {f"{task}/band/{label}": counts.get(task, {}).get(label, 0) for label in labels}
    return metrics


class PrefilterConfig(CurationConfig):
    """A cheap pre-filter on a pass-rate column the data already carries, before any rollout."""

    column: str | None = None
    """Column to filter on, e.g. "pass_rate_qwen" (None: no pre-filter)."""
    band: Band = "(0, 10/16]"
    """Kept interval of that column."""
    keep_missing: bool = False
    """Keep rows without the column (the rollouts decide about them) instead of removing them."""


def prefilter(rows: list[dict], config: PrefilterConfig) -> tuple[list[dict], list[dict]]:
    """(kept, removed) by `config` (its column must be set): prefilter_by_column with its band."""
    return prefilter_by_column(rows, config.column, BandFilter.parse(config.band), config.keep_missing)
