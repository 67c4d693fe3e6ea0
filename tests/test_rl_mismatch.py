"""Rollout-correction weights, their stats, vllm_kl and perplexity on crafted ratios."""

import math

import pytest
import torch

from passband.training.rl.algebra.mismatch import importance_weights, mismatch_kl, mismatch_stats, response_perplexity
from passband.training.rl.config import RLAlgoConfig

NAN = float("nan")
# rho = pi_trainer / pi_rollout per token; NaN marks padding (mask 0), never read.
RHO = torch.tensor(
    [
        [0.6, 3.0, NAN],  # prod 1.8,   geometric mean sqrt(1.8)    = 1.342
        [3.0, 1.0, 1.0],  # prod 3.0,   geometric mean 3^(1/3)      = 1.442
        [0.3, 1.0, NAN],  # prod 0.3,   geometric mean sqrt(0.3)    = 0.548
        [0.25, 0.4, 0.25],  # prod 0.025, geometric mean 0.025^(1/3) = 0.292
    ]
)
MASK = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 1, 0], [1, 1, 1]])


def _weights(mode: str) -> torch.Tensor:
    rollout_logp = torch.full_like(RHO, -2.0)
    trainer_logp = (rollout_logp + RHO.log()).requires_grad_()
    weights = importance_weights(trainer_logp, rollout_logp, MASK, mode=mode, threshold=2.0)
    assert not weights.requires_grad
    return weights


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("none", [[1, 1, 0], [1, 1, 1], [1, 1, 0], [1, 1, 1]]),
        # min(rho_t, 2)
        ("token_tis", [[0.6, 2, 0], [2, 1, 1], [0.3, 1, 0], [0.25, 0.4, 0.25]]),
        # rho_t kept only inside [0.5, 2]
        ("token_mis", [[0.6, 0, 0], [0, 1, 1], [0, 1, 0], [0, 0, 0]]),
        # min(prod, 2) on every response token of the row
        ("seq_tis", [[1.8, 1.8, 0], [2, 2, 2], [0.3, 0.3, 0], [0.025, 0.025, 0.025]]),
        # prod if prod <= 2 else 0
        ("seq_mis", [[1.8, 1.8, 0], [0, 0, 0], [0.3, 0.3, 0], [0.025, 0.025, 0.025]]),
        # 1 if the geometric mean is inside [0.5, 2] else 0
        ("geo_mis", [[1, 1, 0], [1, 1, 1], [1, 1, 0], [0, 0, 0]]),
    ],
)
def test_importance_weight_modes_on_crafted_ratios(mode, expected):
    assert torch.allclose(_weights(mode), torch.tensor(expected, dtype=torch.float32), atol=1e-5)


def test_token_mis_bounds_are_inclusive():
    rho = torch.tensor([[2.0, 0.5, 2.0001, 0.4999]], dtype=torch.float64)
    weights = importance_weights(rho.log(), torch.zeros_like(rho), torch.ones(1, 4), "token_mis", 2.0)
    assert torch.allclose(weights, torch.tensor([[2.0, 0.5, 0.0, 0.0]], dtype=torch.float64))


@pytest.mark.parametrize(
    "mode, expected",
    [
        # rho_t kept only inside [1/C_low, C_high] = [0.2, 3.5]: every response token is inside
        # (against [0.5, 2] from the symmetric C = 2 above, which drops 3.0, 0.3, 0.25, 0.4).
        ("token_mis", [[0.6, 3, 0], [3, 1, 1], [0.3, 1, 0], [0.25, 0.4, 0.25]]),
        # geometric means 1.342, 1.442, 0.548, 0.292 all inside [0.2, 3.5]: every row kept.
        ("geo_mis", [[1, 1, 0], [1, 1, 1], [1, 1, 0], [1, 1, 1]]),
    ],
)
def test_rejection_range_is_asymmetric_with_a_lower_threshold(mode, expected):
    rollout_logp = torch.full_like(RHO, -2.0)
    weights = importance_weights(rollout_logp + RHO.log(), rollout_logp, MASK, mode, threshold=3.5, threshold_low=5.0)
    assert torch.allclose(weights, torch.tensor(expected, dtype=torch.float32), atol=1e-5)


def test_asymmetric_range_rejects_on_each_side_by_its_own_threshold():
    # IcePop's range [0.5, 5]: C_low = 2, C_high = 5. In float64 so the bounds compare exactly.
    rho = torch.tensor([[0.5, 0.4999, 4.0, 5.0, 5.0001, 0.3]], dtype=torch.float64)
    weights = importance_weights(rho.log(), torch.zeros_like(rho), torch.ones(1, 6), "token_mis", 5.0, 2.0)
    assert torch.allclose(weights, torch.tensor([[0.5, 0.0, 4.0, 5.0, 0.0, 0.0]], dtype=torch.float64))
    # geo_mis: one row per geometric mean 0.45 (below 1/2: dropped) and 4.5 (inside: kept).
    geo = torch.tensor([[0.45, 0.45], [4.5, 4.5]], dtype=torch.float64)
    weights = importance_weights(geo.log(), torch.zeros_like(geo), torch.ones(2, 2), "geo_mis", 5.0, 2.0)
    assert torch.equal(weights, torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64))


