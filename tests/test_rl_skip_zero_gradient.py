"""Skipping the rows whose gradient is exactly zero (`RLAlgoConfig.skip_zero_gradient_rows`) changes
the compute, not the update: the same weights bit for bit (fp32), with the rows skipped counted by hand.

The test batch: 4 prompts x 4 rollouts on a tiny Llama, engine noise so the correction acts.
- group 0, rows 0-3: rewards all 1 -> A = 0 (zero variance)
- group 1, rows 4-7: [1, 0, 0, NaN], row 7 invalid -> no A = 0 among the trained rows 4-6
- group 2, rows 8-11: rewards all 0 -> A = 0 (zero variance)
- group 3, rows 12-15: [1, 0, 0.5, 0.5] -> mean 0.5, so rows 14 and 15 have A = 0 exactly
So 10 of the 15 trained rows are skipped: [0, 1, 2, 3, 8, 9, 10, 11, 14, 15]; 5 rows carry gradient.
"""

import copy
import math

import pytest
import torch

from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.update import build_optimizer, rl_update
from test_rl_update import _batch, _delta, _tiny_model

REWARDS = [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, math.nan, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.5, 0.5]
VALID = [True] * 7 + [False] + [True] * 8
SKIPPED = [0, 1, 2, 3, 8, 9, 10, 11, 14, 15]
MICRO_BATCH = 3
DIAGNOSTICS = ("vllm_kl", "vllm_kl_all", "trainer_ppl", "entropy", "mismatch_ratio_max", "mismatch_ratio_mean",
               "mismatch_weight_mean", "mismatch_masked_token_frac", "mismatch_masked_seq_frac")


def _test_batch(model):
    return _batch(model, REWARDS, valid=VALID, num_prompts=4, group_size=4, engine_noise=0.05)


def _run(model, batch, skip, ref_model=None, warm_optimizer=False, **cfg):
    """(trained copy, metrics, forwards with gradient) of one rl_update in fp32 with AdamW (weight decay on,
    so a parameter left without a gradient would show). warm_optimizer: one earlier AdamW step on a random
    gradient, so the update's step also moves the weights by momentum."""
    trained = copy.deepcopy(model)
    grad_forwards = []
    trained.model.register_forward_hook(lambda *_: grad_forwards.append(1) if torch.is_grad_enabled() else None)
    config = RLAlgoConfig(precision="fp32", skip_zero_gradient_rows=skip, lr=1e-2, weight_decay=0.1,
                          micro_batch_size=MICRO_BATCH, **cfg)
    optimizer = build_optimizer(trained, config)
    if warm_optimizer:
        gen = torch.Generator().manual_seed(3)
        for p in trained.parameters():
            p.grad = torch.randn(p.shape, generator=gen)
        optimizer.step()
    metrics = rl_update(trained, ref_model, optimizer, batch, config, torch.Generator().manual_seed(0))
    return trained, metrics, len(grad_forwards)


def _same_weights(a, b) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize("num_inner_steps", [1, 2])  # 1: fused scoring; 2: a scoring pass, then two steps
@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean", "seq_sum"])
def test_skipping_zero_gradient_rows_gives_the_same_weights(aggregation, num_inner_steps):
    model = _tiny_model()
    batch = _test_batch(model)
    settings = dict(aggregation=aggregation, max_tokens=8, num_inner_steps=num_inner_steps)
    skipped, m_skip, forwards_skip = _run(model, batch, True, **settings)
    full, m_full, forwards_full = _run(model, batch, False, **settings)
    assert _delta(model, full).abs().max() > 1e-4  # a real update, so equality is not vacuous
    assert _same_weights(skipped, full)
    # The normalizers stay the unskipped batch's: 15 trained rows and all their tokens.
    assert m_skip["num_train_sequences"] == m_full["num_train_sequences"] == 15.0
    assert m_skip["num_train_tokens"] == m_full["num_train_tokens"] == sum(
        len(r) for i, r in enumerate(batch.response_ids) if VALID[i])
    assert m_skip["num_skipped_rows"] == 10.0 and m_full["num_skipped_rows"] == 0.0
    assert m_skip["num_skipped_tokens"] == sum(len(batch.response_ids[i]) for i in SKIPPED)
    assert m_full["num_skipped_tokens"] == 0.0
    # Forwards with gradient per step: ceil(5 / 3) = 2 micro-batches of the rows with gradient, and
    # ceil(10 / 3) = 4 more for the zero rows when they are not skipped (they are chunked apart).
    assert forwards_skip == 2 * num_inner_steps and forwards_full == (2 + 4) * num_inner_steps
    # The loss is the same (a skipped row's share is 0), up to the order its shares are summed in.
    assert m_skip["loss"] == pytest.approx(m_full["loss"], rel=1e-6, abs=1e-9)
    # theta_k's diagnostics cover every valid row either way: the skipped rows are scored without gradient.
    for name in DIAGNOSTICS:
        assert m_skip[name] == m_full[name], name


