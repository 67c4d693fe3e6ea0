"""A causal LM plus the chunked LM-head loss, as one module (one forward = one FSDP root call).

The decoder runs to its final hidden states (`lm.base_model`), and the head is applied chunk by
chunk inside `chunked_lm_loss`, so [tokens, vocab] logits are never materialized. Wrapping both in
one nn.Module matters under FSDP2: the root's hooks unshard the embeddings/norm/head (tied) for
the whole forward, including the loss, and reduce their gradients after backward.
"""

from __future__ import annotations

from typing import Any

import torch

from passband.training.sft.chunked_loss import chunked_lm_loss


class PackedLMLoss(torch.nn.Module):
    """forward(input_ids [B,T], attention_mask [B,1,T,T], position_ids [B,T], targets [B,T]) -> summed loss."""

    def __init__(self, lm: Any, chunk_size: int):
        super().__init__()
        self.lm = lm
        self.chunk_size = chunk_size

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        targets: torch.Tensor,
    ) -> torch.Tensor:
        hidden = self.lm.base_model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).last_hidden_state  # [B, T, H]
        head_weight = self.lm.get_output_embeddings().weight  # [V, H]
        return chunked_lm_loss(
            hidden.flatten(0, 1), head_weight, targets.flatten(), chunk_size=self.chunk_size, reduction="sum"
        )
