"""The claims a pipeline run makes about its table, checked against its own intervals (issue 17).

A run states before it starts what it expects to show (the pipeline's `claims`), and its results
say for each claim whether the numbers support it, so a table is never read for more than it
holds. Input is the pipeline's table: `{checkpoint}/{set}/{statistic}` with `_ci_low`/`_ci_high`
(95% intervals over problems) and `{checkpoint}/delta/{set}/{statistic}` with its interval (the
paired delta against base).

- precision: every checkpoint's interval on the set is at most +-`max_half_width` wide
  ((high - low) / 2, the interval's half-width, at the table's 3 decimals; an interval over
  problems need not be symmetric).
- gain: the delta of `checkpoint` against base has an interval entirely above 0.
- no regression: no checkpoint's delta has an interval entirely below 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field


class ClaimsConfig(BaseModel):
    """What the run expects its table to show; each claim is reported as holding or not."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    max_half_width: float | None = Field(0.06, gt=0)
    """Every checkpoint's 95% interval on every eval set is at most +- this (None: no claim)."""
    sft_gains: list[str] = []
    """Eval sets on which SFT's paired delta against base must exclude 0 upwards."""
    rl_gains: list[str] = []
    """Eval sets on which RL's paired delta against base must exclude 0 upwards."""
    no_regression: bool = True
    """No checkpoint's delta against base excludes 0 downwards on any eval set."""
    spread_check: str | None = None
    """Which training seeds these claims were checked against, and where (e.g. "held in each of
    training seeds 0, 1, 2 at <commit>: docs/benchmarks.md"). A run's intervals say how precisely it
    measured its own checkpoints, not where a rerun lands; the summary prints this beside the claims
    so a reader knows whether a rerun is expected to keep them. None: checked against one run only
    (the summary says so). `scripts/seed_spread.py` prints, per claim, the seeds it held in."""


@dataclass(frozen=True)
class Claim:
    """One claim, checked."""

    claim: str
    """What is claimed, e.g. "rl - base > 0"."""
    eval_set: str
    value: str
    """The numbers it was read from."""
    holds: bool


def _interval(table: dict[str, float], key: str) -> tuple[float, float, float]:
    return table[key], table[key + "_ci_low"], table[key + "_ci_high"]


def check_claims(table: dict[str, float], statistic: str, sets: list[str], checkpoints: list[str],
                 config: ClaimsConfig) -> list[Claim]:
    """Every claim of `config` on `sets`, in a stable order (precision, gains, regressions)."""
    claims = []
    if config.max_half_width is not None:
        for name in sets:
            for c in checkpoints:
                value, low, high = _interval(table, f"{c}/{name}/{statistic}")
                half = (high - low) / 2
                # read at the 3 decimals the table prints: +-0.060 is within +-0.06 however the
                # float's last bits fall
                claims.append(Claim(f"{c} interval <= +-{config.max_half_width:g}", name,
                                    f"{value:.3f} [{low:.3f}, {high:.3f}] +-{half:.3f}",
                                    round(half, 3) <= config.max_half_width))
    for c, gains in (("sft", config.sft_gains), ("rl", config.rl_gains)):
        for name in gains:
            value, low, high = _interval(table, f"{c}/delta/{name}/{statistic}")
            claims.append(Claim(f"{c} - base > 0", name, f"{value:+.3f} [{low:+.3f}, {high:+.3f}]", low > 0))
    if config.no_regression:
        for c in checkpoints:
            if c == "base":
                continue
            for name in sets:
                value, low, high = _interval(table, f"{c}/delta/{name}/{statistic}")
                claims.append(Claim(f"{c} - base not < 0", name, f"{value:+.3f} [{low:+.3f}, {high:+.3f}]",
                                    high >= 0))
    return claims


def format_claims(claims: list[Claim], spread_check: str | None = None) -> str:
    """Markdown: one row per claim with the numbers and whether they support it, then whether the
    claims were checked against a spread of training seeds (ClaimsConfig.spread_check)."""
    lines = ["| claim | eval set | numbers | holds |", "|---|---|---|---|"]
    lines += [f"| {c.claim} | {c.eval_set} | {c.value} | {'yes' if c.holds else '**no**'} |" for c in claims]
    held = sum(c.holds for c in claims)
    lines.append(f"\n{held} of {len(claims)} claims hold.")
    lines.append(f"Checked against a spread of training seeds: {spread_check}." if spread_check else
                 "Not checked against a spread of training seeds: these intervals say how precisely this run "
                 "measured its checkpoints, not where a rerun lands (scripts/seed_spread.py).")
    return "\n".join(lines)
