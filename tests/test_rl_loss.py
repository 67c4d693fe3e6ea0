"""`compute_loss` over `LossInputs`: micro-batch shares add up to the full-batch loss, every term on."""

import pytest
import torch

from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.algebra.kl import kl_loss
from passband.training.rl.loss import LossInputs, compute_loss, loss_settings
from passband.training.rl.algebra.objectives import policy_loss


def _inputs(kl_level: str):
    gen = torch.Generator().manual_seed(0)
    lengths = torch.tensor([5, 2, 4, 0, 3, 1])  # row 3: no response tokens (an invalid row)
    mask = (torch.arange(5)[None, :] < lengths[:, None]).float()  # [6, 5]
    old_logp = -torch.rand(6, 5, generator=gen)
    logp = (old_logp + 0.1 * torch.randn(6, 5, generator=gen)).requires_grad_()
    cfg = RLAlgoConfig(kl_coef=0.3, kl_placement="loss", kl_estimator="k2", kl_level=kl_level, correction="token_tis",
                       cov_method="kl_cov")
    inputs = LossInputs(
        mask=mask, advantages=torch.randn(6, generator=gen), old_logp=old_logp,
        weights=torch.rand(6, 5, generator=gen), num_tokens=float(mask.sum()), num_sequences=5.0,
        ref_logp=-torch.rand(6, 5, generator=gen), behaviour_logp=old_logp - 0.2 * torch.rand(6, 5, generator=gen),
        kl_keep=(torch.rand(6, 5, generator=gen) > 0.2).float(), kl_cov_selected=(torch.rand(6, 5, generator=gen) > 0.7).float(),
    )
    return logp, inputs, cfg


@pytest.mark.parametrize("kl_level", ["token", "sequence"])
def test_micro_batch_shares_sum_to_the_full_batch_loss(kl_level):
    logp, inputs, cfg = _inputs(kl_level)
    settings = loss_settings(cfg)
    full = compute_loss(logp, inputs, settings)
    # Independent: the pure terms on the whole batch, added by hand.
    policy, _ = policy_loss(logp, inputs.old_logp, inputs.advantages, inputs.mask, clip_low=1.0, clip_high=float("inf"),
                            weights=inputs.weights)
    kl = kl_loss(logp, inputs.ref_logp, inputs.mask, 0.3, "k2", inputs.behaviour_logp, level=kl_level,
                 keep=inputs.kl_keep, weight_cap=cfg.correction_threshold)
    kl_cov = (cfg.kl_cov_coef * (logp - inputs.old_logp).abs() * inputs.kl_cov_selected * inputs.mask).sum() / inputs.mask.sum()
    assert full.loss.item() == pytest.approx((policy + kl + kl_cov).item(), rel=1e-6)
    (full_grad,) = torch.autograd.grad(full.loss, logp)
    total, grad = 0.0, torch.zeros_like(logp)
    for rows in ([0, 1], [2, 3, 4], [5]):
        index = torch.tensor(rows)
        width = int(inputs.mask[index].sum(-1).max())
        part = compute_loss(logp[index, :width], inputs.rows(index, width), settings).loss
        total += part.item()
        grad += torch.autograd.grad(part, logp)[0]
    assert total == pytest.approx(full.loss.item(), rel=1e-6)
    assert torch.allclose(grad, full_grad, atol=1e-7)
