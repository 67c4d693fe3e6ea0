"""Balance: stratified sampling over sub-domains and size alignment across task pools.

One pool in the recipe's history was 50% combinatorics; stratifying by sub-domain keeps any one
sub-domain from dominating, and aligning task pool sizes keeps the multi-task RL mix balanced.
All randomness comes from `random.Random(f"{seed}:{group}")`, seeded by a string (hashed with
sha512 by Python, independent of PYTHONHASHSEED), so a group's draw depends only on the seed
and the group's own rows, not on the other groups or on dict order.
"""

import math
import random
from collections.abc import Hashable
from fractions import Fraction
from typing import Literal

from pydantic import Field

from passband.curation.config import CurationConfig
from passband.curation.rows import quarantine


def stratified_sample(
    rows: list[dict],
    key: str = "subdomain",
    *,
    total: int,
    proportions: dict[Hashable, float] | None = None,
    seed: int = 0,
) -> tuple[list[dict], list[dict]]:
    """Select `total` rows spread over the strata `row[key]`; the rest come back with a reason.

    proportions=None equalizes over the strata present; otherwise a stratum's share is its weight
    over the sum of weights (weights need not sum to 1). Strata present in the data but absent
    from `proportions` get weight 0 and are not sampled; strata named in `proportions` but absent
    from the data have no rows, so their share is redistributed.

    Shortfall: when a stratum has fewer rows than its quota it gives all its rows, and the
    remainder is shared among the other strata in proportion to their weights, repeating until
    every quota fits (water-filling). Quotas are rounded by largest remainder, ties going to the
    stratum whose name sorts first, so they sum exactly to the target. If `total` exceeds the
    rows in positive-weight strata, all of those rows are selected (len(selected) < total).

    Rows without `key` are removed with reason "missing column <key>". Selected rows keep their
    input order.
    """
    if total < 0:
        raise ValueError(f"stratified_sample: total must be >= 0, got {total}")
    removed = [quarantine(row, f"missing column {key}") for row in rows if row.get(key) is None]
    # Group row indices (not rows) so that identical rows stay distinct.
    strata: dict[Hashable, list[int]] = {}
    for index, row in enumerate(rows):
        if row.get(key) is not None:
            strata.setdefault(row[key], []).append(index)
    weights = _weights(list(strata), proportions)
    quotas = _water_fill({s: len(strata[s]) for s in strata}, weights, total)

    selected_indices: set[int] = set()
    for stratum, members in strata.items():
        chosen, dropped = _subsample(members, quotas[stratum], f"{seed}:{stratum}")
        selected_indices.update(chosen)
        reason = f"not_sampled:{key}={stratum} quota={quotas[stratum]}/{len(members)}"
        removed.extend(quarantine(rows[index], reason) for index in dropped)
    selected = [row for index, row in enumerate(rows) if index in selected_indices]
    return selected, removed


def align_sizes(
    rows_by_task: dict[str, list[dict]], target: int | None = None, seed: int = 0
) -> tuple[dict[str, list[dict]], list[dict]]:
    """Subsample every task pool to `target` rows, or to the smallest pool when target is None.

    Pools already at or below the target are kept whole (nothing is upsampled). The draw is
    uniform within a pool; to keep sub-domains balanced too, call stratified_sample per task
    with total=target instead. Removed rows carry "size_alignment:task=<task> target=<n>".
    """
    if target is None:
        target = min((len(pool) for pool in rows_by_task.values()), default=0)
    if target < 0:
        raise ValueError(f"align_sizes: target must be >= 0, got {target}")
    aligned, removed = {}, []
    for task, pool in rows_by_task.items():
        chosen, dropped = _subsample(pool, min(target, len(pool)), f"{seed}:{task}")
        aligned[task] = chosen
        removed.extend(quarantine(row, f"size_alignment:task={task} target={target}") for row in dropped)
    return aligned, removed


def _weights(strata: list[Hashable], proportions: dict[Hashable, float] | None) -> dict[Hashable, Fraction]:
    """Exact weights per stratum; Fraction(str(w)) reads 0.3 as 3/10, so shares like 0.3 * 10 are exact."""
    if proportions is None:
        return {stratum: Fraction(1) for stratum in strata}
    bad = {s: w for s, w in proportions.items() if not (w >= 0 and math.isfinite(w))}
    if bad:
        raise ValueError(f"stratified_sample: proportions must be finite and >= 0, got {bad}")
    if sum(proportions.values()) == 0:
        raise ValueError("stratified_sample: proportions are all zero")
    return {stratum: Fraction(str(proportions.get(stratum, 0))) for stratum in strata}


def _water_fill(capacities: dict[Hashable, int], weights: dict[Hashable, Fraction], total: int) -> dict[Hashable, int]:
    """Quotas proportional to weights, capped at capacities, the capped excess shared by the rest."""
    quotas = {stratum: 0 for stratum in capacities}
    active = [s for s in capacities if weights[s] > 0 and capacities[s] > 0]
    remaining = min(total, sum(capacities[s] for s in active))
    while active:
        shares = _largest_remainder({s: weights[s] for s in active}, remaining)
        capped = [s for s in active if shares[s] >= capacities[s]]
        if not capped:
            quotas.update(shares)
            break
        for stratum in capped:
            quotas[stratum] = capacities[stratum]
            remaining -= capacities[stratum]
            active.remove(stratum)
    return quotas


def _largest_remainder(weights: dict[Hashable, Fraction], total: int) -> dict[Hashable, int]:
    """Integer shares of `total` proportional to weights, summing exactly to total (Hamilton's method)."""
    weight_sum = sum(weights.values())
    exact = {s: total * w / weight_sum for s, w in weights.items()}
    shares = {s: math.floor(x) for s, x in exact.items()}
    leftover = total - sum(shares.values())
    by_remainder = sorted(weights, key=lambda s: (-(exact[s] - shares[s]), str(s)))
    for stratum in by_remainder[:leftover]:
        shares[stratum] += 1
    return shares


def _subsample(rows: list, quota: int, seed: str) -> tuple[list, list]:
    """Choose `quota` of `rows` (any items) at random (seeded); both parts keep input order."""
    chosen = set(random.Random(seed).sample(range(len(rows)), quota))
    return (
        [row for i, row in enumerate(rows) if i in chosen],
        [row for i, row in enumerate(rows) if i not in chosen],
    )


class BalanceConfig(CurationConfig):
    """Stratification over sub-domains and size alignment across tasks."""

    stratify_key: str | None = "subdomain"
    """Row column to stratify on (None: a uniform draw per task)."""
    align_sizes: bool = True
    """Subsample every task's RL set to the target size (no upsampling)."""
    target_size: int | None = Field(None, ge=1)
    """RL rows per task (times its weight); None: the smallest non-empty in-band task pool."""
    on_empty_task: Literal["warn", "fail"] = "warn"
    """A task none of whose problems lies in its band: 'warn' names it (band, pass-rate histogram)
    and aligns the other tasks to the smallest non-empty pool; 'fail' stops the run naming it."""
    seed: int = 0
    """Seed of the draws."""
