"""FSDP2 pieces that run in one process: the no-op wrapper, the per-rank micro-batch split, and
that the ranks' gradients add up to the one-process gradient of the whole step."""

import pytest
import torch

from test_sft_train_step import _examples
from tiny_chat_model import PAD, tiny_llama
from passband.training.runtime.distributed import (
    optimizer_state_by_index,
    optimizer_state_by_name,
    parameter_names,
    rank_micro_batches,
    shard_for_training,
    world_size,
)
from passband.training.sft.loop import train_step
from passband.training.sft.model_loss import PackedLMLoss


def test_single_process_is_a_no_op(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert world_size() == 1
    module = PackedLMLoss(tiny_llama(), chunk_size=8)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    assert shard_for_training(module, torch.device("cpu")) is module
    assert not torch.distributed.is_initialized()
    assert all(type(p) is torch.nn.Parameter for p in module.parameters())  # not DTensor shards
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items())


def test_rank_micro_batches_by_hand():
    assert rank_micro_batches(5, 1, 0) == [(0, True), (1, True), (2, True), (3, True), (4, True)]
    # 5 over 2 ranks: 3 passes each; rank 1 has 1 and 3, then a zero-weight copy of the last (4).
    assert rank_micro_batches(5, 2, 0) == [(0, True), (2, True), (4, True)]
    assert rank_micro_batches(5, 2, 1) == [(1, True), (3, True), (4, False)]
    # Fewer micro-batches than ranks: rank 2 runs only padding.
    assert rank_micro_batches(2, 3, 1) == [(1, True)]
    assert rank_micro_batches(2, 3, 2) == [(1, False)]
    for num, ranks in [(1, 4), (7, 3), (8, 4), (9, 8)]:
        shares = [rank_micro_batches(num, ranks, r) for r in range(ranks)]
        assert len({len(s) for s in shares}) == 1  # the same number of passes on every rank
        assert sorted(i for s in shares for i, counts in s if counts) == list(range(num))  # each once


def test_optimizer_state_names_round_trip():
    model = tiny_llama(hidden=32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()
    state, names = optimizer.state_dict(), parameter_names(model)
    assert "lm_head.weight" not in names  # tied to the embeddings: one parameter, one name
    by_name = optimizer_state_by_name(state, names)
    assert by_name["param_groups"][0]["params"] == names
    assert by_name["state"]["model.norm.weight"] is state["state"][names.index("model.norm.weight")]
    assert optimizer_state_by_index(by_name, names) == state


@pytest.fixture
def one_rank_group():
    """A gloo group of one process, so train_step's all_reduce of the metrics runs (as identity)."""
    torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0, world_size=1)
    yield
    torch.distributed.destroy_process_group()


def test_rank_gradients_add_up_to_the_step_gradient(one_rank_group):
    examples = _examples()  # rows of 20, 21, 12 tokens at max_length 24 -> 3 micro-batches of 24
    args = dict(max_length=24, micro_batch_tokens=24, pad_id=PAD, device=torch.device("cpu"))
    whole = tiny_llama(seed=4)
    whole_metrics = train_step(PackedLMLoss(whole, chunk_size=7), examples, **args)
    summed = {name: torch.zeros_like(p) for name, p in whole.named_parameters()}
    losses = []
    for this_rank in (0, 1):  # rank 0 runs micro-batches 0 and 2; rank 1 runs 1 and a zero-weight 2
        model = tiny_llama(seed=4)
        metrics = train_step(PackedLMLoss(model, chunk_size=7), examples, **args, num_ranks=2, this_rank=this_rank)
        assert metrics["num_loss_tokens"] == 30  # the whole step's count divides every rank's loss
        losses.append(metrics["loss"])  # this rank's share (the one-rank all_reduce adds nothing)
        for name, param in model.named_parameters():
            summed[name] += param.grad
    assert sum(losses) == pytest.approx(whole_metrics["loss"], rel=1e-6)
    for name, param in whole.named_parameters():
        torch.testing.assert_close(summed[name], param.grad, rtol=1e-5, atol=1e-7)
