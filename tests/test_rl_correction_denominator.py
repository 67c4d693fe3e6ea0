"""algo.correction_denominator (issue 53 item 3): 'kept' divides the loss by what the correction keeps."""

import copy

import pytest
import torch
from tiny_chat_model import tiny_llama

from passband.training.logprobs import response_logprobs
from passband.training.rl.batches.batching import RolloutBatch
from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.loss import compute_loss, loss_settings
from passband.training.rl.algebra.mismatch import importance_weights
from passband.training.rl.update import _fuses_scoring, _loss_inputs, rl_update


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean"])
def test_four_rows_one_rejected_the_loss_is_the_mean_over_the_three_kept(aggregation):
    # Two tokens per row, trainer = pi_old (ratio 1: each token's loss is -A). Row 3's engine log-probs are 1 nat
    # lower per token: rho = e^2 > C = 2, so seq-MIS rejects it (weight 0); rows 0-2 have rho = 1.
    trainer = torch.full((4, 2), -1.0)
    engine = trainer.clone()
    engine[3] -= 1.0
    mask = torch.ones(4, 2)
    advantages = torch.tensor([1.0, -0.5, 2.0, 4.0])
    correction = importance_weights(trainer, engine, mask, "seq_mis", 2.0)
    assert correction[:, 0].tolist() == [1.0, 1.0, 1.0, 0.0]
    losses = {}
    for denominator in ("all", "kept"):
        cfg = RLAlgoConfig(correction_denominator=denominator, aggregation=aggregation)
        inputs = _loss_inputs(cfg, mask, advantages, trainer, engine, correction, None, None)
        losses[denominator] = compute_loss(trainer.clone(), inputs, loss_settings(cfg)).loss.item()
    # Per row the mean token loss is -A: kept (-1 + 0.5 - 2) / 3; all the same sum over 4 rows (8 tokens).
    assert losses["kept"] == pytest.approx(-2.5 / 3)
    assert losses["all"] == pytest.approx(-2.5 / 4)


def test_kept_turns_the_fused_first_step_off():
    assert _fuses_scoring(RLAlgoConfig())
    assert not _fuses_scoring(RLAlgoConfig(correction_denominator="kept"))


def test_kept_scales_the_update_by_the_trained_over_the_kept_tokens():
    """On a tiny model with plain SGD and no grad clip, 'kept' is 'all' times (tokens / kept tokens), and equal
    to it when nothing is rejected."""
    model = tiny_llama().eval()
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(3, 250, (5,), generator=gen).tolist()
    responses = [torch.randint(3, 250, (n,), generator=gen).tolist() for n in (3, 4, 2, 5)]
    with torch.no_grad():
        own = [response_logprobs(model, [prompt], [r]).logp[0].tolist() for r in responses]

    def update(engine, denominator):
        batch = RolloutBatch(prompt_ids=[prompt] * 4, response_ids=responses, engine_logp=engine,
                             rewards=[1.0, 0.0, 0.5, 0.0], valid=[True] * 4, tasks=["math"] * 4, group_size=4)
        trained = copy.deepcopy(model)
        optimizer = torch.optim.SGD(trained.parameters(), lr=0.1)
        rl_update(trained, None, optimizer, batch, RLAlgoConfig(precision="fp32", grad_clip=None,
                                                                correction_denominator=denominator))
        return torch.cat([(a - b).reshape(-1) for a, b in zip(model.parameters(), trained.parameters())])

    assert torch.allclose(update(own, "kept"), update(own, "all"), atol=1e-9)
    rejected = [row if i != 3 else [v - 1.0 for v in row] for i, row in enumerate(own)]  # row 3: 5 tokens
    kept, scaled = update(rejected, "kept"), update(rejected, "all") * 14 / 9  # 14 tokens trained, 9 kept
    assert float((kept - scaled).abs().max()) <= 1e-4 * float(scaled.abs().max())
