"""A causal LM plus the chunked LM-head loss, as one module (one forward = one FSDP root call).

The decoder runs to its final hidden states (`lm.base_model`), and the head is applied chunk by
chunk inside `chunked_lm_loss`, so [tokens, vocab] logits are never materialized. Wrapping both in
one nn.Module matters under FSDP2: the root's hooks unshard the embeddings/norm/head (tied) for
the whole forward, including the loss, and reduce their gradients after backward.

A packed micro-batch [B, T] is flattened to one row [1, B*T]: its documents (and each row's
padding tail) are delimited by `cu_seqlens`, the attention kernel (training/runtime/varlen_attention.py)
keeps every document to itself, and position ids restart per document, so each token sees exactly
what it would see alone; the per-token loss does not care which row a token came from.

Under Ulysses sequence parallelism (`sequence_parallel_group`, training/runtime/ulysses.py) each SP rank runs
the decoder and the chunked head on its contiguous shard of the flattened row (padded at its end, as one more
segment with no loss, to a multiple of the degree), attention head-parallel over the whole row, and the summed
loss is added over the group (`ulysses.sum_over`): every SP rank returns the micro-batch's whole loss, and its
backward reaches each rank's own tokens once.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch.distributed import ProcessGroup

from passband.training.runtime.varlen_attention import VARLEN_SDPA
from passband.training.runtime.chunked_loss import IGNORE_INDEX, chunked_lm_loss
from passband.training.runtime.precision import autocast_for
from passband.training.runtime.ulysses import degree, sum_over, token_shard


class PackedLMLoss(torch.nn.Module):
    """forward(input_ids [B,T], position_ids [B,T], targets [B,T], cu_seqlens [S+1], max_length) -> summed loss (fp32).

    Sets `lm`'s attention implementation to `attn_implementation`, a document-isolating kernel
    (`attention.resolve_attention` picks it: VARLEN_SDPA or "flash_attention_2"). `lm_head_fp32`:
    the head and its cross-entropy in fp32 on every device (chunked_loss.py; StageConfig.lm_head_fp32).
    `sequence_parallel_group`: the Ulysses group this rank splits each micro-batch with (module docstring);
    None runs whole micro-batches.
    """

    def __init__(
        self,
        lm: Any,
        chunk_size: int,
        attn_implementation: str = VARLEN_SDPA,
        precision: Literal["fp32", "bf16_autocast"] = "fp32",
        lm_head_fp32: bool = True,
        sequence_parallel_group: ProcessGroup | None = None,
    ):
        super().__init__()
        self.lm = lm
        self.chunk_size = chunk_size
        self.precision = precision
        self.lm_head_fp32 = lm_head_fp32
        self.sequence_parallel_group = sequence_parallel_group
        lm.set_attn_implementation(attn_implementation)

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        targets: torch.Tensor,
        cu_seqlens: torch.Tensor,
        max_length: int | None = None,
    ) -> torch.Tensor:
        # max_length: the longest document; given by the loop from the host batch, since reading it
        # off cu_seqlens here waits for the device once per micro-batch.
        if max_length is None:
            max_length = int(cu_seqlens.diff().max())
        group = self.sequence_parallel_group
        input_ids, position_ids, targets = input_ids.view(1, -1), position_ids.view(1, -1), targets.view(1, -1)
        missing = -input_ids.shape[1] % degree(group)
        if missing:  # one more segment, with no loss, so the row splits evenly over the SP ranks
            input_ids, position_ids = F.pad(input_ids, (0, missing)), F.pad(position_ids, (0, missing))
            position_ids[0, -missing:] = torch.arange(missing, device=position_ids.device)
            targets = F.pad(targets, (0, missing), value=IGNORE_INDEX)
            cu_seqlens = torch.cat([cu_seqlens, cu_seqlens[-1:] + missing])
            max_length = max(max_length, missing)
        mine = token_shard(input_ids.shape[1], group)  # every token without a group
        parallel = {} if group is None else {"sequence_parallel_group": group}
        with autocast_for(self.precision, input_ids.device):
            hidden = self.lm.base_model(
                input_ids=input_ids[:, mine],
                position_ids=position_ids[:, mine],
                use_cache=False,
                # varlen kwargs, read by flash_attention_2 and by varlen_sdpa
                cu_seq_lens_q=cu_seqlens,
                cu_seq_lens_k=cu_seqlens,
                max_length_q=max_length,
                max_length_k=max_length,
                **parallel,
            ).last_hidden_state  # [1, B*T, H]; this rank's shard of them under sequence parallelism
            head_weight = self.lm.get_output_embeddings().weight  # [V, H]
            loss = chunked_lm_loss(
                hidden[0], head_weight, targets[0, mine], chunk_size=self.chunk_size, reduction="sum",
                head_fp32=self.lm_head_fp32,
            )
            return sum_over(loss, group)
