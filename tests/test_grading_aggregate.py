"""Aggregating n analyses of one solution: the mean and scaled verification, by hand."""

import pytest

from passband.curation.grading.aggregate import confirmed, mean_score, scaled_label


def test_the_mean_ignores_unparsable_analyses():
    assert mean_score([1.0, 0.5, None, 0.0]) == 0.5
    assert mean_score([None, None]) is None


def test_issues_are_confirmed_by_most_meta_grades():
    assert confirmed([1.0, 0.5, 0.0]) and confirmed([0.5])
    assert not confirmed([1.0, 0.0]) and not confirmed([0.0, 0.0, 1.0]) and not confirmed([None])
    assert confirmed([1.0, None, None])  # unparsable reviews count for nothing


def test_scaled_label_needs_k_agreeing_confirmed_analyses():
    # two analyses find a fatal error and the meta-check confirms both: label 0 at k=2
    assert scaled_label([0.0, 0.0, 1.0, 0.5], [[1.0], [0.5, 1.0], [], [1.0]], k=2) == 0.0
    # one of them was refuted by the meta-check: only one confirmed 0, short of k=2
    assert scaled_label([0.0, 0.0, 1.0, 0.5], [[1.0], [0.0, 0.0], [], [1.0]], k=2) is None
    # refuted issues leave no confirmed low score: the three 1s decide
    assert scaled_label([1.0, 0.0, 1.0, 1.0], [[], [0.0], [], []], k=3) == 1.0
    assert scaled_label([1.0, 0.0, None, 1.0], [[], [0.0], [], []], k=3) is None
    # the lowest confirmed score wins: 0.5 twice is not enough when a confirmed 0 stands alone
    assert scaled_label([0.5, 0.5, 0.0], [[1.0], [1.0], [1.0]], k=2) is None
    assert scaled_label([0.5, 0.5, 0.0], [[1.0], [1.0], [1.0]], k=1) == 0.0
    with pytest.raises(ValueError, match="3 analyses but 2 lists of meta-grades"):
        scaled_label([1.0, 1.0, 1.0], [[], []], k=1)
