"""Chunked token entropy against hand values and the plain full-softmax entropy."""

import math

import pytest
import torch

from passband.training.rl.algebra.entropy import entropy_from_hidden, token_entropy


def _full_softmax_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Independent reference: -(p * log p).sum over the vocabulary, all at once, in float64."""
    log_p = torch.log_softmax(logits.double(), dim=-1)
    return -(log_p.exp() * log_p).sum(-1)


def test_entropy_by_hand():
    # Second position: p = [1/4, 3/4, 0, 0]; -inf logits (banned tokens) must not give NaN.
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [0.0, math.log(3.0), -math.inf, -math.inf]]])
    mask = torch.ones(1, 2)
    # uniform over 4: ln 4 = 1.386294; [1/4, 3/4]: -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.562335.
    per_token = token_entropy(logits, mask, chunk_size=1, reduction="none")
    assert torch.allclose(per_token, torch.tensor([[math.log(4), 0.562335]]), atol=1e-6)
    assert token_entropy(logits, mask) == pytest.approx((math.log(4) + 0.562335) / 2, abs=1e-6)


@pytest.mark.parametrize("chunk_size", [1, 5, 7, 64])
def test_chunked_matches_full_softmax(chunk_size):
    torch.manual_seed(0)
    logits = 3.0 * torch.randn(3, 6, 50)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1], [1, 0, 1, 0, 1, 0]])
    reference = _full_softmax_entropy(logits) * mask
    per_token = token_entropy(logits, mask, chunk_size=chunk_size, reduction="none")
    assert torch.allclose(per_token.double(), reference, atol=1e-5)
    mean = token_entropy(logits, mask, chunk_size=chunk_size)
    assert mean == pytest.approx(float(reference.sum() / mask.sum()), abs=1e-5)


def test_masked_positions_are_never_trusted():
    torch.manual_seed(1)
    logits = torch.randn(2, 4, 10)
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0]])
    poisoned = logits.clone()
    poisoned[mask == 0] = float("nan")
    assert token_entropy(poisoned, mask, chunk_size=3) == pytest.approx(token_entropy(logits, mask), abs=1e-6)


def test_entropy_from_hidden_matches_logits_path():
    torch.manual_seed(2)
    hidden = torch.randn(2, 5, 8)
    lm_head = torch.randn(30, 8)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    reference = _full_softmax_entropy(hidden @ lm_head.T) * mask
    per_token = entropy_from_hidden(hidden, lm_head, mask, chunk_size=4, reduction="none")
    assert torch.allclose(per_token.double(), reference, atol=1e-5)
