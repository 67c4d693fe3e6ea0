"""Stratified sampling proportions, shortfall redistribution, size alignment and seed determinism."""

from collections import Counter

import pytest

from passband.curation.balance import align_sizes, stratified_sample


def pool(sizes: dict[str, int]) -> list[dict]:
    return [{"id": f"{s}{i}", "subdomain": s} for s, n in sizes.items() for i in range(n)]


def counts(rows):
    return dict(Counter(row["subdomain"] for row in rows))


def test_equalize_gives_equal_quotas():
    rows = pool({"algebra": 100, "geometry": 50, "combinatorics": 30, "number_theory": 20})
    selected, removed = stratified_sample(rows, total=40, seed=0)
    assert counts(selected) == {"algebra": 10, "geometry": 10, "combinatorics": 10, "number_theory": 10}
    assert len(removed) == 160
    assert Counter(row["removed_reason"] for row in removed)["not_sampled:subdomain=algebra quota=10/100"] == 90


def test_target_proportions_exact_and_largest_remainder():
    rows = pool({"a": 100, "b": 100, "c": 100})
    selected, _ = stratified_sample(rows, total=10, proportions={"a": 0.5, "b": 0.3, "c": 0.2}, seed=1)
    assert counts(selected) == {"a": 5, "b": 3, "c": 2}
    # 7 * (0.5, 0.3, 0.2) = (3.5, 2.1, 1.4): floors (3, 2, 1), the one left goes to a (remainder 0.5).
    selected, _ = stratified_sample(rows, total=7, proportions={"a": 0.5, "b": 0.3, "c": 0.2}, seed=1)
    assert counts(selected) == {"a": 4, "b": 2, "c": 1}
    # Weights need not sum to 1: (2, 1, 1) is (0.5, 0.25, 0.25).
    selected, _ = stratified_sample(rows, total=8, proportions={"a": 2, "b": 1, "c": 1}, seed=1)
    assert counts(selected) == {"a": 4, "b": 2, "c": 2}


def test_shortfall_is_redistributed_to_the_other_strata():
    rows = pool({"a": 2, "b": 100, "c": 100})
    selected, _ = stratified_sample(rows, total=12, seed=0)
    assert counts(selected) == {"a": 2, "b": 5, "c": 5}
    selected, _ = stratified_sample(rows, total=12, proportions={"a": 0.5, "b": 0.25, "c": 0.25}, seed=0)
    assert counts(selected) == {"a": 2, "b": 5, "c": 5}
    # Two rounds: shares (4, 4, 4) cap a at 1 and b at 3, c takes the remaining 8.
    selected, _ = stratified_sample(pool({"a": 1, "b": 3, "c": 100}), total=12, seed=0)
    assert counts(selected) == {"a": 1, "b": 3, "c": 8}


def test_more_than_available_selects_everything_with_positive_weight():
    rows = pool({"a": 3, "b": 2, "z": 4})
    selected, removed = stratified_sample(rows, total=50, proportions={"a": 1, "b": 1, "missing": 1}, seed=0)
    assert counts(selected) == {"a": 3, "b": 2}
    assert {row["removed_reason"] for row in removed} == {"not_sampled:subdomain=z quota=0/4"}


def test_rows_without_the_key_are_quarantined_and_order_is_kept():
    rows = pool({"a": 5, "b": 5}) + [{"id": "x"}]
    selected, removed = stratified_sample(rows, total=4, seed=3)
    assert [row for row in rows if row in selected] == selected
    assert removed[0] == {"id": "x", "removed_reason": "missing column subdomain"}


def test_bad_settings_are_refused():
    rows = pool({"a": 2})
    with pytest.raises(ValueError, match="proportions must be finite and >= 0"):
        stratified_sample(rows, total=1, proportions={"a": -1})
    with pytest.raises(ValueError, match="all zero"):
        stratified_sample(rows, total=1, proportions={"a": 0})
    with pytest.raises(ValueError, match="total must be >= 0"):
        stratified_sample(rows, total=-1)


def test_same_seed_same_selection_other_seed_other_selection():
    rows = pool({"a": 50, "b": 50})
    first, _ = stratified_sample(rows, total=10, seed=7)
    again, _ = stratified_sample(list(rows), total=10, seed=7)
    other, _ = stratified_sample(rows, total=10, seed=8)
    assert [row["id"] for row in first] == [row["id"] for row in again]
    assert [row["id"] for row in first] != [row["id"] for row in other]
    # A stratum's draw does not depend on the other strata.
    alone, _ = stratified_sample(pool({"a": 50}), total=5, seed=7)
    assert [row["id"] for row in alone] == [row["id"] for row in first if row["subdomain"] == "a"]


def test_align_sizes_to_smallest_and_to_target():
    pools = {"math": pool({"m": 10}), "code": pool({"c": 6}), "ifeval": pool({"i": 8})}
    aligned, removed = align_sizes(pools, seed=0)
    assert {task: len(rows) for task, rows in aligned.items()} == {"math": 6, "code": 6, "ifeval": 6}
    assert len(removed) == 4 + 2
    assert {row["removed_reason"] for row in removed} == {"size_alignment:task=math target=6", "size_alignment:task=ifeval target=6"}
    aligned, removed = align_sizes(pools, target=7, seed=0)
    assert {task: len(rows) for task, rows in aligned.items()} == {"math": 7, "code": 6, "ifeval": 7}
    assert all(row in pools["math"] for row in aligned["math"])
    again, _ = align_sizes(pools, target=7, seed=0)
    assert again == aligned
