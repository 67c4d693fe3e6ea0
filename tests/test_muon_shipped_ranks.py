"""Muon on gloo ranks with the shipped model (issue 70): SmolLM2-135M (30 layers, 210 Muon matrices of 576 x
576 to 1536 x 576, the 49152 x 576 tied embedding on AdamW), 3 SFT steps and 3 RL updates under torchrun equal
one process within 1e-5 (fp32 everywhere, Newton-Schulz included, so the comparison bounds the gradients'
summation order across ranks; Muon's own ranks rule: training/optim/parallel.py). The tiny-model versions of
these checks, with the resumes across rank counts: tests/test_muon_trainers.py.

The rates are large on purpose (1e-3 on the hidden matrices): each Muon step moves every hidden weight by
lr x 0.2 RMS, 2e-4, so a micro-batch lost or doubled on a rank, or a matrix orthogonalised from a shard
instead of the whole, turns the update's direction and lands far above 1e-5.
"""

import json
import random
from pathlib import Path

import pytest
import torch

from test_muon_trainers import _max_diff, _torchrun, _weights
from test_rl_ranks import _batch
from passband.training.optim.config import OptimizerConfig
from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.launch import RanksConfig, batch_request, write_request
from passband.training.sft.config import StageConfig
from passband.training.sft.launch import LaunchConfig, run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]  # the 135M model in one process and on N ranks

MUON = OptimizerConfig(name="muon", newton_schulz_dtype="float32", adamw_lr=1e-4)
# 384 tokens of 96-token rows: 4 micro-batches, one per rank at 4 ranks, two at 2
STAGE = dict(name="foundation", max_length=96, num_steps=3, lr=1e-3, warmup_steps=2, batch_tokens=384,
             micro_batch_tokens=96, grad_clip=0.5, checkpoint_every=0, seed=5, precision="fp32", optimizer=MUON)
ALGO = RLAlgoConfig(lr=1e-3, precision="fp32", micro_batch_size=3, grad_clip=0.5, lr_warmup_steps=3, optimizer=MUON)


@pytest.fixture(scope="module")
def sft_one(smollm2_dir, tmp_path_factory):
    """The stage's LaunchConfig on the shipped model and 60 arithmetic rows, and its one-process final weights."""
    folder = tmp_path_factory.mktemp("muon-shipped-sft")
    rng = random.Random(0)
    rows = []
    for _ in range(60):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        rows.append({"prompt": f"{a}+{b}=?", "completion": f"{a}+{b}={a + b}. " * rng.randint(1, 3)})
    (folder / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = LaunchConfig(model=smollm2_dir, out_dir=folder / "one",
                          stage=StageConfig(datasets={str(folder / "rows.jsonl"): 1.0}, **STAGE))
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("WORLD_SIZE", raising=False)
        run(config, on_metrics=None, on_checkpoint=None)
    return config, _weights(folder / "one" / "step_000003")


@pytest.mark.parametrize("nproc", [4, 2])
def test_sft_with_muon_on_ranks_equals_one_process_on_the_shipped_model(sft_one, nproc):
    config, one = sft_one
    start = _weights(config.model)
    assert min(float((one[k] - start[k]).abs().max()) for k in one) > 1e-5  # every tensor trained
    ranks = config.model_copy(update={"out_dir": config.out_dir.parent / f"ranks-{nproc}"})
    _torchrun(nproc, "passband.training.sft.launch", ranks, timeout_s=1800)
    diff = _max_diff(_weights(ranks.out_dir / "step_000003"), one)
    print(f"SFT, shipped model, 3 Muon steps: max |{nproc} ranks - 1 process| = {diff:.3g}")
    assert diff <= 1e-5


@pytest.fixture(scope="module")
def rl_one(smollm2_dir):
    """Three rollout batches from the shipped model and the one-process weights after an update on each."""
    from passband.training.rl.trainer import open_trainer
    from passband.training.rl.update import rl_update

    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("WORLD_SIZE", raising=False)
        trainer = open_trainer(smollm2_dir, ["math"], ALGO)
        batches = [_batch(trainer.model, seed) for seed in (1, 2, 3)]  # the start model's log-probs, no grad
        for batch, seed in zip(batches, (11, 12, 13)):
            rl_update(trainer.model, trainer.ref_model, trainer.optimizer, batch, ALGO, torch.Generator().manual_seed(seed))
        final = {k: v.detach().clone() for k, v in trainer.model.state_dict().items() if k != "lm_head.weight"}
    return batches, final


@pytest.mark.parametrize("nproc", [4, 2])
def test_rl_with_muon_on_ranks_equals_one_process_on_the_shipped_model(smollm2_dir, rl_one, tmp_path, nproc):
    batches, one = rl_one
    # not published (the NCCL broadcast's path): the ranks reshard after each update themselves
    requests = [batch_request(batch, seed, None) for batch, seed in zip(batches, (11, 12, 13))]
    requests += [{"kind": "checkpoint", "name": "iter-000003",
                  "state": {"iteration": 3, "consumed": {"math": 9}, "prompt_ids": [], "best": None, "metrics": {}}},
                 {"kind": "stop"}]
    for number, request in enumerate(requests, start=1):
        write_request(tmp_path, number, request)
    replies = _torchrun(nproc, "passband.training.rl.launch", RanksConfig(model=smollm2_dir, algo=ALGO, work_dir=tmp_path),
                        timeout_s=1800)
    diff = _max_diff(_weights(Path(replies[4]["checkpoint"])), one)  # replies[0]: the ranks' ready line
    print(f"RL, shipped model, 3 Muon updates: max |{nproc} ranks - 1 process| = {diff:.3g}")
    assert diff <= 1e-5
