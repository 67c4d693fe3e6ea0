"""With one inner step, pi_old taken from the step's own forward (`fused_scoring`, the default) gives
the update and the metrics of the two-pass path (a no-grad scoring pass, then the step), with one
forward per trained micro-batch fewer, and a ratio of exactly 1 before the step.

Tolerance: none where the trained rows are chunked the same way in both paths (no dropped
groups). The two paths then run the same fp32 kernels on the same micro-batches; the only
difference is grad mode in the forward that produces pi_old, which changes no arithmetic. When
groups are dropped, the two-pass path scored pi_old in micro-batches of ALL valid rows while the
step forwards the kept rows only: other paddings, other GEMM shapes, so its pi_old differs from
the step's log-probs in the last float bits (its ratio is 1 +- 1e-7, the fused one exactly 1)
and the two updates agree to float noise (rtol 1e-5)."""

import copy

import pytest
import torch

from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.update import _fuses_scoring, rl_update
from test_rl_update import REWARDS, _batch, _delta, _tiny_model

TIMING = {"seconds", "train_tokens_per_s"}


def _run(model, batch, fused, ref_model=None, **cfg):
    """(trained copy, metrics, decoder forwards) of one rl_update with plain SGD in fp32."""
    trained = copy.deepcopy(model)
    forwards = []
    trained.model.register_forward_hook(lambda *_: forwards.append(1))
    optimizer = torch.optim.SGD(trained.parameters(), lr=0.1)
    config = RLAlgoConfig(precision="fp32", fused_scoring=fused, **cfg)
    assert _fuses_scoring(config) == fused
    metrics = rl_update(trained, ref_model, optimizer, batch, config, torch.Generator().manual_seed(0))
    return trained, metrics, len(forwards)


@pytest.mark.parametrize("settings", [
    {"micro_batch_size": 3},
    {"micro_batch_size": 8, "level": "sequence", "correction": "geo_mis", "geo_threshold": 1.05},
    {"micro_batch_size": 2, "correction": "token_mis", "behaviour_policy": "engine"},
    {"micro_batch_size": 3, "correction": "seq_tis", "kl_coef": 0.2, "kl_placement": "loss", "kl_estimator": "k2"},
])
def test_fused_scoring_gives_the_two_pass_update_and_metrics_exactly(settings):
    model = _tiny_model()
    ref = _tiny_model(seed=5) if settings.get("kl_coef") else None
    # an invalid row (scored for vllm_kl_all, never trained) and engine noise so the correction acts
    batch = _batch(model, REWARDS, valid=[True, True, True, False, True, True, True, True], engine_noise=0.3)
    two, m_two, forwards_two = _run(model, batch, False, ref, **settings)
    one, m_one, forwards_one = _run(model, batch, True, ref, **settings)
    delta = _delta(model, two)
    assert delta.abs().max() > 1e-4  # a real update
    assert torch.equal(_delta(model, one), delta)
    assert m_one.keys() == m_two.keys()
    assert {k: v for k, v in m_one.items() if k not in TIMING} == {k: v for k, v in m_two.items() if k not in TIMING}
    if settings.get("behaviour_policy") != "engine":  # pi_old IS the step's forward, detached: exp(0)
        assert m_one["ratio_min"] == m_one["ratio_max"] == m_one["ratio_mean"] == 1.0
        assert m_one["clip_frac"] == 0.0
    # one forward fewer per micro-batch of trained rows (the invalid row keeps its own no-grad pass). Row 2
    # (reward 0.5, the mean of its group's valid [1, 0, 0.5]) has A = 0 exactly: skipped by the step, so
    # scored without gradient in both paths, unless the KL loss gives it gradient.
    assert m_one["num_skipped_rows"] == (0.0 if settings.get("kl_coef") else 1.0)
    trained_batches = -(-(7 - int(m_one["num_skipped_rows"])) // settings["micro_batch_size"])
    assert forwards_two - forwards_one == trained_batches


def test_fused_scoring_with_dropped_groups_agrees_to_float_noise():
    model = _tiny_model()
    rewards = [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.5, 0.0, 0.0, 1.0, 0.0, 0.25]  # group 0 has no signal
    batch = _batch(model, rewards, valid=[True] * 11 + [False], num_prompts=3, engine_noise=0.3)
    settings = dict(micro_batch_size=3, drop_zero_variance_groups=True)
    two, m_two, _ = _run(model, batch, False, **settings)
    one, m_one, _ = _run(model, batch, True, **settings)
    assert m_one["num_dropped_groups"] == 1.0
    assert torch.allclose(_delta(model, one), _delta(model, two), rtol=1e-5, atol=1e-8)
    for name in m_two.keys() - TIMING:
        assert m_one[name] == pytest.approx(m_two[name], rel=1e-5, abs=1e-7), name
    assert m_one["ratio_min"] == m_one["ratio_max"] == 1.0


@pytest.mark.parametrize("settings", [
    {"num_inner_steps": 2},
    {"kl_coef": 0.1},  # k1 in the reward: the advantages need every row's pi_old first
    {"cov_method": "clip_cov"},
    {"max_vllm_kl": 0.1},
    {"fused_scoring": False},
])
def test_two_passes_where_pi_old_is_needed_before_the_loss(settings):
    assert not _fuses_scoring(RLAlgoConfig(**settings))
    assert _fuses_scoring(RLAlgoConfig())
