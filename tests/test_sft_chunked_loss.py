"""Chunked LM head + cross-entropy equals the plain full-logits loss, in value and gradients."""

import math

import pytest
import torch
import torch.nn.functional as F

from passband.training.runtime.chunked_loss import IGNORE_INDEX, chunked_lm_loss, logprobs_of_tokens


def _inputs(num_tokens=37, hidden=16, vocab=50, seed=0):
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(num_tokens, hidden, generator=gen, dtype=torch.float64)
    w = torch.randn(vocab, hidden, generator=gen, dtype=torch.float64) * 0.3
    labels = torch.randint(0, vocab, (num_tokens,), generator=gen)
    labels[[0, 5, 6, num_tokens - 1]] = IGNORE_INDEX
    return h, w, labels


@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("chunk_size", [1, 8, 37, 100])  # 8 does not divide 37
def test_loss_and_gradients_match_full_logits(reduction, chunk_size):
    h, w, labels = _inputs()
    h_ref, w_ref = h.clone().requires_grad_(), w.clone().requires_grad_()
    ref = F.cross_entropy(h_ref @ w_ref.T, labels, ignore_index=IGNORE_INDEX, reduction=reduction)
    ref.backward()
    h_c, w_c = h.clone().requires_grad_(), w.clone().requires_grad_()
    loss = chunked_lm_loss(h_c, w_c, labels, chunk_size=chunk_size, reduction=reduction)
    loss.backward()
    # fp32 log-softmax inside the chunks: tolerance of fp32 on O(1) numbers.
    torch.testing.assert_close(loss.double(), ref, atol=1e-5, rtol=1e-6)
    torch.testing.assert_close(h_c.grad, h_ref.grad, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(w_c.grad, w_ref.grad, atol=1e-6, rtol=1e-5)
    assert torch.all(h_c.grad[[0, 5, 6, 36]] == 0)


def test_loss_by_hand_two_tokens():
    # hidden = one-hot rows, weight = identity*2 over V=2: logits [2, 0] and [0, 2].
    h = torch.eye(2)
    w = 2 * torch.eye(2)
    labels = torch.tensor([0, 0])
    # token 0: -log(e^2/(e^2+1)); token 1: -log(1/(e^2+1))
    expected = math.log1p(math.exp(-2)) + math.log1p(math.exp(2))
    assert chunked_lm_loss(h, w, labels, chunk_size=1).item() == pytest.approx(expected, rel=1e-6)
    assert chunked_lm_loss(h, w, labels, reduction="mean").item() == pytest.approx(expected / 2, rel=1e-6)


def test_logprobs_of_tokens_match_log_softmax_and_backprop():
    h, w, labels = _inputs(num_tokens=23, seed=3)
    h.requires_grad_()
    ref = torch.log_softmax(h @ w.T, dim=-1).gather(1, labels.clamp(min=0)[:, None]).squeeze(1)
    ref = ref * (labels != IGNORE_INDEX)
    out = logprobs_of_tokens(h, w, labels, chunk_size=5)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-6)
    (grad_out,) = torch.autograd.grad(out.sum(), h)
    (grad_ref,) = torch.autograd.grad(ref.sum(), h)
    torch.testing.assert_close(grad_out, grad_ref, atol=1e-6, rtol=1e-5)


def test_bf16_inputs_get_fp32_log_softmax():
    h, w, labels = _inputs(seed=4)
    ref = F.cross_entropy(h.bfloat16().double() @ w.bfloat16().double().T, labels, ignore_index=IGNORE_INDEX, reduction="sum")
    loss = chunked_lm_loss(h.bfloat16(), w.bfloat16(), labels, chunk_size=8)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss.double(), ref, atol=1e-4, rtol=1e-5)


def test_bad_reduction_is_refused():
    h, w, labels = _inputs()
    with pytest.raises(ValueError, match="reduction must be 'sum' or 'mean', got 'avg'"):
        chunked_lm_loss(h, w, labels, reduction="avg")


@pytest.mark.gpu
def test_liger_matches_torch_on_cuda():
    h, w, labels = (t.cuda() for t in _inputs(num_tokens=300, hidden=64, vocab=1000))
    h, w = h.float(), w.float()
    grads = []
    losses = []
    for use_liger in (True, False):
        h_i, w_i = h.clone().requires_grad_(), w.clone().requires_grad_()
        loss = chunked_lm_loss(h_i, w_i, labels, chunk_size=64, use_liger=use_liger)
        loss.backward()
        losses.append(loss)
        grads.append((h_i.grad, w_i.grad))
    torch.testing.assert_close(losses[0], losses[1], atol=1e-3, rtol=1e-4)
    torch.testing.assert_close(grads[0][0], grads[1][0], atol=1e-4, rtol=1e-3)
    torch.testing.assert_close(grads[0][1], grads[1][1], atol=1e-4, rtol=1e-3)
