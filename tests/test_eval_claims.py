"""The claims section: each claim read from the table's intervals, by hand-built tables."""

from __future__ import annotations

import pytest

from passband.training.evaluation.claims import ClaimsConfig, check_claims, format_claims


def entry(table: dict[str, float], key: str, value: float, low: float, high: float) -> None:
    table[key], table[key + "_ci_low"], table[key + "_ci_high"] = value, low, high


@pytest.fixture
def table() -> dict[str, float]:
    t: dict[str, float] = {}
    # math: every interval within +-0.06; code: RL's is +-0.07 (0.74 .. 0.88)
    entry(t, "base/math/pass@1", 0.10, 0.06, 0.15)
    entry(t, "sft/math/pass@1", 0.15, 0.10, 0.21)
    entry(t, "rl/math/pass@1", 0.20, 0.14, 0.26)
    entry(t, "base/code/pass@1", 0.60, 0.55, 0.65)
    entry(t, "sft/code/pass@1", 0.58, 0.53, 0.63)
    entry(t, "rl/code/pass@1", 0.81, 0.74, 0.88)
    entry(t, "rl/structured/pass@1", 0.333, 0.2759, 0.3961)  # half-width 0.0601, printed +-0.060
    entry(t, "sft/delta/math/pass@1", 0.05, 0.01, 0.09)    # gain
    entry(t, "rl/delta/math/pass@1", 0.10, 0.04, 0.16)     # gain
    entry(t, "sft/delta/code/pass@1", -0.02, -0.05, 0.01)  # neither
    entry(t, "rl/delta/code/pass@1", 0.21, -0.01, 0.43)    # interval touches below 0: no gain
    return t


def test_each_claim_is_read_from_its_interval(table: dict[str, float]) -> None:
    config = ClaimsConfig(max_half_width=0.06, sft_gains=["math", "code"], rl_gains=["math", "code"])
    claims = check_claims(table, "pass@1", ["code", "math"], ["base", "sft", "rl"], config)
    verdicts = {(c.claim, c.eval_set): c.holds for c in claims}
    assert verdicts == {
        ("base interval <= +-0.06", "code"): True,
        ("sft interval <= +-0.06", "code"): True,
        ("rl interval <= +-0.06", "code"): False,  # (0.88 - 0.74) / 2 = 0.07
        ("base interval <= +-0.06", "math"): True,  # (0.15 - 0.06) / 2 = 0.045
        ("sft interval <= +-0.06", "math"): True,
        ("rl interval <= +-0.06", "math"): True,   # (0.26 - 0.14) / 2 = 0.06, at the bound
        ("sft - base > 0", "math"): True,
        ("sft - base > 0", "code"): False,
        ("rl - base > 0", "math"): True,
        ("rl - base > 0", "code"): False,
        ("sft - base not < 0", "code"): True,
        ("sft - base not < 0", "math"): True,
        ("rl - base not < 0", "code"): True,
        ("rl - base not < 0", "math"): True,
    }
    text = format_claims(claims)
    assert "| rl interval <= +-0.06 | code | 0.810 [0.740, 0.880] +-0.070 | **no** |" in text
    assert "11 of 14 claims hold." in text


def test_a_half_width_that_prints_as_the_bound_is_within_it(table: dict[str, float]) -> None:
    assert (0.3961 - 0.2759) / 2 > 0.06
    (claim,) = check_claims(table, "pass@1", ["structured"], ["rl"], ClaimsConfig(no_regression=False))
    assert claim.holds and claim.value.endswith("+-0.060")


def test_a_significant_regression_is_reported(table: dict[str, float]) -> None:
    entry(table, "sft/delta/code/pass@1", -0.08, -0.12, -0.03)
    claims = check_claims(table, "pass@1", ["code", "math"], ["base", "sft", "rl"],
                          ClaimsConfig(max_half_width=None))
    assert [(c.claim, c.eval_set) for c in claims if not c.holds] == [("sft - base not < 0", "code")]
    assert len(claims) == 4  # regressions only: 2 checkpoints x 2 sets


def test_a_claim_on_a_set_the_table_lacks_fails_loudly(table: dict[str, float]) -> None:
    with pytest.raises(KeyError, match="rl/delta/ifeval/pass@1"):
        check_claims(table, "pass@1", ["code", "math"], ["base", "sft", "rl"], ClaimsConfig(rl_gains=["ifeval"]))


def test_the_pipeline_checks_claimed_sets_when_the_config_is_read() -> None:
    from passband.flows.pipeline.flow import PipelineConfig

    evaluate = {"suites": {}, "datasets": {"math": "file:///m", "code": "file:///c"}}
    PipelineConfig(evaluate=evaluate, claims={"rl_gains": ["math", "code"]})
    with pytest.raises(ValueError, match=r"claims name \['ifeval'\], which are not eval sets"):
        PipelineConfig(evaluate=evaluate, claims={"sft_gains": ["ifeval"]})