def test_long_sequences_do_not_overflow():
    num_tokens = 4000
    mask = torch.ones(2, num_tokens)
    # Row 0: log rho = +0.05 per token -> prod = e^200, beyond float32 (max ~3.4e38 = e^88.7);
    # geometric mean e^0.05 = 1.05. Row 1: log rho = -0.05 -> prod e^-200 = 0 in float32.
    log_rho = torch.tensor([[0.05], [-0.05]]).expand(2, num_tokens)
    assert torch.isinf(torch.exp(log_rho[0].sum()))  # the naive product overflows
    rollout_logp = torch.full((2, num_tokens), -1.0)
    trainer_logp = rollout_logp + log_rho
    seq_tis = importance_weights(trainer_logp, rollout_logp, mask, "seq_tis", 2.0)
    assert torch.equal(seq_tis[0], torch.full((num_tokens,), 2.0))  # capped at C, not inf
    assert torch.equal(seq_tis[1], torch.zeros(num_tokens))
    seq_mis = importance_weights(trainer_logp, rollout_logp, mask, "seq_mis", 2.0)
    assert torch.equal(seq_mis, torch.zeros(2, num_tokens))  # rejected row is 0, not NaN
    geo_mis = importance_weights(trainer_logp, rollout_logp, mask, "geo_mis", 2.0)
    assert torch.equal(geo_mis, torch.ones(2, num_tokens))  # per-token drift is small: kept


def test_bad_mode_and_threshold_are_refused():
    with pytest.raises(ValueError, match="'seq'"):
        importance_weights(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), "seq", 2.0)
    with pytest.raises(ValueError, match="thresholds must be >= 1"):
        importance_weights(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), "seq_mis", 0.5)
    with pytest.raises(ValueError, match="C_low=0.5"):
        importance_weights(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), "token_mis", 2.0, 0.5)


def test_mismatch_stats_for_seq_mis():
    rollout_logp = torch.full_like(RHO, -2.0)
    trainer_logp = rollout_logp + RHO.log()
    weights = importance_weights(trainer_logp, rollout_logp, MASK, "seq_mis", 2.0)
    stats = mismatch_stats(trainer_logp, rollout_logp, MASK, weights)
    # 10 response tokens; row 1 (3 tokens) rejected. rho sum = 3.6 + 5 + 1.3 + 0.9 = 10.8.
    # weight sum = 1.8*2 + 0.3*2 + 0.025*3 = 4.275.
    assert stats == pytest.approx(
        {"masked_token_frac": 0.3, "masked_seq_frac": 0.25, "ratio_max": 3.0, "ratio_mean": 1.08,
         "weight_mean": 0.4275},
        abs=1e-6,
    )


