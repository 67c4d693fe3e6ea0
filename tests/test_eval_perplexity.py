"""perplexity_under against an independent full-logits computation on a tiny Llama built here."""

import math

import pytest
import torch

from tiny_chat_model import VOCAB_SIZE, tiny_llama
from passband.training.evaluation.perplexity import perplexity_under

# Ragged prompts and responses so micro-batches of 2 and 8 carry right-padding.
PROMPTS = [[72, 105, 10], [65], [1, 2, 3, 4, 5, 6], [200, 100], [7, 8, 9]]
RESPONSES = [[33, 34, 256], [66, 67, 68, 69, 70], [10], [11, 12], [250, 251, 252, 253]]


def _reference_perplexity(model, prompts, responses, temperature=1.0):
    """One unpadded sequence at a time through model(...).logits, log_softmax over the full vocab."""
    nll, num_tokens = 0.0, 0
    with torch.no_grad():
        for prompt, response in zip(prompts, responses):
            ids = torch.tensor([prompt + response])
            logits = model(input_ids=ids).logits[0].double() / temperature  # [L, V]
            logp = torch.log_softmax(logits, dim=-1)
            for t, token in enumerate(response):
                # response token t sits at position len(prompt) + t, predicted from the one before
                nll -= float(logp[len(prompt) + t - 1, token])
                num_tokens += 1
    return math.exp(nll / num_tokens)


@pytest.mark.parametrize("micro_batch_size", [1, 2, 8])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_matches_full_logits_reference(micro_batch_size, temperature):
    model = tiny_llama(seed=3)
    expected = _reference_perplexity(model, PROMPTS, RESPONSES, temperature)
    got = perplexity_under(model, PROMPTS, RESPONSES, temperature=temperature, micro_batch_size=micro_batch_size)
    assert got == pytest.approx(expected, rel=1e-4)
    # An untrained model over 259 tokens: perplexity near the vocab size, far from 1.
    assert 50 < got < 1000


def test_token_weighted_mean_not_mean_of_sequences():
    model = tiny_llama(seed=1)
    short = _reference_perplexity(model, PROMPTS[2:3], RESPONSES[2:3])  # 1 token
    long = _reference_perplexity(model, PROMPTS[1:2], RESPONSES[1:2])  # 5 tokens
    both = perplexity_under(model, [PROMPTS[2], PROMPTS[1]], [RESPONSES[2], RESPONSES[1]], micro_batch_size=1)
    # exp of the token mean = geometric mean of per-sequence perplexities weighted by length.
    assert both == pytest.approx(math.exp((math.log(short) * 1 + math.log(long) * 5) / 6), rel=1e-4)


def test_uniform_model_has_perplexity_vocab_size():
    model = tiny_llama(seed=0)
    with torch.no_grad():
        model.lm_head.weight.zero_()  # all logits 0 -> uniform over the vocab
    assert perplexity_under(model, PROMPTS, RESPONSES) == pytest.approx(VOCAB_SIZE, rel=1e-6)


def test_empty_responses_add_no_tokens_and_training_flag_is_restored():
    model = tiny_llama(seed=2)
    model.train()
    with_empty = perplexity_under(model, PROMPTS + [[5]], RESPONSES + [[]], micro_batch_size=2)
    assert with_empty == pytest.approx(_reference_perplexity(model, PROMPTS, RESPONSES), rel=1e-4)
    assert model.training


def test_bad_inputs_are_refused():
    model = tiny_llama(seed=0)
    with pytest.raises(ValueError, match="2 prompts but 1 responses"):
        perplexity_under(model, [[1], [2]], [[3]])
    with pytest.raises(ValueError, match="every response is empty"):
        perplexity_under(model, [[1]], [[]])
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        perplexity_under(model, [[1], []], [[2], [3]])
    with pytest.raises(ValueError, match="micro_batch_size must be >= 1"):
        perplexity_under(model, [[1]], [[2]], micro_batch_size=0)


def test_the_scored_subset_is_spread_over_every_eval_set() -> None:
    from passband.training.evaluation.perplexity import spread_subset

    rows = [f"math-{i}" for i in range(6)] + [f"code-{i}" for i in range(4)]
    # positions i * 10 // 4 = 0, 2, 5, 7: both sets are scored, not just the first
    assert spread_subset(rows, 4) == ["math-0", "math-2", "math-5", "code-1"]
    assert spread_subset(rows, None) == rows == spread_subset(rows, 10) == spread_subset(rows, 50)
    assert spread_subset(rows, 1) == ["math-0"]
