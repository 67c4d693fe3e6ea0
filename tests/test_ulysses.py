"""Ulysses sequence parallelism (training/runtime/ulysses.py, issue 69 item 2) against one process, fp32, on gloo ranks.

The same model, data and seeds run twice: in this process (no process group: whole sequences, the code as it was
before sequence parallelism) and under `torchrun` on the mesh shard x sequence_parallel (SP = 2, and SP = 2 x
shard = 2 on 4 ranks), through the trainers' own code: the SFT loop's set-up and optimizer step
(training/sft/loop.py: the Ulysses group from the trainer mesh, micro-batches dealt over the data-parallel ranks)
and `rl_update` on the sharded policy and reference (training/rl/ranks.py), packed rows. Compared: SFT's loss and
grad norm at each of 3 steps, the RL update's loss, grad norm, entropy and mismatch metrics at each of 2 updates,
and the weights at the end, within 1e-5. Every pack splits at its middle (SP = 2) inside a document, so the
attention of the documents that cross the shard edge needs the other rank's tokens (`_edge_crossings` checks the
data does that). The check fails when the all-to-all before attention leaves every chunk on its own rank.

This file is also the ranks' entry point: `torchrun ... tests/test_ulysses.py SPEC OUT` runs the spec's jobs.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file

from passband.training.runtime.ulysses import seq_to_heads as SEQ_TO_HEADS

REPO = Path(__file__).resolve().parents[1]
TOLERANCE = 1e-5
# 3 query heads and 1 KV head: at SP = 2 the KV heads are repeated to the queries' and a zero head is added
# (ulysses.head_parallel_attention), as for SmolLM2-135M's 9 and 3; 4 and 2 travel as they are.
TINY = {"uneven": {"num_attention_heads": 3, "num_key_value_heads": 1, "hidden_size": 48},
        "even": {"num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64}}
SFT_KEYS = ("loss", "grad_norm", "num_loss_tokens", "padding_fraction")
RL_KEYS = ("loss", "grad_norm", "vllm_kl", "vllm_kl_all", "entropy", "trainer_ppl", "advantages_std")
ALGOS = {
    "grpo_token_mis_kl_loss": {"level": "token", "correction": "token_mis", "kl_coef": 0.1, "kl_placement": "loss",
                               "kl_estimator": "k2"},
    "gspo_seq_mis_kl_loss": {"level": "sequence", "correction": "seq_mis", "kl_coef": 0.1, "kl_placement": "loss",
                             "kl_estimator": "k2"},
    "grpo_seq_mis_kl_reward": {"level": "token", "correction": "seq_mis", "kl_coef": 0.1, "kl_placement": "reward"},
    # two inner steps: pi_old from a scoring pass of its own, then a plain second step
    "gspo_token_mis_kl_loss_two_steps": {"level": "sequence", "correction": "token_mis", "kl_coef": 0.1,
                                         "kl_placement": "loss", "kl_estimator": "k2", "num_inner_steps": 2},
}


# ---- the jobs, run in this process and on the ranks alike -------------------------------------------------------

def _model(spec: dict, seed: int = 0) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    if "dir" in spec:
        from passband.training.model_source import load_causal_lm

        return load_causal_lm(Path(spec["dir"]))
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=128, intermediate_size=96, num_hidden_layers=2, max_position_embeddings=1024,
                         tie_word_embeddings=True, **TINY[spec["tiny"]])
    return LlamaForCausalLM(config)


def _examples(job: dict) -> list:
    from passband.training.sft.packing import SFTExample

    gen = torch.Generator().manual_seed(job["seed"])
    examples = []
    for length in job["lengths"]:
        ids = torch.randint(0, job["vocab"], (length,), generator=gen).tolist()
        prompt = length // 3
        examples.append(SFTExample(input_ids=ids, loss_mask=[0] * prompt + [1] * (length - prompt)))
    return examples


def _stage(job: dict):
    from passband.training.sft.config import StageConfig

    return StageConfig(name=job["name"], datasets={"rows.jsonl": 1.0}, max_length=job["max_length"], num_steps=3,
                       lr=job["lr"], batch_tokens=job["batch_tokens"], micro_batch_tokens=job["micro_batch_tokens"],
                       grad_clip=1.0, precision="fp32", device="cpu", seed=3)


def _full_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    if not torch.distributed.is_initialized():
        return {name: t.detach().clone() for name, t in model.state_dict().items()}
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def _save(out: Path, name: str, metrics: list[dict], weights: dict[str, torch.Tensor]) -> None:
    from passband.training.runtime.distributed import rank

    if rank() == 0:
        (out / f"{name}.json").write_text(json.dumps(metrics))
        save_file({k: v.contiguous() for k, v in weights.items()}, str(out / f"{name}.safetensors"))


def _run_sft(spec: dict, job: dict, out: Path) -> None:
    from passband.training.sft.loop import _optimizer_step, _set_up

    model = _model(spec["model"])
    examples, cfg = _examples(job), _stage(job)
    stage = _set_up(model, SimpleNamespace(pad_token_id=0, eos_token_id=0), examples, cfg, out / job["name"], None,
                    None)
    metrics = [_optimizer_step(model, examples, stage, cfg) for _ in range(cfg.num_steps)]
    _save(out, job["name"], metrics, _full_weights(model))


def _run_rl(spec: dict, job: dict, out: Path) -> None:
    from passband.training.rl.batches.batching import RolloutBatch
    from passband.training.rl.config import RLAlgoConfig
    from passband.training.rl.ranks import shard_policy
    from passband.training.rl.update import rl_update
    from passband.training.runtime.distributed import reshard_units

    device = torch.device("cpu")
    lm = _model(spec["model"]).eval()
    policy = shard_policy(lm, device, "fp32")
    algo = RLAlgoConfig(**{"precision": "fp32", "micro_batch_size": 4, "grad_clip": None, "pack_rows": True,
                           **job["algo"]})
    reference = shard_policy(_model(spec["model"], seed=5).eval(), device, "fp32") if algo.kl_coef > 0 else None
    optimizer = torch.optim.SGD(lm.parameters(), lr=job["lr"])
    batch = RolloutBatch(**spec["batch"])
    metrics = []
    for _ in range(2):
        metrics.append(rl_update(policy, reference, optimizer, batch, algo, torch.Generator().manual_seed(0)))
        reshard_units(policy)  # as the ranks' launch does after each update (training/rl/launch.py)
    _save(out, job["name"], metrics, _full_weights(lm))


def run_jobs(spec: dict, out: Path) -> None:
    """Every job of `spec` into `out`: one process, or this rank of torchrun's on the spec's mesh."""
    from passband.training.runtime.distributed import close_process_group, open_process_group, world_size
    from passband.training.runtime.mesh import MeshShape

    from passband.training.runtime import ulysses

    if world_size() > 1:
        open_process_group(120.0, MeshShape(**spec["mesh"]))
    out.mkdir(parents=True, exist_ok=True)
    for job in spec["jobs"]:
        # a job with skip_all_to_all runs with the all-to-all before attention made the identity: every rank keeps
        # its own chunks where the other ranks' would arrive (shapes unchanged); one process has no all-to-all
        ulysses.seq_to_heads = _identity_exchange if job.get("skip_all_to_all") else SEQ_TO_HEADS
        (_run_sft if job["kind"] == "sft" else _run_rl)(spec, job, out)
    ulysses.seq_to_heads = SEQ_TO_HEADS
    close_process_group()


def _identity_exchange(x: torch.Tensor, group) -> torch.Tensor:
    """`ulysses.seq_to_heads`'s send and receive layout with no exchange between them."""
    parts = torch.distributed.get_world_size(group)
    b, h, n, d = x.shape
    chunks = x.reshape(b, parts, h // parts, n, d).transpose(0, 1)
    return chunks.permute(1, 2, 0, 3, 4).reshape(b, h // parts, parts * n, d)


# ---- the tests ---------------------------------------------------------------------------------------------------

def _rl_batch(model: torch.nn.Module, vocab: int, seed: int = 1) -> dict:
    """2 prompts x 8 responses of log-normal lengths (one at 48 tokens per group); engine log-probs = the model's
    own + noise; rewards 0/1 in every group; row 1 invalid. Built once, here: every process reads the same batch."""
    from passband.training.logprobs import response_logprobs

    gen = torch.Generator().manual_seed(seed)
    prompts, responses = [], []
    for _ in range(2):
        prompt = torch.randint(0, vocab, (int(torch.randint(6, 16, (1,), generator=gen)),), generator=gen).tolist()
        for g in range(8):
            length = 48 if g == 0 else min(48, max(1, round(math.exp(math.log(10) + float(torch.randn(1, generator=gen))))))
            prompts.append(prompt)
            responses.append(torch.randint(0, vocab, (length,), generator=gen).tolist())
    with torch.no_grad():
        engine = [response_logprobs(model, [p], [r]).logp[0].tolist() for p, r in zip(prompts, responses)]
    engine = [[v + 0.05 * float(torch.randn(1, generator=gen)) for v in row] for row in engine]
    return {"prompt_ids": prompts, "response_ids": responses, "engine_logp": engine,
            "rewards": [float(i % 3 == 0) for i in range(16)], "valid": [i != 1 for i in range(16)],
            "tasks": ["math"] * 16, "group_size": 8}


def _sft_job(name: str, vocab: int, packed: bool, lr: float) -> dict:
    gen = torch.Generator().manual_seed(11)
    if packed:  # several documents per row, rows of 64, three rows a micro-batch (the edge inside the middle row)
        lengths = torch.randint(7, 30, (30,), generator=gen).tolist()
        shape = {"max_length": 64, "micro_batch_tokens": 192, "batch_tokens": 300}
    else:  # one document per row (no two fit one), one row a micro-batch: the edge halves the document
        lengths = torch.randint(21, 40, (16,), generator=gen).tolist()
        shape = {"max_length": 40, "micro_batch_tokens": 40, "batch_tokens": 150}
    return {"kind": "sft", "name": name, "lengths": lengths, "vocab": vocab, "seed": 2, "lr": lr, **shape}


def _edge_crossings(job: dict, degree: int) -> int:
    """Documents that cross a shard edge in the micro-batches of the job's 3 steps (the loop's own packing)."""
    from passband.training.sft.packing import collate_packed, group_micro_batches, pack_first_fit_decreasing
    from passband.training.sft.sampler import StepSampler

    examples, cfg = _examples(job), _stage(job)
    sampler = StepSampler([len(e.input_ids) for e in examples], cfg.batch_tokens, cfg.seed)
    crossings = 0
    for _ in range(cfg.num_steps):
        step = [examples[i] for i in sampler.next_step()]
        lengths = [len(e.input_ids) for e in step]
        rows = pack_first_fit_decreasing(lengths, cfg.max_length)
        for group in group_micro_batches([sum(lengths[i] for i in row) for row in rows], cfg.micro_batch_tokens):
            batch = collate_packed(step, [rows[g] for g in group], 0)
            total = -(-batch.input_ids.numel() // degree) * degree
            edges = [total * k // degree for k in range(1, degree)]
            bounds = batch.cu_seqlens.tolist()
            crossings += sum(start < edge < stop for start, stop in zip(bounds, bounds[1:]) for edge in edges)
    return crossings


def _torchrun(spec: dict, out: Path, nproc: int, timeout: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    spec_file = out / "spec.json"
    spec_file.write_text(json.dumps(spec))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                           str(nproc), str(Path(__file__).resolve()), str(spec_file), str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-4000:]


def _differ(a: float, b: float) -> float:
    return abs(a - b) / max(1.0, abs(a))


def assert_matches_one_process(one: Path, ranks: Path, jobs: list[dict]) -> None:
    """Per step/update metrics and the final weights of every job: ranks against one process, within 1e-5."""
    for job in jobs:
        name, keys = job["name"], SFT_KEYS if job["kind"] == "sft" else RL_KEYS
        one_metrics = json.loads((one / f"{name}.json").read_text())
        rank_metrics = json.loads((ranks / f"{name}.json").read_text())
        worst = max(_differ(a[key], b[key]) for a, b in zip(one_metrics, rank_metrics) for key in keys)
        one_weights, rank_weights = load_file(one / f"{name}.safetensors"), load_file(ranks / f"{name}.safetensors")
        assert sorted(one_weights) == sorted(rank_weights)
        diff = max(float((one_weights[k] - rank_weights[k]).abs().max()) for k in one_weights)
        print(f"{name}: metrics differ by at most {worst:.2e} (relative), weights by {diff:.2e}")
        assert worst <= TOLERANCE, f"{name}: metrics differ from one process by {worst:.3e}: {one_metrics} vs {rank_metrics}"
        assert diff <= TOLERANCE, f"{name}: weights differ from one process by {diff:.3e}"


def _assert_weights_moved(spec: dict, out: Path, jobs: list[dict]) -> None:
    """The comparison means something: every job moved some weight by far more than the tolerance."""
    before = _model(spec["model"]).state_dict()
    for job in jobs:
        after = load_file(out / f"{job['name']}.safetensors")
        moved = max(float((after[k] - before[k]).abs().max()) for k in after)
        assert moved > 100 * TOLERANCE, f"{job['name']} moved the weights by {moved:.2e} only"


def _spec(model: dict, jobs: list[dict], mesh: dict, batch: dict | None = None) -> dict:
    return {"model": model, "jobs": jobs, "mesh": mesh, "batch": batch}


def _one_and_ranks(tmp_path: Path, spec: dict, nproc: int, timeout: int) -> tuple[Path, Path]:
    one = tmp_path / "one"
    run_jobs(spec, one)  # no process group: whole sequences
    _torchrun(spec, tmp_path / "ranks", nproc, timeout)
    return one, tmp_path / "ranks"


@pytest.fixture
def no_ranks_env(monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)


# "even" (the KV heads travel as they are) is the slow suite's: each launch costs its ranks' imports
@pytest.mark.parametrize("heads", ["uneven", pytest.param("even", marks=pytest.mark.slow)])
def test_tiny_llama_sp2_matches_one_process_and_fails_without_the_all_to_all(tmp_path, no_ranks_env, heads):
    """The default suite's check, one launch of 2 ranks at SP = 2: SFT on packs crossing the shard edge and a GSPO
    update with KL equal one process; the same SFT with the all-to-all before attention skipped does not."""
    model = {"tiny": heads}
    sft = _sft_job("sft_packed", 128, packed=True, lr=3e-3)
    jobs = [sft, {"kind": "rl", "name": "gspo_seq_mis_kl_loss", "algo": ALGOS["gspo_seq_mis_kl_loss"], "lr": 0.5},
            sft | {"name": "sft_packed_skipped", "skip_all_to_all": True}]
    assert _edge_crossings(sft, 2) > 0
    spec = _spec(model, jobs, {"sequence_parallel": 2}, _rl_batch(_model(model), 128))
    one, ranks = _one_and_ranks(tmp_path, spec, 2, 600)
    _assert_weights_moved(spec, one, jobs)
    assert_matches_one_process(one, ranks, jobs[:2])
    with pytest.raises(AssertionError, match="differ from one process") as skipped:
        assert_matches_one_process(one, ranks, jobs[2:])
    print("all-to-all skipped:", str(skipped.value).splitlines()[0][:120])


def test_without_a_group_a_pack_is_one_shard():
    from passband.training.runtime.ulysses import pack_multiple, shard_counts, token_shard

    assert pack_multiple(16, None) == 16 and token_shard(10, None) == slice(0, 10)
    assert shard_counts([0, 3, 9], 10, None) == [3]


def test_flash_attention_is_refused_under_sequence_parallelism():
    from passband.training.runtime.varlen_attention import VARLEN_SDPA, resolve_attention

    assert resolve_attention("auto", torch.device("cuda"), sequence_parallel=True) == VARLEN_SDPA
    with pytest.raises(ValueError, match="does not run under sequence parallelism"):
        resolve_attention("flash_attention_2", torch.device("cuda"), sequence_parallel=True)


@pytest.mark.slow
@pytest.mark.parametrize("mesh", [{"sequence_parallel": 2}, {"shard": 2, "sequence_parallel": 2}],
                         ids=["sp2", "shard2_sp2"])
def test_shipped_model_matches_one_process(tmp_path, no_ranks_env, smollm2_dir, mesh):
    """SmolLM2-135M (9 query heads, 3 KV heads), fp32: SFT on plain and on packed rows, and the RL update (GRPO and
    GSPO, seq-MIS and token-MIS, KL as a loss and in the reward, one and two inner steps)."""
    model = {"dir": str(smollm2_dir)}
    lm = _model(model)
    vocab = lm.config.vocab_size
    jobs = [_sft_job("sft_plain", vocab, packed=False, lr=1e-4), _sft_job("sft_packed", vocab, packed=True, lr=1e-4),
            *({"kind": "rl", "name": name, "algo": algo, "lr": 0.05} for name, algo in ALGOS.items())]
    assert all(_edge_crossings(job, 2) > 0 for job in jobs[:2])
    spec = _spec(model, jobs, mesh, _rl_batch(lm, vocab))
    del lm
    nproc = mesh.get("shard", 1) * mesh["sequence_parallel"]
    one, ranks = _one_and_ranks(tmp_path, spec, nproc, 1800)
    _assert_weights_moved(spec, one, jobs)
    assert_matches_one_process(one, ranks, jobs)


if __name__ == "__main__":
    run_jobs(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]))
