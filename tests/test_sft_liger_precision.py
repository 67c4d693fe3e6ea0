"""On CUDA the SFT loss goes through Liger's fused linear cross-entropy; under bf16 autocast it must
see the head and hidden states in fp32 with autocast off, as the CPU's chunked loss computes them
(issue 67 item 4), unless `lm_head_fp32: false` asks for the bf16 head.

A recording stub stands in for Liger (its real kernel needs Triton on a GPU; tests marked gpu compare
the two): it records the autocast state and dtypes it was called with and returns the plain fp32
cross-entropy of what it received, so the loss through PackedLMLoss can be checked against the CPU
path's on the same tiny model.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch
import torch.nn.functional as F

from passband.training.runtime import chunked_loss
from passband.training.sft.model_loss import PackedLMLoss
from tiny_chat_model import tiny_llama


@pytest.fixture
def liger_calls(monkeypatch):
    """Liger "installed" and "on CUDA": every call of its loss recorded."""
    calls: list[dict] = []

    class RecordingFusedLinearCrossEntropy:
        def __init__(self, ignore_index: int, reduction: str):
            self.ignore_index, self.reduction = ignore_index, reduction

        def __call__(self, weight, hidden, labels):
            calls.append({"autocast": torch.is_autocast_enabled(hidden.device.type), "weight": weight.dtype,
                          "hidden": hidden.dtype})
            logits = hidden @ weight.T  # under autocast, as Liger's own matmuls would be: bf16
            return F.cross_entropy(logits.float(), labels, ignore_index=self.ignore_index, reduction=self.reduction)

    module = types.ModuleType("liger_kernel.transformers")
    module.LigerFusedLinearCrossEntropyLoss = RecordingFusedLinearCrossEntropy
    monkeypatch.setitem(sys.modules, "liger_kernel", types.ModuleType("liger_kernel"))
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", module)
    monkeypatch.setattr(chunked_loss, "_liger_applies", lambda hidden: True)
    return calls


def _packed_batch():
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, 200, (1, 24), generator=generator)
    targets = torch.randint(3, 200, (1, 24), generator=generator)
    targets[0, :5] = chunked_loss.IGNORE_INDEX
    position_ids = torch.cat([torch.arange(10), torch.arange(14)])[None]
    cu_seqlens = torch.tensor([0, 10, 24], dtype=torch.int32)
    return input_ids, position_ids, targets, cu_seqlens


def test_liger_runs_with_autocast_off_and_fp32_inputs_under_bf16_autocast(liger_calls):
    model = tiny_llama(seed=1)
    loss = PackedLMLoss(model, chunk_size=7, precision="bf16_autocast")(*_packed_batch())
    assert liger_calls == [{"autocast": False, "weight": torch.float32, "hidden": torch.float32}]
    # the same number as the CPU's chunked fp32 head (Liger not applied): the devices agree
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(chunked_loss, "_liger_applies", lambda hidden: False)
        cpu_loss = PackedLMLoss(model, chunk_size=7, precision="bf16_autocast")(*_packed_batch())
    torch.testing.assert_close(loss, cpu_loss, rtol=1e-5, atol=1e-4)


def test_the_setting_keeps_liger_under_autocast(liger_calls):
    model = tiny_llama(seed=1)
    PackedLMLoss(model, chunk_size=7, precision="bf16_autocast", lm_head_fp32=False)(*_packed_batch())
    # the final norm's output stays fp32; the autocast on means Liger's chunk matmuls run in bf16
    assert liger_calls == [{"autocast": True, "weight": torch.float32, "hidden": torch.float32}]


def test_fp32_training_calls_liger_as_before(liger_calls):
    PackedLMLoss(tiny_llama(seed=1), chunk_size=7, precision="fp32")(*_packed_batch())
    assert liger_calls == [{"autocast": False, "weight": torch.float32, "hidden": torch.float32}]
