"""Band filter edges (open vs closed), interval parsing, difficulty labels and histograms."""

import math

import pytest

from passband.curation.bands import (
    BandFilter,
    DifficultyBands,
    apply_band,
    band_counts,
    label_band,
    label_rows,
    pass_rate_histogram,
    prefilter_by_column,
)
from passband.curation.catalog import task


def rows_with(rates):
    return [{"id": f"r{i}", "task": "math", "pass_rate": p} for i, p in enumerate(rates)]


def kept_rates(rows, band):
    kept, _ = apply_band(rows, band)
    return [row["pass_rate"] for row in kept]


def test_parse_intervals():
    band = BandFilter.parse("(0, 0.8]")
    assert (band.alpha, band.beta, band.alpha_inclusive, band.beta_inclusive) == (0.0, 0.8, False, True)
    band = BandFilter.parse(" [0.1,1) ")
    assert (band.alpha, band.beta, band.alpha_inclusive, band.beta_inclusive) == (0.1, 1.0, True, False)
    assert BandFilter.parse("(0, 10/16]").beta == 0.625
    assert str(BandFilter.parse("(0, 0.8]")) == "(0, 0.8]"
    for bad in ["0, 0.8", "(0; 0.8]", "(a, 1]", "(0, 1/0]", "{0, 1}"]:
        with pytest.raises(ValueError, match="BandFilter.parse"):
            BandFilter.parse(bad)


def test_alpha_above_beta_is_refused_naming_the_fields():
    with pytest.raises(ValueError, match=r"alpha \(0.9\) > beta \(0.8\)"):
        BandFilter(alpha=0.9, beta=0.8)
    with pytest.raises(ValueError, match="alpha"):
        BandFilter.parse("(0.9, 0.8]")
    with pytest.raises(ValueError, match="keeps nothing"):
        BandFilter.parse("(0.5, 0.5]")
    with pytest.raises(ValueError):
        BandFilter(alpha=-0.1, beta=0.5)
    assert BandFilter.parse("[0.5, 0.5]").contains(0.5)


def test_reference_bands_edges():
    rows = rows_with([0.0, 0.2, 0.4, 0.41, 0.8, 0.81, 1.0])
    assert kept_rates(rows, task("math").default_band) == [0.2, 0.4, 0.41, 0.8]
    assert kept_rates(rows, task("code").default_band) == [0.2, 0.4, 0.41, 0.8]
    assert kept_rates(rows, task("ifeval").default_band) == [0.2, 0.4]
    assert kept_rates(rows, task("structured").default_band) == [0.2, 0.4, 0.41, 0.8]
    with pytest.raises(ValueError, match="unknown task 'chess'"):
        task("chess")


def test_closed_lower_and_open_upper_ends():
    rows = rows_with([0.0, 0.8, 1.0])
    assert kept_rates(rows, BandFilter.parse("[0, 0.8)")) == [0.0]
    assert kept_rates(rows, BandFilter.parse("[0, 1]")) == [0.0, 0.8, 1.0]
    assert kept_rates(rows, BandFilter.parse("(0, 1)")) == [0.8]


def test_removed_rows_carry_reasons_and_missing_values_are_quarantined():
    rows = rows_with([0.9, 0.5]) + [{"id": "none", "pass_rate": None}, {"id": "nan", "pass_rate": math.nan}, {"id": "absent"}]
    kept, removed = apply_band(rows, task("math").default_band)
    assert [row["id"] for row in kept] == ["r1"]
    assert [(row["id"], row["removed_reason"]) for row in removed] == [
        ("r0", "outside_band:pass_rate=0.9 not in (0, 0.8]"),
        ("none", "missing column pass_rate"),
        ("nan", "missing column pass_rate"),
        ("absent", "missing column pass_rate"),
    ]
    assert "removed_reason" not in rows[0]  # inputs are not mutated


