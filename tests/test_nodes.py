"""Two "nodes" on this machine: two torchrun launches meeting at a rendezvous on localhost (`--nnodes 2
--node_rank i --rdzv_endpoint 127.0.0.1:PORT`, the command tasks/steps/trainer_nodes.py builds for a flow's
`distributed.nnodes: 2`), training one SFT stage on an HSDP mesh (replicate 2 across the nodes, shard within
each): the weights and per-step loss and grad norm of the one-process run; and a rank SIGKILLed on node 1
failing the run within the collective timeout, in one line naming the node and rank that noticed, the rerun
resuming from the last checkpoint onto the uninterrupted run's weights.

Tiny Llama, fp32, gloo on CPU (tests/test_sft_torchrun.py's stage), so the comparisons bound summation order.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from killrun import alive, rank_pids
from test_sft_torchrun import STAGE, _write_rows
from tiny_chat_model import tiny_llama, tiny_tokenizer
from passband.tasks.steps.rl_torchrun import free_port
from passband.tasks.steps.trainer_nodes import rank_failure, torchrun_command
from passband.training.runtime.config import DistributedConfig
from passband.training.sft.config import StageConfig
from passband.training.sft.launch import LaunchConfig, run

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def stage_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LaunchConfig:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    model_dir = tmp_path / "model"
    tiny_llama(seed=0, hidden=32).save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    _write_rows(tmp_path / "rows.jsonl")
    stage = StageConfig(datasets={str(tmp_path / "rows.jsonl"): 1.0}, **{**STAGE, "num_steps": 3, "checkpoint_every": 1})
    return LaunchConfig(model=model_dir, out_dir=tmp_path / "one", stage=stage)


class Nodes:
    """Two torchrun launches, one per "node", of the SFT entry point on one mesh; node 0's stdout read on a thread."""

    def __init__(self, config: LaunchConfig, work: Path, nproc_per_node: int, collective_timeout_s: float = 60.0):
        distributed = DistributedConfig(nproc_per_node=nproc_per_node, nnodes=2, replicate=2,
                                        rendezvous_endpoint=f"127.0.0.1:{free_port()}",
                                        collective_timeout_s=collective_timeout_s)
        config = config.model_copy(update={"mesh": distributed.mesh, "collective_timeout_s": collective_timeout_s})
        work.mkdir(parents=True, exist_ok=True)
        config_file = work / "launch.yaml"
        config_file.write_text(json.dumps(config.model_dump(mode="json")))  # JSON is YAML
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        env.pop("WORLD_SIZE", None)
        self.lines: list[dict] = []
        self.stderr = [work / f"node{node}.stderr" for node in (0, 1)]
        self.nodes = []
        for node in (0, 1):
            command = torchrun_command(distributed, "passband.training.sft.launch", config_file, node)
            with open(self.stderr[node], "w") as stderr:
                self.nodes.append(subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=stderr,
                                                   text=True, start_new_session=True))
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.nodes[0].stdout:
            if line.startswith("{"):
                self.lines.append(json.loads(line))

    def wait(self, timeout_s: float) -> list[int]:
        codes = [node.wait(timeout=timeout_s) for node in self.nodes]
        self.reader.join(timeout=10)
        return codes

    def metrics(self) -> dict[int, dict]:
        return {line["step"]: line for line in self.lines if "loss" in line}

    def stop(self) -> None:
        for node in self.nodes:
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGKILL)


def _weights_diff(a: Path, b: Path) -> float:
    one, other = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert sorted(one) == sorted(other)
    return max(float((one[k] - other[k]).abs().max()) for k in one)


def _matches_one_process(nodes: Nodes, one_metrics: dict[int, dict], one: Path, two: Path, label: str) -> None:
    assert [line for line in nodes.lines if "num_steps" in line] == [{"checkpoint": str(two / "step_000003"),
                                                                      "num_steps": 3}]
    diff = _weights_diff(one / "step_000003", two / "step_000003")
    print(f"{label}: max |weight - one process| after 3 steps = {diff:.3g}")
    # one AdamW step moves a weight by ~lr = 3e-3: a replica's micro-batches dropped or counted twice is far above
    assert diff < 1e-5
    metrics = nodes.metrics()
    assert sorted(metrics) == [1, 2, 3]
    for step, line in metrics.items():  # the loss and the pre-clip norm catch a wrong normalisation by its factor
        for key in ("loss", "grad_norm", "num_loss_tokens", "padding_fraction"):
            assert line[key] == pytest.approx(one_metrics[step][key], rel=1e-5), (label, step, key)


@pytest.mark.slow
def test_two_nodes_hsdp_match_one_process(stage_files: LaunchConfig, tmp_path: Path) -> None:
    one_metrics: dict[int, dict] = {}
    run(stage_files, on_metrics=lambda m, s: one_metrics.__setitem__(s, m))
    for nproc_per_node in (1, 2):  # replicate 2 x shard 1, then replicate 2 x shard 2 (4 ranks)
        label = f"2 nodes x {nproc_per_node}"
        two = tmp_path / f"nodes_x{nproc_per_node}"
        nodes = Nodes(stage_files.model_copy(update={"out_dir": two / "checkpoints"}), two, nproc_per_node)
        try:
            codes = nodes.wait(timeout_s=300)
        finally:
            nodes.stop()
        assert codes == [0, 0], [path.read_text()[-3000:] for path in nodes.stderr]
        _matches_one_process(nodes, one_metrics, tmp_path / "one", two / "checkpoints", label)


