"""Muon wired into the trainers (issue 70): `optimizer: muon` on an SFT stage and on the RL algorithm.
- the configs refuse Muon with LoRA in one line; the memory model counts Muon's one buffer by hand;
- one process: an SFT stage resumed from its step-2 checkpoint (optimizer.pt with Muon's momentum) ends bit for
  bit where the uninterrupted stage does, each group at its own scheduled rate;
- 2 gloo ranks (slow): weights after 3 SFT steps and after 3 RL updates equal one process within 1e-5 (fp32
  Newton-Schulz); a 2-rank checkpoint resumes in one process, and a one-process one under 2 ranks, within 1e-5.
The optimizer itself against Muon from the paper: tests/test_muon.py; its ranks alone: tests/test_muon_ranks.py.
"""

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from test_rl_ranks import _batch
from tiny_chat_model import tiny_llama, tiny_tokenizer
from passband.training.lora.settings import LoraConfig, RLLoraConfig
from passband.training.memory_model import ModelShape, trainer_memory
from passband.training.optim.config import OptimizerConfig
from passband.training.optim.optimizer import build_optimizer, optimizer_order_names
from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.launch import RanksConfig, batch_request, write_request
from passband.training.sft.config import StageConfig
from passband.training.sft.launch import LaunchConfig, run

REPO = Path(__file__).resolve().parents[1]
MUON = OptimizerConfig(name="muon", newton_schulz_dtype="float32", adamw_lr=1e-3)
# fp32 everywhere: the rank comparisons bound summation-order rounding, which bf16 would swamp. The AdamW group
# (embedding = tied head, norms) at its own peak, so a schedule that set one rate for both groups shows.
STAGE = dict(name="foundation", max_length=96, num_steps=3, lr=3e-3, warmup_steps=2, batch_tokens=300,
             micro_batch_tokens=96, grad_clip=0.5, checkpoint_every=2, seed=5, precision="fp32", optimizer=MUON)


def _env() -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


def _torchrun(nproc: int, module: str, config, timeout_s: float = 600) -> list[dict]:
    """`module` under `nproc` gloo ranks with `config` (a yaml file beside its out/work dir); rank 0's JSON lines."""
    folder = getattr(config, "out_dir", None) or config.work_dir
    folder.mkdir(parents=True, exist_ok=True)
    config_file = folder / "config.yaml"
    config_file.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                           str(nproc), "-m", module, str(config_file)], cwd=REPO, env=_env(), capture_output=True,
                          text=True, timeout=timeout_s)
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert sorted(a) == sorted(b)
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return load_file(checkpoint / "model.safetensors")