def test_prefilter_on_carried_column():
    rows = [{"id": "a", "qwen_rate": 0.625}, {"id": "b", "qwen_rate": 0.6875}, {"id": "c", "qwen_rate": 0.0}, {"id": "d"}]
    band = BandFilter.parse("(0, 10/16]")
    kept, removed = prefilter_by_column(rows, "qwen_rate", band)
    assert [row["id"] for row in kept] == ["a"]
    assert [row["removed_reason"] for row in removed][-1] == "missing column qwen_rate"
    kept, removed = prefilter_by_column(rows, "qwen_rate", band, keep_missing=True)
    assert [row["id"] for row in kept] == ["a", "d"]
    assert [row["id"] for row in removed] == ["b", "c"]


def test_default_difficulty_labels_at_edges():
    bands = DifficultyBands()
    expected = {0.0: "unsolved", 0.01: "hard", 0.3: "hard", 0.31: "medium", 0.7: "medium", 0.71: "easy", 0.99: "easy", 1.0: "solved"}
    assert {p: label_band(p, bands) for p in expected} == expected
    with pytest.raises(ValueError, match="outside"):
        label_band(1.2, bands)
    with pytest.raises(ValueError, match="outside"):
        label_band(math.nan, bands)


def test_custom_difficulty_edges_and_validation():
    bands = DifficultyBands(edges=(0.0, 0.5, 1.0), labels=("none", "low", "high", "all"))
    assert [label_band(p, bands) for p in (0.0, 0.5, 0.6, 1.0)] == ["none", "low", "high", "all"]
    with pytest.raises(ValueError, match="start at 0 and end at 1"):
        DifficultyBands(edges=(0.1, 1.0), labels=("a", "b", "c"))
    with pytest.raises(ValueError, match="strictly increasing"):
        DifficultyBands(edges=(0.0, 0.5, 0.5, 1.0), labels=("a", "b", "c", "d", "e"))
    with pytest.raises(ValueError, match="need 4 labels, got 3"):
        DifficultyBands(edges=(0.0, 0.5, 1.0), labels=("a", "b", "c"))


def test_label_rows_and_band_counts():
    rows = rows_with([0.0, 0.2, 0.2, 1.0]) + [{"id": "c", "task": "code", "pass_rate": 0.5}]
    labeled = label_rows(rows, DifficultyBands())
    assert [row["band"] for row in labeled] == ["unsolved", "hard", "hard", "solved", "medium"]
    assert band_counts(labeled) == {"math": {"unsolved": 1, "hard": 2, "solved": 1}, "code": {"medium": 1}}
    with pytest.raises(ValueError, match="row 'x' has no 'pass_rate'"):
        label_rows([{"id": "x"}], DifficultyBands())


def test_histogram_counts_per_bin_per_task():
    rows = rows_with([0.0, 0.2, 0.3, 0.3, 1.0]) + [{"id": "c", "task": "code", "pass_rate": 0.5}]
    histogram = pass_rate_histogram(rows, bins=10)
    assert histogram["math"]["counts"] == [1, 0, 1, 2, 0, 0, 0, 0, 0, 1]
    assert histogram["code"]["counts"] == [0, 0, 0, 0, 0, 1, 0, 0, 0, 0]
    assert histogram["math"]["bin_edges"][3] == 0.3
    quarters = pass_rate_histogram(rows_with([0.25, 0.74, 0.75, 1.0]), bins=4)
    assert quarters["math"]["counts"] == [0, 1, 1, 2]


def test_a_band_in_a_config_is_checked_when_the_config_is_read():
    from pydantic import BaseModel, ValidationError

    from passband.curation.bands import Band

    class Pool(BaseModel):
        band: Band

    assert Pool(band="(0, 0.8]").band == "(0, 0.8]"
    with pytest.raises(ValidationError, match="band"):
        Pool(band="(0, 0.8")
    with pytest.raises(ValidationError, match="band"):
        Pool(band="(0.9, 0.1]")
