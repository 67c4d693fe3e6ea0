"""The spread across training seeds (training/evaluation/spread.py), on tables written by hand."""

from __future__ import annotations

import math

import pytest

from passband.training.evaluation.spread import seed_spread, spread_markdown


def table(base: float, sft: float, rl: float, half: float, gain_low: tuple[float, float]) -> dict[str, float]:
    """A one-set (`math`) results table: scores with +-half, gains with the given lows and +-half."""
    out = {}
    for label, value in (("base", base), ("sft", sft), ("rl", rl)):
        out |= {f"{label}/math/pass@1": value, f"{label}/math/pass@1_ci_low": value - half,
                f"{label}/math/pass@1_ci_high": value + half}
    for (label, value), low in zip((("sft", sft - base), ("rl", rl - base)), gain_low):
        out |= {f"{label}/delta/math/pass@1": value, f"{label}/delta/math/pass@1_ci_low": low,
                f"{label}/delta/math/pass@1_ci_high": 2 * value - low}
    return out


def test_mean_std_and_every_seed_rule() -> None:
    tables = [table(0.10, 0.40, 0.50, 0.05, (0.25, 0.35)),
              table(0.10, 0.30, 0.60, 0.05, (0.15, 0.45)),
              table(0.10, 0.35, 0.40, 0.04, (-0.01, 0.25))]
    by = {s.quantity: s for s in seed_spread(tables)}
    assert list(by) == ["base", "sft", "rl", "sft - base", "rl - base"]
    assert by["base"].std == 0.0 and by["base"].mean == pytest.approx(0.10)
    # sft 0.40, 0.30, 0.35: mean 0.35, deviations +-0.05, 0 -> var 0.005/2 -> std 0.05
    assert by["sft"].mean == pytest.approx(0.35) and by["sft"].std == pytest.approx(0.05)
    # rl 0.5, 0.6, 0.4: std 0.1; within-run half-widths 0.05, 0.05, 0.04 -> mean 0.04667
    assert by["rl"].std == pytest.approx(0.1) and by["rl"].mean_half_width == pytest.approx(0.14 / 3)
    assert by["sft - base"].values == pytest.approx((0.30, 0.20, 0.25))
    # the third seed's SFT-gain interval starts at -0.01: the gain does not hold in every seed
    assert not by["sft - base"].holds_in_every_seed and by["rl - base"].holds_in_every_seed
    # gain half-widths: value - low -> 0.05, 0.05, 0.26 for SFT
    assert by["sft - base"].mean_half_width == pytest.approx((0.05 + 0.05 + 0.26) / 3)
    markdown = spread_markdown(seed_spread(tables), [0, 1, 2])
    assert "| math | sft - base | 0.300 | 0.200 | 0.250 | 0.250 | 0.050 | 0.200..0.300 | 0.120 | no |" in markdown
    assert math.isclose(by["rl - base"].std, 0.1)


def test_tables_must_name_the_same_sets() -> None:
    other = {k.replace("math", "code"): v for k, v in table(0.1, 0.2, 0.3, 0.05, (0.05, 0.1)).items()}
    with pytest.raises(ValueError, match="table 1 has eval sets \\['code'\\], table 0 has \\['math'\\]"):
        seed_spread([table(0.1, 0.2, 0.3, 0.05, (0.05, 0.1)), other])