def test_mismatch_kl_by_hand():
    rollout_logp = torch.tensor([[-1.0, -1.0, -1.0, -1.0]])
    trainer_logp = rollout_logp + torch.tensor([[math.log(2), 0.0, -math.log(2), 5.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    # exp(d) - d - 1: d = ln 2 -> 1 - ln 2 = 0.306853; d = 0 -> 0; d = -ln 2 -> ln 2 - 0.5 =
    # 0.193147; the masked 4th token is ignored. Sum 0.5, mean 1/6.
    assert mismatch_kl(trainer_logp, rollout_logp, mask) == pytest.approx(1 / 6, abs=1e-6)


def test_response_perplexity_by_hand():
    logp = torch.tensor([[math.log(0.5), math.log(0.25), NAN]])
    # exp(-(ln 0.5 + ln 0.25) / 2) = exp(ln 8 / 2) = sqrt(8)
    assert response_perplexity(logp, torch.tensor([[1, 1, 0]])) == pytest.approx(math.sqrt(8), abs=1e-5)


def _rejected_row_frac(noise: float, num_tokens: int, mode: str, threshold: float, rows: int = 4000) -> float:
    gen = torch.Generator().manual_seed(0)
    rollout_logp = torch.full((rows, num_tokens), -1.0)
    trainer_logp = rollout_logp + noise * torch.randn(rows, num_tokens, generator=gen)
    weights = importance_weights(trainer_logp, rollout_logp, torch.ones(rows, num_tokens), mode, threshold)
    return float((weights[:, 0] == 0).float().mean())


def _normal_two_sided_tail(z: float) -> float:
    return math.erfc(z / math.sqrt(2.0))


def test_geo_mis_needs_its_own_threshold_to_bind():
    # 0.3 nats of iid log-ratio noise over 200 tokens. The geometric mean's log is N(0, 0.3^2/200)
    # (sd 0.0212): a band of [1/2, 2] (|mean| <= 0.693) is 33 sd wide and never rejects, while the
    # product's log is N(0, 0.3^2 * 200) (sd 4.24): seq-MIS at C=2 rejects P(Z > 0.163) = 43.5%.
    # The default geo_threshold 1.001 rejects P(|Z| > 0.047) = 96%: it binds. At a healthy
    # vllm_kl ~ 1e-3 (noise sqrt(2e-3) = 0.045 nats) it still rejects P(|Z| > 0.32) = 75% of
    # 200-token rows: a strict setting, meant for long responses and aligned engines.
    sd_mean = 0.3 / math.sqrt(200)
    assert _rejected_row_frac(0.3, 200, "geo_mis", 2.0) == 0.0
    seq = _rejected_row_frac(0.3, 200, "seq_mis", 2.0)
    assert seq == pytest.approx(0.5 * _normal_two_sided_tail(math.log(2.0) / (0.3 * math.sqrt(200))), abs=0.03)
    assert seq == pytest.approx(0.435, abs=0.03)
    default = RLAlgoConfig().geo_threshold
    assert default == 1.001
    geo = _rejected_row_frac(0.3, 200, "geo_mis", default)
    assert geo == pytest.approx(_normal_two_sided_tail(math.log(default) / sd_mean), abs=0.03)
    assert geo > 0.9
    healthy = _rejected_row_frac(math.sqrt(2e-3), 200, "geo_mis", default)
    assert healthy == pytest.approx(_normal_two_sided_tail(math.log(default) / (math.sqrt(2e-3 / 200))), abs=0.03)


def test_extreme_log_ratios_give_finite_weights_and_metrics():
    # A token log-ratio of 94 (exp overflows float32 at 88.7): token_mis rejects it with weight 0,
    # never inf * 0 = NaN; token_tis caps it; the metrics stay finite.
    trainer_logp = torch.tensor([[-0.1, -1.0, -2.0]])
    rollout_logp = torch.tensor([[-94.1, -1.0, -2.0]])
    mask = torch.ones(1, 3)
    assert torch.equal(importance_weights(trainer_logp, rollout_logp, mask, "token_mis", 2.0), torch.tensor([[0.0, 1.0, 1.0]]))
    assert torch.equal(importance_weights(trainer_logp, rollout_logp, mask, "token_tis", 2.0), torch.tensor([[2.0, 1.0, 1.0]]))
    stats = mismatch_stats(trainer_logp, rollout_logp, mask, torch.ones(1, 3))
    assert all(math.isfinite(v) for v in stats.values())
    assert math.isfinite(mismatch_kl(trainer_logp, rollout_logp, mask))


def test_rejection_fractions_by_hand():
    from passband.training.rl.algebra.mismatch import rejection_fractions

    # log rho per token: A 4 x +0.25 (product e^1 > 2, geometric mean e^0.25 > 1.001, each token < 2);
    # B +0.8, -0.8 (product 1, mean 1, but rho 2.23 > 2 and 0.45 < 1/2); C 3 x 1e-4 (inside every band)
    log_rho = torch.tensor([[0.25, 0.25, 0.25, 0.25], [0.8, -0.8, 0.0, 0.0], [1e-4, 1e-4, 1e-4, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.float32)
    rollout = torch.full_like(log_rho, -1.0)
    bounds = {"seq_mis": (2.0, None), "token_mis": (2.0, None), "geo_mis": (1.001, None)}
    fractions = rejection_fractions(rollout + log_rho, rollout, mask, bounds)
    assert fractions == pytest.approx({"seq_mis": 1 / 3, "geo_mis": 1 / 3, "token_mis": 1 / 3,
                                       "token_mis_tokens": 2 / 9})
    on_policy = rejection_fractions(rollout, rollout, mask, bounds)
    assert on_policy == {"seq_mis": 0.0, "geo_mis": 0.0, "token_mis": 0.0, "token_mis_tokens": 0.0}


def test_effective_sample_size_by_hand():
    from passband.training.rl.algebra.mismatch import effective_sample_size

    # sequence log-weights 0, log 2, log 2 (spread over two tokens), and a row with no response tokens:
    # w = 1, 2, 2 -> (1 + 2 + 2)^2 / (3 * (1 + 4 + 4)) = 25 / 27
    log_rho = torch.tensor([[0.0, 0.0], [math.log(2), 0.0], [math.log(2) / 2, math.log(2) / 2], [5.0, 5.0]])
    mask = torch.tensor([[1, 1], [1, 0], [1, 1], [0, 0]], dtype=torch.float32)
    rollout = torch.full_like(log_rho, -2.0)
    assert effective_sample_size(rollout + log_rho, rollout, mask) == pytest.approx(25 / 27, rel=1e-6)
    assert effective_sample_size(rollout, rollout, mask) == pytest.approx(1.0)
    # one sequence 1000 nats above the others (its product would overflow): all the weight, ESS = 1/n
    huge = torch.tensor([[500.0, 500.0], [0.0, 0.0], [0.0, 0.0]])
    assert effective_sample_size(huge - 1.0, torch.full_like(huge, -1.0), torch.ones(3, 2)) == pytest.approx(1 / 3)
    assert effective_sample_size(rollout, rollout, torch.zeros_like(mask)) == 1.0
