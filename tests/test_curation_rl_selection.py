"""RL set selection across tasks: one task whose band holds nothing never empties the others."""

import pytest

from passband.curation.balance import BalanceConfig
from passband.curation.bands import BandFilter
from passband.curation.rl_selection import EmptyBandError, funnel_markdown, rl_funnel, select_rl_sets

BANDS = {"math": BandFilter.parse("(0, 0.8]"), "code": BandFilter.parse("(0, 0.8]"),
         "ifeval": BandFilter.parse("(0, 0.4]")}


def _rows(task: str, rates: list[float], subdomains: tuple[str, ...] = ("a", "b")) -> list[dict]:
    return [{"id": f"{task}{i}", "task": task, "subdomain": subdomains[i % len(subdomains)], "pass_rate": rate}
            for i, rate in enumerate(rates)]


def _pools() -> dict[str, list[dict]]:
    # math: 6 in band (0.25, 0.5 x3 in (0, 0.8]) + 2 out (0, 1); code: 4 in band + 1 out (0);
    # ifeval: the smoke run's 12 pass rates at n=4, none in (0, 0.4]: 0 x9, 0.5, 0.75, 1.0.
    return {"math": _rows("math", [0.25, 0.5, 0.75, 0.25, 0.5, 0.75, 0.0, 1.0]),
            "code": _rows("code", [0.25, 0.5, 0.75, 0.5, 0.0]),
            "ifeval": _rows("ifeval", [0.0] * 9 + [0.5, 0.75, 1.0])}


@pytest.mark.parametrize("stratify_key", ["subdomain", None])
def test_an_empty_band_leaves_the_other_tasks_aligned_to_the_smallest_non_empty_pool(stratify_key):
    selection = select_rl_sets(_pools(), BANDS, BalanceConfig(stratify_key=stratify_key))
    # math's 6 in-band rows aligned to code's 4; code keeps its 4; ifeval is empty and named.
    assert {task: len(rows) for task, rows in selection.sets.items()} == {"math": 4, "code": 4, "ifeval": 0}
    assert selection.aligned_to == 4
    assert all(BANDS[row["task"]].contains(row["pass_rate"]) for rows in selection.sets.values() for row in rows)
    assert len(selection.removed_by_band) == 2 + 1 + 12
    assert [row["task"] for row in selection.removed_by_balance] == ["math", "math"]
    [empty] = selection.empty
    assert empty.task == "ifeval" and empty.pass_rates == {0.0: 9, 0.5: 1, 0.75: 1, 1.0: 1}
    assert empty.describe() == ("ifeval: none of its 12 problems has a pass rate in its band (0, 0.4] "
                                "(pass rates: 0 x9, 0.5 x1, 0.75 x1, 1 x1)")


def test_the_old_alignment_to_zero_is_gone_but_strict_alignment_fails_naming_the_task():
    with pytest.raises(EmptyBandError, match=r"ifeval: none of its 12 problems .* band \(0, 0.4\].*on_empty_task: fail"):
        select_rl_sets(_pools(), BANDS, BalanceConfig(on_empty_task="fail"))
    # without an empty task, 'fail' changes nothing
    pools = {task: rows for task, rows in _pools().items() if task != "ifeval"}
    strict = select_rl_sets(pools, BANDS, BalanceConfig(on_empty_task="fail"))
    assert {task: len(rows) for task, rows in strict.sets.items()} == {"math": 4, "code": 4}


def test_every_band_empty_gives_empty_sets_and_names_every_task():
    pools = {"math": _rows("math", [0.0, 1.0]), "ifeval": _rows("ifeval", [0.5])}
    selection = select_rl_sets(pools, BANDS, BalanceConfig())
    assert selection.sets == {"math": [], "ifeval": []} and selection.aligned_to == 0
    assert [empty.task for empty in selection.empty] == ["math", "ifeval"]


def test_an_explicit_target_and_weights_still_apply():
    selection = select_rl_sets(_pools(), BANDS, BalanceConfig(target_size=2), weights={"math": 2.0})
    assert {task: len(rows) for task, rows in selection.sets.items()} == {"math": 4, "code": 2, "ifeval": 0}
    unaligned = select_rl_sets(_pools(), BANDS, BalanceConfig(align_sizes=False))
    assert {task: len(rows) for task, rows in unaligned.sets.items()} == {"math": 6, "code": 4, "ifeval": 0}
    assert unaligned.aligned_to is None


def test_the_funnel_counts_each_stage_per_task():
    selection = select_rl_sets(_pools(), BANDS, BalanceConfig())
    removed = ([{"task": "math", "stage": "hygiene"}] * 3 + [{"task": "code", "stage": "prefilter"}]
               + [{"task": row["task"], "stage": "band"} for row in selection.removed_by_band]
               + [{"task": row["task"], "stage": "balance"} for row in selection.removed_by_balance]
               + [{"task": "math", "stage": "sft_select"}])  # not an RL stage: not counted
    funnel = rl_funnel({"math": 11, "code": 6, "ifeval": 12}, removed, selection.sets)
    assert funnel == [
        {"task": "math", "pool": 11, "hygiene": 3, "prefilter": 0, "band": 2, "balance": 2, "rl": 4},
        {"task": "code", "pool": 6, "hygiene": 0, "prefilter": 1, "band": 1, "balance": 0, "rl": 4},
        {"task": "ifeval", "pool": 12, "hygiene": 0, "prefilter": 0, "band": 12, "balance": 0, "rl": 0},
    ]
    assert funnel_markdown(funnel).splitlines()[4] == "| ifeval | 12 | 0 | 0 | 12 | 0 | 0 |"
