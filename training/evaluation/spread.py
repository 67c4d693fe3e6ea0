"""What another training run gives: the spread of pipeline results across training seeds.

Input is one pipeline results table per training seed (results.pass_at_1_table: `{checkpoint}/{set}/
{statistic}` with `_ci_low`/`_ci_high`, and `{checkpoint}/delta/{set}/{statistic}...` against
base). Output is, per eval set and per quantity (each checkpoint's score, each gain over base), the
mean and sample standard deviation across seeds, the extremes, and the mean within-run 95%
half-width beside them: the half-width says how precisely one run measured its checkpoint, the
standard deviation how far another run lands. A gain "holds in every seed" when every seed's own
interval excludes 0 on the same side.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from passband.training.evaluation.results import CHECKPOINTS, headline_scores


@dataclass(frozen=True)
class Spread:
    """One quantity of one eval set across seeds."""

    eval_set: str
    quantity: str
    """A checkpoint (`base`, `sft`, `rl`) or a gain over base (`sft - base`, `rl - base`)."""
    values: tuple[float, ...]
    """Each seed's point estimate, in seed order."""
    half_widths: tuple[float, ...]
    """Each seed's 95% interval half-width ((high - low) / 2)."""
    lows: tuple[float, ...]
    """Each seed's interval low end (a gain holds in every seed when all lows are > 0)."""

    @property
    def mean(self) -> float:
        return statistics.mean(self.values)

    @property
    def std(self) -> float:
        """Sample standard deviation (n - 1); 0 for one seed. statistics computes it exactly, so
        equal values give 0, not a rounding residue."""
        return statistics.stdev(self.values) if len(self.values) > 1 else 0.0

    @property
    def mean_half_width(self) -> float:
        return sum(self.half_widths) / len(self.half_widths)

    @property
    def holds_in_every_seed(self) -> bool:
        """Every seed's interval lies above 0 (meaningful for gains)."""
        return all(low > 0 for low in self.lows)


def seed_spread(tables: list[dict[str, float]], statistic: str = "pass@1") -> list[Spread]:
    """The spread of every checkpoint's score and every gain over base, per eval set, across
    `tables` (one per seed, each a pass_at_1_table); eval sets must agree between tables."""
    if not tables:
        raise ValueError("seed_spread needs at least one results table")
    sets = sorted(headline_scores(tables[0], statistic, CHECKPOINTS[0]))
    for index, table in enumerate(tables[1:], start=1):
        if sorted(headline_scores(table, statistic, CHECKPOINTS[0])) != sets:
            raise ValueError(f"results table {index} has eval sets "
                             f"{sorted(headline_scores(table, statistic, CHECKPOINTS[0]))}, table 0 has {sets}")
    base, *trained = CHECKPOINTS
    quantities = [(c, f"{c}/{{set}}/{statistic}") for c in CHECKPOINTS]
    quantities += [(f"{c} - {base}", f"{c}/delta/{{set}}/{statistic}") for c in trained]
    spreads = []
    for eval_set in sets:
        for quantity, key in quantities:
            name = key.format(set=eval_set)
            spreads.append(Spread(
                eval_set, quantity, tuple(t[name] for t in tables),
                tuple((t[f"{name}_ci_high"] - t[f"{name}_ci_low"]) / 2 for t in tables),
                tuple(t[f"{name}_ci_low"] for t in tables)))
    return spreads


def spread_markdown(spreads: list[Spread], seeds: list[int]) -> str:
    """Markdown: per eval set and quantity, each seed's value, mean +- std, range and the mean
    within-run half-width; gains say whether their interval excluded 0 in every seed."""
    header = ["eval set", "quantity", *(f"seed {s}" for s in seeds), "mean", "std across seeds",
              "range", "within-run +-", "gain > 0 in every seed"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for s in spreads:
        gain = " - " in s.quantity
        cells = [s.eval_set, s.quantity, *(f"{v:.3f}" for v in s.values), f"{s.mean:.3f}", f"{s.std:.3f}",
                 f"{min(s.values):.3f}..{max(s.values):.3f}", f"{s.mean_half_width:.3f}",
                 ("yes" if s.holds_in_every_seed else "no") if gain else ""]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
