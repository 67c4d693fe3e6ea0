"""The one micro-batched scoring loop and what is built on it, against one-at-a-time scoring."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from passband.training.logprobs import (engine_trainer_kl, pad_rows, pooled_perplexity, response_logprobs,
                                        sequence_logprobs, sequence_perplexities)

PROMPTS = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [3]]
RESPONSES = [[10, 11], [12, 13, 14], [], [20]]
ENGINE = [[-1.0, -2.0], [-0.5, -3.0, -1.5], [], [-4.0]]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    return LlamaForCausalLM(config).eval()


def one_at_a_time(model, temperature=1.0):
    with torch.no_grad():
        return [response_logprobs(model, [p], [r], temperature).logp[0] if r else torch.zeros(0)
                for p, r in zip(PROMPTS, RESPONSES)]


@pytest.mark.parametrize("micro_batch_size", [1, 2, 3, 8])
def test_values_do_not_depend_on_the_micro_batches(model, micro_batch_size):
    expected = one_at_a_time(model, temperature=0.7)
    got = sequence_logprobs(model, PROMPTS, RESPONSES, temperature=0.7, micro_batch_size=micro_batch_size)
    assert [len(g) for g in got] == [2, 3, 0, 1]
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)


def test_perplexities_and_engine_kl_by_hand(model):
    expected = one_at_a_time(model)
    flat = [float(v) for e in expected for v in e]
    assert pooled_perplexity(sequence_logprobs(model, PROMPTS, RESPONSES)) == pytest.approx(
        math.exp(-sum(flat) / len(flat)), rel=1e-5)
    per_sequence = sequence_perplexities(sequence_logprobs(model, PROMPTS, RESPONSES))
    assert math.isnan(per_sequence[2])
    assert per_sequence[0] == pytest.approx(math.exp(-float(expected[0].mean())), rel=1e-5)
    d = [float(t) - e for trainer, engine in zip(expected, ENGINE) for t, e in zip(trainer, engine)]
    k3 = sum(math.exp(x) - x - 1 for x in d) / len(d)
    assert engine_trainer_kl(model, PROMPTS, RESPONSES, ENGINE, micro_batch_size=3) == pytest.approx(k3, rel=1e-5)


def test_an_empty_prompt_before_a_response_is_refused(model):
    with pytest.raises(ValueError, match="prompt 0 is empty"):
        sequence_logprobs(model, [[]], [[1]])


def test_padding_to_a_multiple_changes_the_shape_not_the_values(model):
    """pad_to_multiple (RL's bound on distinct matmul shapes) only adds right padding no real token sees."""
    values, mask = pad_rows([[1, 2, 3], [4]], torch.long, multiple=4)
    assert values.tolist() == [[1, 2, 3, 0], [4, 0, 0, 0]] and mask.tolist() == [[1, 1, 1, 0], [1, 0, 0, 0]]
    assert pad_rows([[1] * 5], torch.long, multiple=4)[0].shape == (1, 8)
    assert pad_rows([[1] * 8], torch.long, multiple=4)[0].shape == (1, 8)
    widths = []
    hook = model.model.register_forward_hook(lambda _m, args, kwargs, out: widths.append(kwargs["input_ids"].shape[1]),
                                             with_kwargs=True)
    with torch.no_grad():
        plain = response_logprobs(model, PROMPTS[:2], RESPONSES[:2])
        padded = response_logprobs(model, PROMPTS[:2], RESPONSES[:2], pad_to_multiple=16)
    hook.remove()
    assert widths == [5, 16]  # [4, 5] + [12, 13, 14]: 5 tokens, padded to 16
    torch.testing.assert_close(padded.logp, plain.logp, atol=1e-6, rtol=1e-6)
    assert torch.equal(padded.mask, plain.mask)