def test_clip_cov_and_dropped_groups_keep_the_skip_exact():
    """Clip-Cov only zeroes weights, which multiply A = 0; dropping the zero-variance groups leaves
    the rows at their group's mean (14, 15) to skip."""
    model = _tiny_model()
    batch = _test_batch(model)
    settings = dict(num_inner_steps=2, cov_method="clip_cov", cov_fraction=0.3, cov_bounds=(-10.0, 10.0))
    skipped, m_skip, _ = _run(model, batch, True, **settings)
    full, _, _ = _run(model, batch, False, **settings)
    assert m_skip["num_skipped_rows"] == 10.0 and _same_weights(skipped, full)
    dropped, m_drop, _ = _run(model, batch, True, drop_zero_variance_groups=True)
    kept, _, _ = _run(model, batch, False, drop_zero_variance_groups=True)
    assert m_drop["num_dropped_groups"] == 2.0 and m_drop["num_train_sequences"] == 7.0
    assert m_drop["num_skipped_rows"] == 2.0
    assert m_drop["num_skipped_tokens"] == len(batch.response_ids[14]) + len(batch.response_ids[15])
    assert _same_weights(dropped, kept)


def test_a_batch_without_signal_still_takes_the_optimizer_step():
    # Every row skipped: the step still applies zero gradients (AdamW's momentum and weight decay move
    # the weights, and its step count advances) exactly as the unskipped update does.
    model = _tiny_model()
    batch = _batch(model, [1.0] * 4 + [0.0] * 4, engine_noise=0.05)
    skipped, m_skip, forwards = _run(model, batch, True, warm_optimizer=True)
    full, _, _ = _run(model, batch, False, warm_optimizer=True)
    assert m_skip["num_skipped_rows"] == 8.0 and forwards == 0 and m_skip["skipped"] == 0.0
    assert m_skip["grad_norm"] == 0.0
    assert _delta(model, full).abs().max() > 1e-4
    assert _same_weights(skipped, full)


@pytest.mark.parametrize("settings, reason", [
    ({"kl_coef": 0.2, "kl_placement": "loss", "kl_estimator": "k2"}, "KL loss"),
    ({"cov_method": "kl_cov"}, "KL-Cov"),
])
def test_a_term_that_reaches_zero_advantage_rows_turns_skipping_off(settings, reason):
    with pytest.warns(UserWarning, match=reason):
        config = RLAlgoConfig(**settings)
    assert reason in config.zero_gradient_skip_blocker()
    model = _tiny_model()
    ref = _tiny_model(seed=5) if settings.get("kl_coef") else None
    batch = _test_batch(model)
    with pytest.warns(UserWarning, match=reason):
        _, metrics, forwards = _run(model, batch, True, ref_model=ref, **settings)
    assert metrics["num_skipped_rows"] == 0.0 and metrics["num_skipped_tokens"] == 0.0
    assert forwards == -(-15 // MICRO_BATCH)  # every trained row, in one part


def test_a_kl_loss_moves_a_batch_whose_advantages_are_all_zero():
    # Why a KL loss turns skipping off: with every A = 0 the update still changes the weights.
    model = _tiny_model()
    batch = _batch(model, [1.0] * 8, engine_noise=0.05)
    with pytest.warns(UserWarning, match="KL loss"):
        trained, metrics, _ = _run(model, batch, True, ref_model=_tiny_model(seed=5), kl_coef=0.5,
                                   kl_placement="loss", kl_estimator="k2")
    assert metrics["advantages_std"] == 0.0 and metrics["num_skipped_rows"] == 0.0
    assert _delta(model, trained).abs().max() > 1e-4


def test_kl_in_the_reward_is_folded_into_the_advantages_first():
    # Not a blocker: the penalty differs per response, so no shaped advantage is 0 and nothing is skipped.
    config = RLAlgoConfig(kl_coef=0.1)
    assert config.zero_gradient_skip_blocker() is None
    model = _tiny_model()
    _, metrics, _ = _run(model, _test_batch(model), True, ref_model=_tiny_model(seed=5), kl_coef=0.1)
    assert metrics["num_skipped_rows"] == 0.0
