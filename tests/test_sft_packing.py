"""Packing: first-fit-decreasing rows, shifted targets, token counts, and attention isolation."""

import pytest
import torch

from tiny_chat_model import PAD, tiny_llama
from passband.training.runtime.chunked_loss import IGNORE_INDEX
from passband.training.sft.packing import (
    SFTExample,
    block_causal_mask,
    collate_packed,
    group_micro_batches,
    pack_first_fit_decreasing,
)


def test_first_fit_decreasing_by_hand():
    # Sorted: 7 (idx 1), 5 (idx 0), 4 (idx 3), 3 (idx 2), 2 (idx 4); capacity 10.
    # 7 -> row0 [1]; 5 -> row1 [0]; 4 -> row1 (5+4=9); 3 -> row0 (7+3=10); 2 -> new row2.
    assert pack_first_fit_decreasing([5, 7, 3, 4, 2], 10) == [[1, 2], [0, 3], [4]]
    with pytest.raises(ValueError, match="example 1 has 11 tokens"):
        pack_first_fit_decreasing([3, 11], 10)


def test_group_micro_batches_by_padded_size():
    # Budget 12: [6] then 2 rows x 6 = 12 ok; third row makes 3 x 6 = 18 -> new group.
    assert group_micro_batches([6, 5, 4, 3], 12) == [[0, 1], [2, 3]]
    assert group_micro_batches([6, 5, 4, 3], 6) == [[0], [1], [2], [3]]


def test_collate_targets_positions_and_counts():
    a = SFTExample([10, 11, 12], [0, 1, 1])
    b = SFTExample([20, 21], [0, 1])
    c = SFTExample([30, 31, 32, 33], [0, 0, 1, 1])
    batch = collate_packed([a, b, c], [[0, 1], [2]], pad_id=PAD)
    assert batch.input_ids.tolist() == [[10, 11, 12, 20, 21], [30, 31, 32, 33, PAD]]
    x = IGNORE_INDEX
    # targets are shifted within each example: 12 never predicts 20.
    assert batch.targets.tolist() == [[11, 12, x, 21, x], [x, 32, 33, x, x]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 0, 1], [0, 1, 2, 3, 0]]
    assert batch.segment_ids.tolist() == [[0, 0, 0, 1, 1], [0, 0, 0, 0, 1]]
    assert batch.cu_seqlens.tolist() == [0, 3, 5, 9, 10]
    assert (batch.num_real_tokens, batch.num_loss_tokens, batch.num_padding_tokens) == (9, 5, 1)


def test_block_causal_mask_by_hand():
    mask = block_causal_mask(torch.tensor([[0, 0, 1]]), torch.float32)
    inf = float("-inf")
    assert mask.shape == (1, 1, 3, 3)
    assert mask[0, 0].tolist() == [[0, inf, inf], [0, 0, inf], [inf, inf, 0]]


def _logits(model, examples, rows):
    batch = collate_packed(examples, rows, pad_id=PAD)
    with torch.no_grad():
        out = model(
            input_ids=batch.input_ids,
            attention_mask=block_causal_mask(batch.segment_ids, torch.float32),
            position_ids=batch.position_ids,
        )
    return out.logits  # [B, T, V]


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_sample_sees_only_itself(attn):
    model = tiny_llama(seed=1, attn=attn).eval()
    gen = torch.Generator().manual_seed(0)
    a = SFTExample(torch.randint(0, 256, (9,), generator=gen).tolist(), [1] * 9)
    a_changed = SFTExample(torch.randint(0, 256, (9,), generator=gen).tolist(), [1] * 9)
    b = SFTExample(torch.randint(0, 256, (6,), generator=gen).tolist(), [1] * 6)
    # b alone, in its own row (padded after it to the width of a longer row in the same batch).
    alone = _logits(model, [b], [[0]])[0]
    packed = _logits(model, [a, b], [[0, 1]])[0, 9:]
    packed_changed = _logits(model, [a_changed, b], [[0, 1]])[0, 9:]
    padded = _logits(model, [b, a], [[0], [1]])[0, :6]
    torch.testing.assert_close(packed, alone, atol=1e-5, rtol=0)
    torch.testing.assert_close(packed_changed, alone, atol=1e-5, rtol=0)
    torch.testing.assert_close(padded, alone, atol=1e-5, rtol=0)
    # The check has teeth: a plain causal mask over the same row lets b see a.
    batch = collate_packed([a, b], [[0, 1]], pad_id=PAD)
    with torch.no_grad():
        leaky = model(input_ids=batch.input_ids).logits[0, 9:]
    assert (leaky - alone).abs().max() > 1e-3
