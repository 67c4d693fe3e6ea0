"""Multi-turn rows in the RL update (issue 55): the environment's tokens inside a response are
context only. The update's gradient, token- and sequence-level (GSPO), is the hand-written one over
the sampled tokens, the mismatch metric ignores the environment tokens' (meaningless) engine
log-probs, and the batch carries each sample's loss mask."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from passband.training.engines.protocol import Sample
from passband.training.logprobs import response_logprobs
from passband.training.rl.batches.batching import RolloutBatch, build_rollout_batch
from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.update import rl_update

VOCAB = 64
PROMPT = [5, 9, 2, 7]
# row 0: turn 1 (3 sampled), a tool result (2 environment tokens), turn 2 (2 sampled); row 1: one turn
RESPONSES = [[11, 12, 13, 40, 41, 14, 15], [21, 22, 23, 24]]
MASKS = [[1, 1, 1, 0, 0, 1, 1], [1, 1, 1, 1]]
REWARDS = [1.0, 0.0]
ADVANTAGES = [0.5, -0.5]  # r - mean(r), scale_by_std off


def _tiny_model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


def _batch(model) -> RolloutBatch:
    """Engine log-probs: the model's own on sampled tokens, 0.0 on the environment's (as episodes record them)."""
    with torch.no_grad():
        own = [response_logprobs(model, [PROMPT], [r]).logp[0].tolist() for r in RESPONSES]
    engine = [[lp if m else 0.0 for lp, m in zip(row, mask)] for row, mask in zip(own, MASKS)]
    return RolloutBatch(prompt_ids=[PROMPT, PROMPT], response_ids=RESPONSES, engine_logp=engine, rewards=REWARDS,
                        valid=[True, True], tasks=["math_python", "math_python"], group_size=2, loss_mask=MASKS)


def _hand_step(model, lr: float, level: str) -> torch.Tensor:
    """The SGD step on the gradient at ratio 1, over sampled tokens only (n_i of row i, N in all):
    token level, token_mean: -sum_i A_i sum_t mask_it logp_it / N;
    GSPO (sequence ratio exp(mean of the sampled tokens' log-ratio), seq_mean): -(1/B) sum_i A_i sum_t mask_it logp_it / n_i."""
    hand = copy.deepcopy(model)
    loss = torch.zeros(())
    for response, mask, advantage in zip(RESPONSES, MASKS, ADVANTAGES):
        logp = response_logprobs(hand, [PROMPT], [response]).logp[0]
        weight = 1 / sum(map(sum, MASKS)) if level == "token" else 1 / (len(RESPONSES) * sum(mask))
        loss = loss - advantage * weight * (logp * torch.tensor(mask, dtype=torch.float32)).sum()
    loss.backward()
    return torch.cat([(-lr * p.grad).reshape(-1) for p in hand.parameters()])


@pytest.mark.parametrize("level, aggregation", [("token", "token_mean"), ("sequence", None)])
def test_update_trains_on_sampled_tokens_only(level, aggregation):
    model = _tiny_model()
    trained = copy.deepcopy(model)
    config = RLAlgoConfig(precision="fp32", scale_by_std=False, level=level, aggregation=aggregation,
                          correction="none", grad_clip=None)
    metrics = rl_update(trained, None, torch.optim.SGD(trained.parameters(), lr=0.5), _batch(model), config)
    step = torch.cat([(after - before).reshape(-1) for before, after in zip(model.parameters(), trained.parameters())])
    assert torch.allclose(step, _hand_step(model, 0.5, level), atol=1e-7, rtol=1e-4)
    assert metrics["num_train_tokens"] == 9.0  # 5 + 4 sampled; the 2 environment tokens are not trained
    # the environment tokens' engine log-probs (0.0) are not compared with the trainer's (~ -4.2)
    assert abs(metrics["vllm_kl"]) < 1e-6 and abs(metrics["vllm_kl_all"]) < 1e-6


def test_without_the_mask_the_environment_tokens_would_count():
    model = _tiny_model()
    batch = _batch(model)
    unmasked = RolloutBatch(**{**batch.__dict__, "loss_mask": None})
    metrics = rl_update(copy.deepcopy(model), None, torch.optim.SGD(model.parameters(), lr=0.0), unmasked,
                        RLAlgoConfig(precision="fp32", correction="none"))
    assert metrics["num_train_tokens"] == 11.0 and metrics["vllm_kl"] > 0.1


def test_batch_carries_each_samples_loss_mask():
    def sample(ids, mask):
        return Sample(0, 0, ids, "", [-0.5] * len(ids), "stop", PROMPT, mask)

    groups = [[sample(RESPONSES[0], MASKS[0]), sample(RESPONSES[1], None)]]
    batch = build_rollout_batch(groups, [[1.0, 0.0]], [[True, True]], ["math_python"])
    assert batch.loss_mask == [MASKS[0], [1, 1, 1, 1]]
    single = build_rollout_batch([[sample(RESPONSES[1], None)] * 2], [[1.0, 0.0]], [[True, True]], ["math"])
    assert single.loss_mask is None  # single-turn batches are what they were
    with pytest.raises(ValueError, match="loss-mask entries"):
        RolloutBatch(**{**batch.__dict__, "loss_mask": [MASKS[0][:-1], MASKS[1]]})
