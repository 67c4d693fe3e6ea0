"""Packed documents isolated without a [T, T] mask: varlen attention gives the dense mask's loss and gradients."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from passband.training.runtime.varlen_attention import VARLEN_SDPA, resolve_attention
from passband.training.runtime.chunked_loss import chunked_lm_loss
from passband.training.sft.model_loss import PackedLMLoss
from passband.training.sft.packing import SFTExample, block_causal_mask, collate_packed, pack_first_fit_decreasing

VOCAB = 300


def _model(seed: int = 0) -> LlamaForCausalLM:
    # Grouped-query attention (4 heads over 2 KV heads) as in SmolLM2 (9 over 3).
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def _batch():
    """Two rows of at most 256 tokens, 2-3 documents each, one row padded: 484 real tokens."""
    gen = torch.Generator().manual_seed(0)
    examples = [SFTExample(torch.randint(0, VOCAB, (n,), generator=gen).tolist(), [0] * (n // 3) + [1] * (n - n // 3))
                for n in (150, 100, 90, 80, 64)]
    rows = pack_first_fit_decreasing([len(e.input_ids) for e in examples], max_length=256)
    assert rows == [[0, 1], [2, 3, 4]]  # 250 and 234 tokens: the second row has 16 padding tokens
    return collate_packed(examples, rows, pad_id=0)


def _dense_loss(model, batch):
    """The reference: HF's sdpa attention with the materialized [B, 1, T, T] block-causal mask."""
    model.set_attn_implementation("sdpa")
    hidden = model.base_model(input_ids=batch.input_ids, attention_mask=block_causal_mask(batch.segment_ids, torch.float32),
                              position_ids=batch.position_ids, use_cache=False).last_hidden_state  # [B, T, H]
    return chunked_lm_loss(hidden.flatten(0, 1), model.lm_head.weight, batch.targets.flatten(), chunk_size=64)


def test_varlen_sdpa_matches_dense_mask():
    batch = _batch()
    dense_model, varlen_model = _model(), _model()
    dense = _dense_loss(dense_model, batch)
    dense.backward()
    varlen = PackedLMLoss(varlen_model, chunk_size=64, attn_implementation=VARLEN_SDPA)(
        batch.input_ids, batch.position_ids, batch.targets, batch.cu_seqlens)
    varlen.backward()
    # Both are fp32 and differ only in summation order (SDPA's blocked online softmax per document
    # vs. softmax over a masked full row), ~1e-7 relative per op: a summed loss of ~1800 agrees to
    # ~1e-6 relative and gradients to ~1e-5 of their scale; a cross-document leak would move the
    # loss by whole percents (checked below).
    assert varlen.item() == pytest.approx(dense.item(), rel=1e-5)
    for (name, p_dense), p_varlen in zip(dense_model.named_parameters(), varlen_model.parameters()):
        scale = p_dense.grad.abs().max().item()
        torch.testing.assert_close(p_varlen.grad, p_dense.grad, atol=1e-5 * scale, rtol=1e-4, msg=name)
    # The check has teeth: one plain causal row (documents see each other) moves the loss by
    # 3.5e-4 relative (a random-init model attends almost uniformly, so a leak moves it little),
    # 35 times the tolerance above.
    leaky = PackedLMLoss(_model(), chunk_size=64, attn_implementation=VARLEN_SDPA)
    row_bounds = torch.tensor([0, batch.input_ids.shape[1], batch.input_ids.numel()], dtype=torch.int32)
    with torch.no_grad():
        leaked = leaky(batch.input_ids, batch.position_ids, batch.targets, row_bounds).item()
    assert abs(leaked - dense.item()) > 1e-4 * dense.item()


def test_bf16_autocast_keeps_the_loss_in_fp32():
    batch = _batch()
    fp32 = PackedLMLoss(_model(), chunk_size=64, precision="fp32")
    bf16 = PackedLMLoss(_model(), chunk_size=64, precision="bf16_autocast")
    args = (batch.input_ids, batch.position_ids, batch.targets, batch.cu_seqlens)
    loss_fp32, loss_bf16 = fp32(*args), bf16(*args)
    assert loss_bf16.dtype == torch.float32
    # bf16 matmuls (8-bit mantissa) in the decoder only: the mean token loss (~ln 300 = 5.7) moves
    # by well under 1%.
    assert loss_bf16.item() == pytest.approx(loss_fp32.item(), rel=1e-2)
    # The head and log-softmax ignore autocast: same hidden states in, bit-identical loss out.
    hidden, weight, targets = torch.randn(100, 64), torch.randn(VOCAB, 64), torch.randint(0, VOCAB, (100,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under_autocast = chunked_lm_loss(hidden, weight, targets, chunk_size=32)
    assert torch.equal(under_autocast, chunked_lm_loss(hidden, weight, targets, chunk_size=32))


def test_varlen_sdpa_refuses_unpacked_calls():
    model = _model()
    model.set_attn_implementation(VARLEN_SDPA)
    with pytest.raises(ValueError, match="packed training only"):
        model(input_ids=torch.tensor([[1, 2, 3]]))


def test_resolve_attention_on_cpu():
    assert resolve_attention("auto", torch.device("cpu")) == VARLEN_SDPA
    assert resolve_attention("varlen_sdpa", torch.device("cpu")) == VARLEN_SDPA
    with pytest.raises(ValueError, match="needs a CUDA device"):
        resolve_attention("flash_attention_2", torch.device("cpu"))
