"""reward.invalid_reward (issue 53 item 2): 'mask' leaves a rollout without a verdict out of the gradient,
'zero' trains on it with reward 0, which lowers its probability."""

import copy
import math

import torch
from tiny_chat_model import tiny_llama

from passband.training.engines.protocol import Sample
from passband.training.logprobs import response_logprobs
from passband.training.rl.batches.batching import build_rollout_batch
from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.monitoring.rollout_metrics import rollout_metrics
from passband.training.rl.update import rl_update


def _tiny_model():
    return tiny_llama().eval()  # eval: no dropout, deterministic log-probs


def _logp(model, prompt, response) -> float:
    with torch.no_grad():
        return float(response_logprobs(model, [prompt], [response]).logp[0].sum())


PROMPT = [1, 2, 3]
RESPONSES = [[4, 5, 6], [7, 8], [9, 10, 11, 12], [13, 14]]
# Row 0 passes, row 1 fails, row 2 is unparsable (no verdict), row 3 passes but hit max_tokens.
REWARDS = [[1.0, 0.0, None, 1.0]]
VALID = [[True, True, False, True]]


def _samples(model):
    finish = ["stop", "stop", "stop", "length"]
    return [[Sample(prompt_index=0, sample_index=j, token_ids=r, text="", finish_reason=finish[j],
                    logprobs=response_logprobs(model, [PROMPT], [r]).logp[0].tolist(), prompt_token_ids=PROMPT)
             for j, r in enumerate(RESPONSES)]]


def test_zero_trains_on_rows_without_a_verdict_with_reward_zero():
    with torch.no_grad():
        samples = _samples(_tiny_model())
    masked = build_rollout_batch(samples, REWARDS, VALID, ["math"])
    assert masked.valid == [True, True, False, False] and masked.unscored is None
    zeroed = build_rollout_batch(samples, REWARDS, VALID, ["math"], invalid_reward="zero")
    assert zeroed.valid == [True, True, True, True]
    assert zeroed.rewards == [1.0, 0.0, 0.0, 0.0]  # the truncated pass too, under mask_truncated
    assert zeroed.unscored == [False, False, True, True]
    # Both count them as unparsable; only 'mask' masks them.
    for batch, masked_rows in ((masked, 2.0), (zeroed, 0.0)):
        metrics = rollout_metrics(batch)
        assert metrics["unparsable_frac"] == 0.5 and metrics["num_masked_unparsable"] == masked_rows
        assert metrics["reward"] == 0.25
    kept = build_rollout_batch(samples, REWARDS, VALID, ["math"], mask_truncated=False, invalid_reward="zero")
    assert kept.rewards == [1.0, 0.0, 0.0, 1.0] and kept.unscored == [False, False, True, False]


def test_zero_lowers_the_unparsable_rows_probability_and_mask_leaves_it_untrained():
    model = _tiny_model()
    with torch.no_grad():
        samples = _samples(model)
    before = _logp(model, PROMPT, RESPONSES[2])
    changes = {}
    for mode in ("mask", "zero"):
        batch = build_rollout_batch(samples, REWARDS, VALID, ["math"], invalid_reward=mode)
        trained = copy.deepcopy(model)
        optimizer = torch.optim.SGD(trained.parameters(), lr=0.5)
        config = RLAlgoConfig(precision="fp32", grad_clip=None, lr=0.5)
        metrics = rl_update(trained, None, optimizer, batch, config)
        assert metrics["skipped"] == 0.0
        changes[mode] = _logp(trained, PROMPT, RESPONSES[2]) - before
        if mode == "zero":
            # Its advantage is negative: the group's mean reward 0.25 over a reward of 0.
            assert metrics["num_train_sequences"] == 4.0
    assert changes["zero"] < 0, changes
    # Under 'mask' its gradient is 0: it moves only through the other rows' shared parameters, and less.
    assert changes["zero"] < changes["mask"], changes
    assert math.isfinite(changes["mask"])
