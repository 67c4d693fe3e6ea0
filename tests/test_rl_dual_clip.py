"""Dual-clip PPO (issue 53 item 3): for A < 0 the per-token objective is bounded below by c A."""

import copy
import math

import pytest
import torch
from tiny_chat_model import tiny_llama

from passband.training.logprobs import response_logprobs
from passband.training.rl.batches.batching import RolloutBatch
from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.loss import loss_settings
from passband.training.rl.algebra.objectives import policy_loss
from passband.training.rl.update import rl_update


def _loss_and_grad(ratios, advantages, dual_clip):
    """One row of tokens with the given ratios (old_logp 0) and per-token advantages; token_mean."""
    logp = torch.tensor([[math.log(r) for r in ratios]], requires_grad=True)
    loss, metrics = policy_loss(logp, torch.zeros_like(logp), torch.tensor([advantages]), torch.ones_like(logp),
                                dual_clip=dual_clip)
    loss.backward()
    return loss.item(), logp.grad[0].tolist(), metrics


def test_ratio_five_with_negative_advantage_costs_c_and_has_no_gradient():
    loss, grad, metrics = _loss_and_grad([5.0], [-1.0], dual_clip=3.0)
    assert loss == pytest.approx(3.0) and grad == [0.0]
    assert metrics["clip_frac_dual"] == 1.0 and metrics["clip_frac"] == 0.0
    # Without it: -r A = 5, and d(-r A)/d logp = -A r = 5.
    loss, grad, metrics = _loss_and_grad([5.0], [-1.0], dual_clip=None)
    assert loss == pytest.approx(5.0) and grad == [pytest.approx(5.0)]
    assert "clip_frac_dual" not in metrics


def test_dual_clip_leaves_every_other_token_alone():
    # Tokens: A < 0 at r = 0.5 (the low clip: 0.8), A < 0 at r = 2 (below c: -r A), A > 0 at r = 5 (high clip: 1.28),
    # A < 0 at r = 5 (dual clip: 3). token_mean over 4 tokens.
    ratios, advantages = [0.5, 2.0, 5.0, 5.0], [-1.0, -1.0, 1.0, -1.0]
    loss, grad, metrics = _loss_and_grad(ratios, advantages, dual_clip=3.0)
    assert loss == pytest.approx((0.8 + 2.0 - 1.28 + 3.0) / 4)
    assert grad == [0.0, pytest.approx(2.0 / 4), 0.0, 0.0]
    assert metrics["clip_frac_dual"] == 0.25
    plain_loss, plain_grad, _ = _loss_and_grad(ratios, advantages, dual_clip=None)
    assert plain_loss == pytest.approx((0.8 + 2.0 - 1.28 + 5.0) / 4)
    assert plain_grad[:3] == grad[:3] and plain_grad[3] == pytest.approx(5.0 / 4)


@pytest.mark.parametrize("c", [1.0, 0.5])
def test_config_refuses_c_at_or_below_one(c):
    with pytest.raises(ValueError, match="set c > 1"):
        RLAlgoConfig(dual_clip=c)


def test_kl_cov_keeps_its_unclipped_surrogate():
    assert loss_settings(RLAlgoConfig(cov_method="kl_cov", skip_zero_gradient_rows=False)).dual_clip is None
    assert loss_settings(RLAlgoConfig()).dual_clip == 3.0


def _on_policy_batch(model) -> RolloutBatch:
    gen = torch.Generator().manual_seed(1)
    prompts, responses = [], []
    for _ in range(2):
        prompt = torch.randint(3, 250, (5,), generator=gen).tolist()
        for _ in range(4):
            prompts.append(prompt)
            responses.append(torch.randint(3, 250, (int(torch.randint(2, 8, (1,), generator=gen)),), generator=gen).tolist())
    with torch.no_grad():
        engine = [response_logprobs(model, [p], [r]).logp[0].tolist() for p, r in zip(prompts, responses)]
    return RolloutBatch(prompt_ids=prompts, response_ids=responses, engine_logp=engine,
                        rewards=[1.0, 0.0, 0.5, 0.0, 1.0, 1.0, 0.0, 0.25], valid=[True] * 8, tasks=["math"] * 8,
                        group_size=4)


@pytest.mark.parametrize("behaviour_policy", ["trainer", "engine"])
def test_the_default_c_does_not_move_an_on_policy_fp32_update(behaviour_policy):
    """The default (3) against none, two inner steps at a large lr: the same weights bit for bit, as the
    ratios stay far below 3 (the demo runs one inner step, whose ratio is exactly 1)."""
    model = tiny_llama().eval()
    batch = _on_policy_batch(model)
    weights, ratio_max = {}, {}
    for c in (3.0, None):
        trained = copy.deepcopy(model)
        optimizer = torch.optim.AdamW(trained.parameters(), lr=1e-3)
        metrics = rl_update(trained, None, optimizer, batch,
                            RLAlgoConfig(precision="fp32", num_inner_steps=2, dual_clip=c, micro_batch_size=4,
                                         behaviour_policy=behaviour_policy))
        weights[c] = torch.cat([p.detach().reshape(-1) for p in trained.parameters()])
        ratio_max[c] = metrics["ratio_max"]
        assert metrics.get("clip_frac_dual", 0.0) == 0.0
    assert torch.equal(weights[3.0], weights[None])
    assert 1.0 < ratio_max[3.0] < 1.5, ratio_max
