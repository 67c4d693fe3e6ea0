"""Sequence packing for SFT: several examples per row, with attention kept inside each example.

Rows are filled first-fit-decreasing (deterministic: ties broken by example index). Each packed row
carries position ids that restart at 0 for every example (so RoPE sees each example as if alone),
a segment id per token, and `cu_seqlens`, the example boundaries over the flattened [B*T] tokens
(each row's padding tail is one more segment). Training keeps every example to itself with a
varlen attention kernel fed `cu_seqlens` (training/runtime/varlen_attention.py), in memory linear in T.
`block_causal_mask` builds the equivalent dense [B, 1, T, T] additive mask (4 GB per 32K row in
fp32); it is kept only as the reference the tests compare the varlen path against.

Targets are next-token targets already shifted *within each example*: targets[t] is the token at
t+1 of the same example when that token is in the loss mask, else -100. The last token of an
example therefore never predicts the first token of the next one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from passband.training.runtime.chunked_loss import IGNORE_INDEX


@dataclass(frozen=True)
class SFTExample:
    """One encoded example: token ids and a 0/1 mask of the tokens to learn (see training.chat)."""

    input_ids: list[int]
    loss_mask: list[int]

    def __post_init__(self) -> None:
        if len(self.input_ids) != len(self.loss_mask):
            raise ValueError(
                f"input_ids has {len(self.input_ids)} tokens but loss_mask has {len(self.loss_mask)}"
            )
        if not self.input_ids:
            raise ValueError("example has no tokens")


@dataclass
class PackedBatch:
    """A padded batch of packed rows. B rows, T = longest row in the batch."""

    input_ids: torch.Tensor  # [B, T] int64, padding = pad_id
    targets: torch.Tensor  # [B, T] int64, next-token target or IGNORE_INDEX
    position_ids: torch.Tensor  # [B, T] int64, restarting at 0 for each example (and for the padding tail)
    segment_ids: torch.Tensor  # [B, T] int64, example index within its row; the padding tail is one more segment
    cu_seqlens: torch.Tensor  # [num_segments + 1] int32, boundaries over the flattened [B*T] tokens, padding tails included
    num_real_tokens: int  # tokens of examples (not padding)
    num_loss_tokens: int  # targets != IGNORE_INDEX
    num_padding_tokens: int  # B*T - num_real_tokens
    max_document_length: int  # the longest segment (flash-attn's max_seqlen), known here without reading a device


def pack_first_fit_decreasing(lengths: list[int], max_length: int) -> list[list[int]]:
    """Bins of example indices, each bin's total length <= max_length.

    Longest first; each example goes to the first row with room, else opens a new row. Within a
    row, examples keep the order they were placed in. Deterministic for a given `lengths`.
    """
    rows: list[list[int]] = []
    row_lengths: list[int] = []
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        length = lengths[index]
        if length > max_length:
            raise ValueError(f"example {index} has {length} tokens, more than max_length={max_length}")
        for row, used in enumerate(row_lengths):
            if used + length <= max_length:
                rows[row].append(index)
                row_lengths[row] += length
                break
        else:
            rows.append([index])
            row_lengths.append(length)
    return rows


def group_micro_batches(row_lengths: list[int], micro_batch_tokens: int) -> list[list[int]]:
    """Consecutive rows grouped so that num_rows * longest_row <= micro_batch_tokens (the padded size)."""
    groups: list[list[int]] = []
    longest = 0
    for index, length in enumerate(row_lengths):
        if length > micro_batch_tokens:
            raise ValueError(f"row {index} has {length} tokens, more than micro_batch_tokens={micro_batch_tokens}")
        if groups and (len(groups[-1]) + 1) * max(longest, length) <= micro_batch_tokens:
            groups[-1].append(index)
            longest = max(longest, length)
        else:
            groups.append([index])
            longest = length
    return groups


def shifted_targets(example: SFTExample) -> list[int]:
    """targets[t] = input_ids[t+1] if loss_mask[t+1] else IGNORE_INDEX; the last position predicts nothing."""
    ids, mask = example.input_ids, example.loss_mask
    return [ids[t + 1] if mask[t + 1] else IGNORE_INDEX for t in range(len(ids) - 1)] + [IGNORE_INDEX]


def collate_packed(examples: list[SFTExample], rows: list[list[int]], pad_id: int) -> PackedBatch:
    """Tensors for `rows` (lists of indices into `examples`), padded to the longest row."""
    row_tokens = [sum(len(examples[i].input_ids) for i in row) for row in rows]
    width = max(row_tokens)
    input_ids, targets, positions, segments, seqlens = [], [], [], [], []
    for row, used in zip(rows, row_tokens):
        ids_row, tgt_row, pos_row, seg_row = [], [], [], []
        for segment, index in enumerate(row):
            example = examples[index]
            length = len(example.input_ids)
            ids_row += example.input_ids
            tgt_row += shifted_targets(example)
            pos_row += list(range(length))
            seg_row += [segment] * length
            seqlens.append(length)
        num_pad = width - used
        if num_pad:
            ids_row += [pad_id] * num_pad
            tgt_row += [IGNORE_INDEX] * num_pad
            pos_row += list(range(num_pad))
            seg_row += [len(row)] * num_pad
            seqlens.append(num_pad)
        input_ids.append(ids_row)
        targets.append(tgt_row)
        positions.append(pos_row)
        segments.append(seg_row)
    targets_t = torch.tensor(targets, dtype=torch.long)
    num_real = sum(row_tokens)
    return PackedBatch(
        input_ids=torch.tensor(input_ids, dtype=torch.long),
        targets=targets_t,
        position_ids=torch.tensor(positions, dtype=torch.long),
        segment_ids=torch.tensor(segments, dtype=torch.long),
        cu_seqlens=torch.tensor([0, *torch.tensor(seqlens).cumsum(0).tolist()], dtype=torch.int32),
        num_real_tokens=num_real,
        num_loss_tokens=int((targets_t != IGNORE_INDEX).sum()),
        num_padding_tokens=len(rows) * width - num_real,
        max_document_length=max(seqlens),
    )


def block_causal_mask(segment_ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[B, T] segment ids -> [B, 1, T, T] additive mask: 0 where key <= query in the same segment, -inf elsewhere.

    Every query sees at least itself (padding is its own segment), so no softmax row is all -inf
    and no NaN can reach the gradients.
    """
    num_tokens = segment_ids.shape[1]
    same_segment = segment_ids[:, :, None] == segment_ids[:, None, :]  # [B, Tq, Tk]
    causal = torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=segment_ids.device).tril()
    allowed = same_segment & causal
    mask = torch.zeros(allowed.shape, dtype=dtype, device=segment_ids.device)
    return mask.masked_fill(~allowed, float("-inf"))[:, None, :, :]