@pytest.fixture
def sft_setup(tmp_path, monkeypatch):
    """The tiny start model and 30 chat rows; the stage's LaunchConfig writing to tmp_path/one."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    model_dir = tmp_path / "model"
    tiny_llama(seed=0, hidden=32).save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    rng = random.Random(0)
    rows = []
    for _ in range(30):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        rows.append({"prompt": f"{a}+{b}=?", "completion": f"{a}+{b}={a + b}. " * rng.randint(1, 3)})
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    stage = StageConfig(datasets={str(tmp_path / "rows.jsonl"): 1.0}, **STAGE)
    return LaunchConfig(model=model_dir, out_dir=tmp_path / "one", stage=stage)


def test_trainer_configs_refuse_muon_with_lora():
    stage = dict(name="s", datasets={"d": 1.0}, max_length=8, num_steps=1, lr=1e-3, batch_tokens=8,
                 micro_batch_tokens=8)
    with pytest.raises(ValueError, match="optimizer: muon with lora"):
        StageConfig(**stage, optimizer="muon", lora=LoraConfig())
    with pytest.raises(ValueError, match="optimizer: muon with lora"):
        RLAlgoConfig(optimizer="muon", lora=RLLoraConfig())
    assert StageConfig(**stage, lora=LoraConfig()).optimizer.name == "adamw"  # the default: today's AdamW
    assert RLAlgoConfig(optimizer="muon").optimizer.name == "muon"


def test_memory_model_counts_muons_one_buffer_by_hand():
    """A 1-layer shape, hidden 4, MLP 6, 2 heads of 2 (kv 1 head), vocab 10, tied. Muon's matrices: q [4, 4], k and
    v [2, 4], o [4, 4], gate and up [6, 4], down [4, 6] = 16 + 8 + 8 + 16 + 24 + 24 + 24 = 120 weights, one fp32
    buffer each: 480 bytes. AdamW's: the embedding 40, 2 layer norms 8 and the final norm 4 = 52 weights, two
    moments: 416 bytes. Muon 896 bytes; AdamW over all 172 weights: 1376."""
    shape = ModelShape(hidden=4, layers=1, intermediate=6, heads=2, kv_heads=1, vocab=10, head_dim=2,
                       tied_embeddings=True)
    assert shape.parameters == 172
    assert trainer_memory(shape, "fp32", 4, 4, optimizer=OptimizerConfig(name="muon")).optimizer == 896
    assert trainer_memory(shape, "fp32", 4, 4, optimizer=OptimizerConfig()).optimizer == 1376
    assert trainer_memory(shape, "fp32", 4, 4).optimizer == 1376  # no optimizer given: AdamW, as before


def test_memory_model_equals_a_real_muon_state():
    model = tiny_llama(seed=0, hidden=32)
    optimizer = build_optimizer(model, OptimizerConfig(name="muon"), lr=1e-3, weight_decay=0.0)
    ids = torch.randint(0, 200, (2, 12))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    held = sum(t.nbytes for state in optimizer.state.values() for key, t in state.items() if key != "step")
    shape = ModelShape.from_hf_config(model.config.to_dict())
    assert trainer_memory(shape, "fp32", 4, 4, optimizer=OptimizerConfig(name="muon")).optimizer == held
    assert sorted(shape.parameter_shapes().items()) == sorted((n, tuple(p.shape)) for n, p in model.named_parameters())


def test_optimizer_order_names_follow_the_groups():
    """optimizer.pt's indices run group by group: Muon's matrices, then AdamW's tensors (the one-process
    checkpoint read under ranks maps them to names by this order)."""
    model = tiny_llama(seed=0, hidden=32)
    names = optimizer_order_names(model, build_optimizer(model, MUON, lr=1e-3, weight_decay=0.0))
    assert sorted(names) == sorted(n for n, _ in model.named_parameters())
    first_adamw = names.index("model.embed_tokens.weight")
    assert all(name.endswith("proj.weight") for name in names[:first_adamw])
    assert not any(name.endswith("proj.weight") for name in names[first_adamw:])
    plain = optimizer_order_names(model, build_optimizer(model, OptimizerConfig(), lr=1e-3, weight_decay=0.0))
    assert plain == [n for n, _ in model.named_parameters()]  # AdamW: the model's own order, as before


def test_sft_stage_with_muon_resumes_bit_for_bit(sft_setup, tmp_path):
    metrics = {}
    run(sft_setup, on_metrics=lambda m, s: metrics.__setitem__(s, m), on_checkpoint=None)
    final = _weights(tmp_path / "one" / "step_000003")
    start = _weights(sft_setup.model)
    assert min(float((final[k] - start[k]).abs().max()) for k in final) > 1e-4  # every tensor trained
    state = torch.load(tmp_path / "one" / "step_000002" / "optimizer.pt", weights_only=True)
    assert [g["lr"] for g in state["param_groups"]] == [3e-3, 1e-3]  # step 2 (of warmup 2) at each group's peak
    assert sum("momentum_buffer" in s for s in state["state"].values()) == 2 * 7  # 2 layers x 7 matrices
    assert metrics[1]["lr"] == 3e-3 / 2  # the trainer's rate, half its peak in the first of 2 warmup steps
    resumed = sft_setup.model_copy(update={"out_dir": tmp_path / "resumed",
                                           "resume_from": tmp_path / "one" / "step_000002"})
    run(resumed, on_metrics=None, on_checkpoint=None)
    again = _weights(tmp_path / "resumed" / "step_000003")
    assert all(torch.equal(again[k], final[k]) for k in final)


@pytest.mark.slow  # two torchrun launches and three stages: about 2 min on the loaded 2-core box
def test_sft_with_muon_on_two_ranks_equals_one_process_and_resumes_across(sft_setup, tmp_path):
    run(sft_setup, on_metrics=None, on_checkpoint=None)
    one = _weights(tmp_path / "one" / "step_000003")
    _torchrun(2, "passband.training.sft.launch", sft_setup.model_copy(update={"out_dir": tmp_path / "two"}))
    two = _weights(tmp_path / "two" / "step_000003")
    # one Muon step moves each hidden weight by lr x 0.2 x RMS-1 (~6e-4 at lr 3e-3): a lost micro-batch or
    # momentum buffer is far above 1e-5; the ranks differ only in the gradients' summation order
    print(f"SFT, 3 Muon steps: max |2 ranks - 1 process| = {_max_diff(two, one):.3g}")
    assert _max_diff(two, one) <= 1e-5
    run(sft_setup.model_copy(update={"out_dir": tmp_path / "two-on-one", "resume_from": tmp_path / "two" / "step_000002"}),
        on_metrics=None, on_checkpoint=None)
    two_on_one = _weights(tmp_path / "two-on-one" / "step_000003")
    _torchrun(2, "passband.training.sft.launch", sft_setup.model_copy(update={
        "out_dir": tmp_path / "one-on-two", "resume_from": tmp_path / "one" / "step_000002"}))
    one_on_two = _weights(tmp_path / "one-on-two" / "step_000003")
    print(f"2-rank checkpoint resumed in 1 process: {_max_diff(two_on_one, two):.3g}; "
          f"1-process checkpoint under 2 ranks: {_max_diff(one_on_two, one):.3g}")
    assert _max_diff(two_on_one, two) <= 1e-5
    assert _max_diff(one_on_two, one) <= 1e-5


RL_ALGO = RLAlgoConfig(lr=3e-3, precision="fp32", micro_batch_size=5, grad_clip=0.5, lr_warmup_steps=3,
                       optimizer=MUON)


def _rl_start(tmp_path: Path) -> tuple[Path, list]:
    """The tiny start model saved in tmp_path/model and three rollout batches of it."""
    model_dir = tmp_path / "model"
    start = tiny_llama(seed=0, hidden=32).eval()
    start.save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    return model_dir, [_batch(start, seed) for seed in (1, 2, 3)]


def _rl_one_process(model_dir: Path, batches: list) -> tuple[dict[str, torch.Tensor], list[float]]:
    """One process's weights after an update on each batch (seeds 11, 12, 13), and each group's rate per update."""
    from passband.training.rl.trainer import open_trainer
    from passband.training.rl.update import rl_update

    one = open_trainer(model_dir, ["math"], RL_ALGO)
    rates = []
    for batch, seed in zip(batches, (11, 12, 13)):
        rl_update(one.model, one.ref_model, one.optimizer, batch, RL_ALGO, torch.Generator().manual_seed(seed))
        rates += [group["lr"] for group in one.optimizer.param_groups]
    return {k: v for k, v in one.model.state_dict().items() if k != "lm_head.weight"}, rates


@pytest.mark.slow  # two torchrun launches of the RL ranks: about 2 min on the loaded 2-core box
def test_rl_with_muon_on_two_ranks_equals_one_process_and_resumes_in_one(tmp_path, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    algo = RL_ALGO
    model_dir, batches = _rl_start(tmp_path)
    state = {"iteration": 2, "consumed": {"math": 6}, "prompt_ids": [], "best": None, "metrics": {}}
    # each update's weights published, as tests/test_rl_ranks.py does (the path that publishes nothing, the
    # NCCL broadcast's: tests/test_rl_ranks_unpublished.py)
    requests = [batch_request(batches[0], 11, 1), batch_request(batches[1], 12, 2),
                {"kind": "checkpoint", "name": "iter-000002", "state": state}, batch_request(batches[2], 13, 3),
                {"kind": "checkpoint", "name": "iter-000003", "state": state | {"iteration": 3}}, {"kind": "stop"}]
    for number, request in enumerate(requests, start=1):
        write_request(tmp_path / "two", number, request)
    replies = _torchrun(2, "passband.training.rl.launch", RanksConfig(model=model_dir, algo=algo,
                                                                      work_dir=tmp_path / "two"))
    checkpoint, two = Path(replies[3]["checkpoint"]), _weights(Path(replies[5]["checkpoint"]))

    one_final, rates = _rl_one_process(model_dir, batches)
    assert rates == pytest.approx([peak * k / 3 for k in (1, 2, 3) for peak in (3e-3, 1e-3)])  # each its own peak
    print(f"RL, 3 Muon updates: max |2 ranks - 1 process| = {_max_diff(two, one_final):.3g}")
    assert _max_diff(two, one_final) <= 1e-5

    for number, request in enumerate(requests[3:], start=1):
        write_request(tmp_path / "resumed", number, request)
    replies = _torchrun(1, "passband.training.rl.launch", RanksConfig(model=model_dir, algo=algo,
                                                                      work_dir=tmp_path / "resumed",
                                                                      resume_from=checkpoint))
    resumed = _weights(Path(replies[2]["checkpoint"]))
    print(f"2-rank RL checkpoint resumed in 1 process, one update later: {_max_diff(resumed, two):.3g}")
    assert math.isclose(replies[1]["metrics"]["lr"], 3e-3)  # the Muon group's step count came back: warmup done
    assert _max_diff(resumed, two) <= 1e-5


# 4 ranks: the shipped model's 4-rank runs (tests/test_muon_shipped_ranks.py) outlasted what this box had on
# 2026-12-07 (load average 20+); the tiny model at 4 ranks shards its 16-row k/v matrices 4 rows a rank and
# leaves the RL step's third micro-batch rank a padding pass.
@pytest.mark.slow  # a torchrun launch of 4 ranks
@pytest.mark.timeout(3600)
def test_sft_with_muon_on_four_ranks_equals_one_process(sft_setup, tmp_path):
    run(sft_setup, on_metrics=None, on_checkpoint=None)
    _torchrun(4, "passband.training.sft.launch", sft_setup.model_copy(update={"out_dir": tmp_path / "four"}),
              timeout_s=1800)
    diff = _max_diff(_weights(tmp_path / "four" / "step_000003"), _weights(tmp_path / "one" / "step_000003"))
    print(f"SFT, 3 Muon steps: max |4 ranks - 1 process| = {diff:.3g}")
    assert diff <= 1e-5


@pytest.mark.slow  # a torchrun launch of 4 RL ranks
@pytest.mark.timeout(3600)
def test_rl_with_muon_on_four_ranks_equals_one_process(tmp_path, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    model_dir, batches = _rl_start(tmp_path)
    requests = [batch_request(batch, seed, version) for version, (batch, seed) in enumerate(zip(batches, (11, 12, 13)), 1)]
    requests += [{"kind": "checkpoint", "name": "iter-000003", "state": {"iteration": 3, "consumed": {"math": 9},
                  "prompt_ids": [], "best": None, "metrics": {}}}, {"kind": "stop"}]
    for number, request in enumerate(requests, start=1):
        write_request(tmp_path / "four", number, request)
    replies = _torchrun(4, "passband.training.rl.launch", RanksConfig(model=model_dir, algo=RL_ALGO,
                                                                      work_dir=tmp_path / "four"), timeout_s=1800)
    four = _weights(Path(replies[4]["checkpoint"]))  # replies[0]: the ranks' ready line
    one, _ = _rl_one_process(model_dir, batches)
    print(f"RL, 3 Muon updates: max |4 ranks - 1 process| = {_max_diff(four, one):.3g}")
    assert _max_diff(four, one) <= 1e-5
