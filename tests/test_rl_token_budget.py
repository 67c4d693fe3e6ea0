"""Token-budget micro-batches (algo.micro_batch_tokens, issue 68 item 2): rows packed longest first up to a budget of
decoder tokens, dealt so that every trainer rank runs the same number of micro-batches with about the same tokens.
The loss normalisation is the batch's whatever the grouping: the budget gives micro_batch_size's weights in one
process, and 2 gloo ranks with the budget give one process's weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from test_rl_packed_rows import VOCAB, _tiny_model, _two_updates, long_tailed_batch
from passband.training.rl.batches.micro_batches import micro_batch_cost, token_budget_micro_batches
from passband.training.rl.config import RLAlgoConfig
from passband.training.runtime.distributed import rank_micro_batches

LENGTHS = [10, 50, 20, 30, 5, 40]


def test_rows_go_longest_first_into_the_micro_batch_they_add_least_to():
    # packed, budget 60: the rows' 155 tokens need 3 micro-batches. Longest first, each into the lightest one it
    # fits in: 50 -> A; 40 -> B; 30 -> C; 20 -> C (50; A would pass 60, B is heavier); 10 -> B (50); 5 -> A (55, the
    # first of three at 50). Most tokens first.
    assert token_budget_micro_batches(list(range(6)), LENGTHS, 60, 1, packed=True) == [[1, 4], [5, 0], [3, 2]]
    # padded to multiples of 16 (rows x the longest, rounded up): 208 tokens alone -> 4 micro-batches; a row joins a
    # started one where it fits, else opens one: 50 -> A (64); 40 -> B (48, A would be 128); 30 -> C (32);
    # 20 -> C (2 x 32); 10 -> D (16: 3 x 32 in C); 5 -> D (2 x 16). Most tokens first, ties in order.
    assert token_budget_micro_batches(list(range(6)), LENGTHS, 64, 1, packed=False, pad_to_multiple=16) == [
        [1], [3, 2], [5], [0, 4]]
    # a row over the budget alone (2 micro-batches: 1 for it, 15 tokens over 30); only the rows asked for
    assert token_budget_micro_batches([0, 1, 4], LENGTHS, 30, 1, packed=True) == [[1], [0, 4]]


def test_two_ranks_get_as_many_micro_batches_and_about_the_same_tokens():
    # 3 micro-batches rounded up to 4 for 2 ranks: 50 -> A; 40 -> B; 30 -> C; 20 -> D; 10 -> D (30, the lightest);
    # 5 -> C (35). Then, most tokens first, rounds of 2, each to the rank with fewer tokens: A (50) -> rank 0,
    # B (40) -> rank 1; C (35) -> rank 1 (40 < 50), D (30) -> rank 0. Laid out for the round-robin: r, r + 2.
    chunks = token_budget_micro_batches(list(range(6)), LENGTHS, 60, 2, packed=True)
    assert chunks == [[1], [5], [2, 0], [3, 4]]
    owned = [[chunks[i] for i, counts in rank_micro_batches(len(chunks), 2, r) if counts] for r in (0, 1)]
    assert owned == [[[1], [2, 0]], [[5], [3, 4]]]
    assert [sum(LENGTHS[i] for chunk in own for i in chunk) for own in owned] == [80, 75]


@pytest.mark.parametrize("num_ranks", [1, 2, 3, 4])
@pytest.mark.parametrize("packed", [True, False])
def test_every_row_once_within_the_budget_and_the_ranks_level(num_ranks, packed):
    gen = torch.Generator().manual_seed(0)
    lengths = [min(1024, max(1, round(float(torch.randn(1, generator=gen).mul(1.0).add(4.16).exp()))))
               for _ in range(64)]  # log-normal, median e^4.16 ~ 64, a tail towards 1024
    lengths[::8] = [1024] * 8
    budget = 2048
    chunks = token_budget_micro_batches(list(range(64)), lengths, budget, num_ranks, packed, 16)
    assert sorted(row for chunk in chunks for row in chunk) == list(range(64))
    assert all(micro_batch_cost([lengths[i] for i in chunk], packed, 16) <= budget for chunk in chunks)
    assert len(chunks) % num_ranks == 0
    loads = [sum(micro_batch_cost([lengths[i] for i in chunks[index]], packed, 16)
                 for index, counts in rank_micro_batches(len(chunks), num_ranks, r) if counts) for r in range(num_ranks)]
    assert max(loads) <= 1.2 * min(loads), loads


def test_a_budget_gives_the_weights_of_rows_per_micro_batch():
    # One process: the grouping changes only the order of the gradient's sums (fp32, 2 updates, KL as a loss,
    # token-MIS); a row dropped, counted twice or normalised by its micro-batch instead of the batch moves the
    # weights by the size of a gradient (lr 0.5, plain SGD), far above 1e-5.
    model, ref = _tiny_model(), _tiny_model(seed=5)
    batch = long_tailed_batch(model, VOCAB, median=12.0, max_tokens=96)
    settings = {"correction": "token_mis", "kl_coef": 0.1, "kl_placement": "loss", "kl_estimator": "k2"}
    before = [p.detach().clone() for p in model.parameters()]
    by_rows = _two_updates(model, ref, batch, 0.5, **settings)
    for packed in (False, True):
        by_tokens = _two_updates(model, ref, batch, 0.5, micro_batch_tokens=128, pack_rows=packed, **settings)
        for a, b in zip(by_rows, by_tokens):
            assert max(float((w - w0).abs().max()) for w, w0 in zip(a, before)) > 1e-3
            assert max(float((x - y).abs().max()) for x, y in zip(a, b)) <= 1e-5


def test_the_memory_model_sizes_rl_by_the_budget():
    # rl/gpu: 8 rows x max_model_len 4096 per micro-batch; a budget of 16384 tokens holds half the activations,
    # and a budget under the longest row is sized by that row (a row is never split)
    from passband.cli.main import load_flow
    from passband.flows.config import resolve_config
    from passband.flows.memory_check import Target, estimates

    def rl_gpu(*overrides: str):
        (estimate,) = estimates(resolve_config(load_flow("rl")[1], "rl", "gpu", (), list(overrides)),
                                target=Target("cuda", 80 * 2**30))
        return estimate

    by_rows, by_tokens = rl_gpu(), rl_gpu("algo.micro_batch_tokens=16384")
    assert by_tokens.trainer.activations * 2 == by_rows.trainer.activations
    assert "16384 tokens per micro-batch" in by_tokens.assumptions and "algo.micro_batch_tokens" in by_tokens.remedies[0]
    assert rl_gpu("algo.micro_batch_tokens=1000").trainer.activations * 8 == by_rows.trainer.activations


@pytest.mark.slow
def test_two_ranks_with_a_token_budget_match_one_process(tmp_path, monkeypatch):
    """2 gloo ranks (FSDP2 on CPU) against the in-process trainer, packed rows, a budget that makes an odd number
    of micro-batches in one process (so the ranks' split differs from it), 2 updates of AdamW."""
    from test_rl_ranks import _max_diff, _torchrun
    from tiny_chat_model import tiny_llama, tiny_tokenizer
    from passband.training.rl.launch import RanksConfig, batch_request, write_request
    from passband.training.rl.trainer import open_trainer
    from passband.training.rl.update import rl_update

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    algo = RLAlgoConfig(lr=3e-3, precision="fp32", grad_clip=0.5, micro_batch_tokens=128, pack_rows=True)
    model_dir = tmp_path / "model"
    start = tiny_llama(seed=0, hidden=32).eval()
    start.save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    batch = long_tailed_batch(start, 256, median=12.0, max_tokens=96)
    lengths = [len(p) + len(r) for p, r in zip(batch.prompt_ids, batch.response_ids)]
    valid = [i for i in range(batch.num_rows) if batch.valid[i]]
    assert len(token_budget_micro_batches(valid, lengths, 128, 1, True, 16)) % 2 == 1

    work_dir = tmp_path / "ranks"
    state = {"iteration": 2, "consumed": {"math": 4}, "prompt_ids": [], "best": None, "metrics": {}}
    for number, request in enumerate([batch_request(batch, 11, 1), batch_request(batch, 12, 2),
                                      {"kind": "checkpoint", "name": "iter-000002", "state": state},
                                      {"kind": "stop"}], start=1):
        write_request(work_dir, number, request)
    replies = _torchrun(RanksConfig(model=model_dir, algo=algo, work_dir=work_dir))
    two = load_file(Path(replies[3]["checkpoint"]) / "model.safetensors")

    one = open_trainer(model_dir, ["math"], algo)
    for seed in (11, 12):
        rl_update(one.model, one.ref_model, one.optimizer, batch, algo, torch.Generator().manual_seed(seed))
    one_final = {k: v for k, v in one.model.state_dict().items() if k != "lm_head.weight"}
    moved = max(float((v - start.state_dict()[k]).abs().max()) for k, v in one_final.items())
    diff = _max_diff(two, one_final)
    print(f"token budget, 2 ranks vs 1 process after 2 updates: max diff {diff:.3g} (weights moved {moved:.3g})")
    assert moved > 1e-3 and diff <= 1e-5