@pytest.mark.slow
def test_a_killed_rank_fails_both_nodes_and_the_rerun_resumes(stage_files: LaunchConfig, tmp_path: Path) -> None:
    steps, timeout_s = 8, 20.0
    config = stage_files.model_copy(update={"stage": stage_files.stage.model_copy(update={"num_steps": steps})})
    one_metrics: dict[int, dict] = {}
    run(config, on_metrics=lambda m, s: one_metrics.__setitem__(s, m))
    out = tmp_path / "nodes" / "checkpoints"
    nodes = Nodes(config.model_copy(update={"out_dir": out}), tmp_path / "nodes", 1, timeout_s)
    try:
        deadline = time.monotonic() + 300
        while not any(line.get("checkpoint_saved") and line["step"] >= 2 for line in nodes.lines):
            assert time.monotonic() < deadline and nodes.nodes[0].poll() is None, "no checkpoint of step 2"
            time.sleep(0.02)
        ranks = rank_pids(nodes.nodes[1].pid)
        assert list(ranks) == [1], ranks  # node 1 holds rank 1 (static rendezvous: node i, ranks i x nproc ...)
        os.kill(ranks[1], signal.SIGKILL)
        killed = time.monotonic()
        codes = nodes.wait(timeout_s=timeout_s + 60)
        took = time.monotonic() - killed
    finally:
        nodes.stop()
    assert not alive(ranks[1])
    stderr0, stderr1 = (path.read_text() for path in nodes.stderr)
    done = [line["step"] for line in nodes.lines if "loss" in line]
    print(f"killed after step {done[-1] if done else 0}; both nodes exited {took:.1f} s later with {codes}")
    print("node 0:", rank_failure(stderr0))
    assert codes[0] != 0 and codes[1] != 0 and max(done) < steps
    # node 0's rank says in one line which node and rank noticed, and why: its collective with the dead rank failed
    # (at once, when the dead rank's connection closed; else after collective_timeout_s); node 1's torchrun names
    # its dead rank and the signal
    failure = rank_failure(stderr0)
    assert failure.startswith("node 0 rank 0 of 2: SFT stage 'foundation' failed: "), stderr0[-3000:]
    assert "Connection closed by peer" in failure or "Connection reset by peer" in failure or "Timed out" in failure
    # Bounded by the collective timeout once rank 0 waits on the dead rank; before that it may still be computing
    # its share of the step, which on this shared 2-core box (load average ~25 when measured) took tens of seconds.
    assert took < timeout_s + 90
    assert "exitcode  : -9" in stderr1 and "rank      : 1 " in stderr1, stderr1[-3000:]

    saved = sorted(path for path in out.glob("step_*") if (path / "trainer_state.json").is_file())
    last = saved[-1]
    rerun = Nodes(config.model_copy(update={"out_dir": out, "resume_from": last}), tmp_path / "rerun", 1, timeout_s)
    try:
        codes = rerun.wait(timeout_s=300)
    finally:
        rerun.stop()
    assert codes == [0, 0], [path.read_text()[-3000:] for path in rerun.stderr]
    resumed_from = int(last.name.removeprefix("step_"))
    print(f"rerun resumed from {last.name}")
    assert sorted(rerun.metrics()) == list(range(resumed_from + 1, steps + 1))
    diff = _weights_diff(tmp_path / "one" / f"step_{steps:06d}", out / f"step_{steps:06d}")
    print(f"resumed 2-node run vs one process after {steps} steps: max |weight difference| = {diff:.3g}")
    assert diff < 1e-5


@pytest.mark.slow
def test_the_sft_flow_on_two_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`sft` with distributed.nnodes 2 on node 0 (the flow's process launches its torchrun) and a follower on
    "node 1" (`python -m passband.tasks.steps.trainer_nodes`, the same home): the one-process flow's weights."""
    from prefect.testing.utilities import prefect_test_harness

    from passband.flows.sft import SFTConfig, sft
    from passband.tasks.artifacts.store import fetch_artifact
    from test_flow_sft_torchrun import STAGE as FLOW_STAGE

    model_dir, data_path = tmp_path / "tiny", tmp_path / "rows.jsonl"
    tiny_llama(seed=0, hidden=32).save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    _write_rows(data_path)
    stage = StageConfig(datasets={str(data_path): 1.0}, **{**FLOW_STAGE, "num_steps": 3})
    nodes = DistributedConfig(nproc_per_node=1, nnodes=2, replicate=2,
                              rendezvous_endpoint=f"127.0.0.1:{free_port()}", collective_timeout_s=60)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    follower = subprocess.Popen([sys.executable, "-m", "passband.tasks.steps.trainer_nodes", "--node-rank", "1",
                                 "--idle-exit-s", "2"], cwd=REPO, env=env, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    try:
        with prefect_test_harness(server_startup_timeout=300):
            summaries = {}
            for name, distributed in (("nodes", nodes), ("one", DistributedConfig())):
                monkeypatch.setenv("PASSBAND_ARTIFACT_ROOT", str(tmp_path / f"root_{name}"))
                summaries[name] = sft(SFTConfig(model=str(model_dir), stages=[stage], generated={},
                                                distributed=distributed, eval=None))
        assert follower.wait(timeout=60) == 0, follower.stderr.read()[-3000:]
    finally:
        if follower.poll() is None:
            os.killpg(follower.pid, signal.SIGKILL)
    one, two = (fetch_artifact(summaries[name].outputs["checkpoint"]) for name in ("one", "nodes"))
    diff = _weights_diff(one, two)
    print(f"sft flow, 2 nodes x 1 rank (HSDP replicate 2) vs one process: max |weight difference| = {diff:.3g}")
    assert diff < 1e-5
