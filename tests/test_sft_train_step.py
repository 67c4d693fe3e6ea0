"""One packed, accumulated step gives the loss and gradient of the examples run one by one."""

import pytest
import torch
import torch.nn.functional as F

from tiny_chat_model import PAD, tiny_llama
from passband.training.sft.loop import train_step
from passband.training.sft.model_loss import PackedLMLoss
from passband.training.sft.packing import SFTExample


def _examples():
    gen = torch.Generator().manual_seed(2)
    examples = []
    for length, num_prompt in [(12, 5), (7, 3), (20, 9), (5, 2), (9, 4)]:
        ids = torch.randint(0, 256, (length,), generator=gen).tolist()
        examples.append(SFTExample(ids, [0] * num_prompt + [1] * (length - num_prompt)))
    return examples


def _reference(model, examples):
    """Token-mean next-token loss over all response tokens, each example alone through the HF model."""
    model.zero_grad()
    total, num_loss = 0.0, 0
    losses = []
    for example in examples:
        logits = model(input_ids=torch.tensor([example.input_ids])).logits[0]  # [T, V]
        mask = torch.tensor(example.loss_mask[1:], dtype=torch.bool)
        targets = torch.tensor(example.input_ids[1:])
        losses.append(F.cross_entropy(logits[:-1][mask], targets[mask], reduction="sum"))
        num_loss += int(mask.sum())
    loss = torch.stack(losses).sum() / num_loss
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("micro_batch_tokens", [24, 64])  # 24: several micro-batches, one row each
def test_packed_step_matches_examples_run_alone(micro_batch_tokens):
    model = tiny_llama(seed=4)
    examples = _examples()
    ref_loss, ref_grads = _reference(model, examples)
    model.zero_grad()
    metrics = train_step(PackedLMLoss(model, chunk_size=7), examples, max_length=24,
                         micro_batch_tokens=micro_batch_tokens, pad_id=PAD,
                         device=torch.device("cpu"))
    assert metrics["loss"] == pytest.approx(ref_loss, rel=1e-5)
    assert metrics["num_loss_tokens"] == 7 + 4 + 11 + 3 + 5
    assert metrics["num_tokens"] == 53
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, ref_grads[name], atol=1e-5, rtol=1e-4)


def test_padding_fraction_by_hand():
    model = tiny_llama(seed=4)
    examples = _examples()  # lengths 12, 7, 20, 5, 9 (53 tokens)
    # FFD into rows of 24, longest first: 20 -> r0; 12 -> r1 (r0 would be 32); 9 -> r1 (21);
    # 7 -> r2 (r0 27, r1 28); 5 -> r2 (r0 25, r1 26) -> rows of 20, 21, 12 tokens.
    # One micro-batch of 3 rows x 21 = 63 padded tokens, 10 of them padding.
    metrics = train_step(PackedLMLoss(model, chunk_size=64), examples, max_length=24, micro_batch_tokens=64,
                         pad_id=PAD, device=torch.device("cpu"))
    assert metrics["num_rows"] == 3
    assert metrics["padding_fraction"] == pytest.approx((63 - 53) / 63)
