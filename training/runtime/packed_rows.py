"""Rows of a micro-batch packed into one sequence: no padding between them, each row kept to itself.

RL's packed micro-batches (RLAlgoConfig.pack_rows; training/logprobs.py: packed_response_logprobs). A padded
micro-batch [B, L] runs B * L tokens through the decoder, L its longest row; with a long tail (most answers short,
a few at the limit) most of them are padding. Packed, the B rows are concatenated into one row of N = sum of
their lengths (rounded up to `pad_to_multiple` by one padding segment at the end), position ids restart at 0 at
each row (RoPE sees each row as if alone, as the padded forward's 0..len-1 do), and `cu_seqlens` delimits the
rows for the varlen attention kernel (training/runtime/varlen_attention.py), which keeps every row's attention
inside it. Every token therefore sees exactly what it sees in the padded forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PackedRows:
    """One packed sequence on the host: move the tensors once."""

    input_ids: torch.Tensor  # [1, N] int64
    position_ids: torch.Tensor  # [1, N] int64, 0.. per row (and for the padding tail)
    cu_seqlens: torch.Tensor  # [num_segments + 1] int32 boundaries over N, the padding tail a segment of its own
    max_length: int  # the longest segment (flash-attn's max_seqlen), known here without reading a device
    row_starts: list[int]  # where each row begins in the N tokens


def pack_sequences(sequences: list[list[int]], pad_to_multiple: int = 1, pad_id: int = 0) -> PackedRows:
    """`sequences` (token ids, none empty) concatenated into one [1, N] row, N rounded up to `pad_to_multiple`."""
    if any(not sequence for sequence in sequences):
        raise ValueError("pack_sequences got an empty sequence: every row needs a token")
    lengths = [len(sequence) for sequence in sequences]
    total = sum(lengths)
    num_pad = -(-total // pad_to_multiple) * pad_to_multiple - total
    segments = lengths + ([num_pad] if num_pad else [])
    ids = [token for sequence in sequences for token in sequence] + [pad_id] * num_pad
    positions = [p for length in segments for p in range(length)]
    bounds = [0]
    for length in segments:
        bounds.append(bounds[-1] + length)
    return PackedRows(input_ids=torch.tensor([ids], dtype=torch.long),
                      position_ids=torch.tensor([positions], dtype=torch.long),
                      cu_seqlens=torch.tensor(bounds, dtype=torch.int32), max_length=max(segments),
                      row_starts=bounds[: len(sequences)])


def packing_refusal(model: torch.nn.Module) -> str | None:
    """Why packed rows would not reproduce `model`'s padded forward (None: they do). The varlen kernels are
    reached through transformers' attention interface with the `cu_seq_lens` forward kwargs, which only a
    model flagged as an attention backend passes down to its attention layers (a model with its own code
    may attend over the whole pack instead); and they attend causally within each row, with no sliding window
    and no logit soft-capping."""
    name, config = type(model).__name__, model.config
    if not model.is_backend_compatible():
        return f"{name}'s attention does not take transformers' attention-interface kwargs (cu_seq_lens)"
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return f"{name} attends within a sliding window of {config.sliding_window} tokens"
    if getattr(config, "attn_logit_softcapping", None):
        return f"{name} soft-caps its attention logits"
    return None
