"""kill -9 anywhere: a real `passband run` SIGKILLed (its whole process group) at a random point
after a commit, then rerun with the same command on the same home, against an
uninterrupted run of that command in a fresh home (tests/killrun.py does the killing).

- curate: the rerun samples only the shards missing at the kill (those committed stay untouched)
  and its datasets equal the uninterrupted run's;
- sft: the rerun trains only the steps after the last committed checkpoint and ends with the
  uninterrupted run's weights;
- rl: the rerun continues from the last committed checkpoint, draws the uninterrupted run's
  prompts at every later iteration and logs each of those iterations once;
- pipeline: every stage that finished before the kill is a cache hit in the rerun, the others run,
  and the final outputs are all committed.

Each prints where it was killed and what the rerun reused (run with -s to see it). The models are
tiny ones built here (tests/tiny_chat_model.py; the real SmolLM2 needed 105 s for one 2-problem
pass-rate shard on the shared CPU box, and each test makes three runs); set PASSBAND_KILL_SEED to
replay a kill point. A killed process cannot clean up its scratch space: the last test checks
that the next run removes what dead processes left (tasks/artifacts/checkpoints.py).
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import yaml
from mlflow import MlflowClient
from safetensors.torch import load_file

from killrun import committed, kill_after_commits, kill_rank_after_commits, kill_seed, run_to_end
from passband.tasks.artifacts.datasets import read_table
from passband.tasks.artifacts.store import fetch_artifact
from test_flow_pipeline import tiny_config as tiny_pipeline_config
from test_flow_rl import _digit_model, _rows_file, TRAIN_PROMPTS
from test_flow_sft import _write_data
from tiny_chat_model import tiny_llama, tiny_tokenizer

RUN_TIMEOUT_S = 1200


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> Path:
    """A tiny Llama that answers "1" or "2" (tests/test_flow_rl.py), so verdicts and rewards vary."""
    path = tmp_path_factory.mktemp("digits") / "model"
    _digit_model(path)
    return path


@pytest.fixture(scope="module")
def short_and_long(tmp_path_factory) -> Path:
    """The digit model answering every other training prompt with its digit 7 times (8 tokens with EOS, 2 for the
    others): groups that end at different rounds, for partial rollouts to carry the long ones."""
    path = tmp_path_factory.mktemp("short_and_long") / "model"
    _digit_model(path, repeats=lambda index: 7 if index % 2 else 1)
    return path


def _config_file(path: Path, config: dict) -> list[str]:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return ["--config", str(path)]


def _tracking(home: Path) -> MlflowClient:
    return MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")


def _steps(home: Path, run_id: str, metric: str) -> list[int]:
    return sorted(m.step for m in _tracking(home).get_metric_history(run_id, metric))


def _values(home: Path, run_id: str, metric: str) -> dict[int, float]:
    return {m.step: m.value for m in _tracking(home).get_metric_history(run_id, metric)}


def _max_abs_diff(uri_a: str, uri_b: str) -> float:
    a, b = (load_file(fetch_artifact(uri) / "model.safetensors") for uri in (uri_a, uri_b))
    assert a.keys() == b.keys()
    return max((a[name] - b[name]).abs().max().item() for name in a)


def _scratch(home: Path) -> list[str]:
    """What is in the home's scratch folder (training checkpoints, RL weight syncs)."""
    root = home / "scratch"
    return sorted(path.name for path in root.iterdir()) if root.is_dir() else []


def _report(name: str, lines: list[str]) -> None:
    print(f"\n[kill -9 {name}]\n  " + "\n  ".join(lines))


@pytest.mark.slow  # three `passband run curate` processes: 84 s in all on the shared 2-core box
def test_curate_killed_resamples_only_missing_shards(digits, tmp_path):
    args = ["run", "curate", *_config_file(tmp_path / "curate.yaml", {
        "model": str(digits),
        "tasks": {"math": {"source": {"suite": "math", "num_problems": 14, "difficulty": 0, "answer_format": "plain"},
                           "eval_size": 2, "band": "[0, 1]"},
                  "code": None, "ifeval": None},  # a file's map starts from the default entries
        "engine": {"kind": "hf", "dtype": "float32"},
        "pass_rate": {"sampling": {"n": 4, "max_tokens": 4}, "shard_size": 1},  # 12 shards of one problem
        "sft": {"enabled": False}, "correction": {"enabled": False}, "synthetic": {"enabled": False},
        "hygiene": {"against_humaneval": False},
    })]
    shards = "passrate/*/manifest.json"
    full, _, full_s = run_to_end(args, tmp_path / "full", RUN_TIMEOUT_S, "uninterrupted")
    num_shards = int(full["metrics"]["shards_computed"])
    assert num_shards == 12 and full["metrics"]["shards_reused"] == 0

    home = tmp_path / "killed"
    killed = kill_after_commits(args, home, shards, kill_seed(), max_delay_s=2.0, timeout_s=RUN_TIMEOUT_S,
                                     done_pattern="stages/curate/*/manifest.json")
    at_kill = killed.committed
    assert 1 <= len(at_kill) <= num_shards
    rerun, _, rerun_s = run_to_end(args, home, RUN_TIMEOUT_S, "rerun")

    # Every shard committed before the kill was read back, every other one sampled once.
    assert rerun["metrics"]["shards_reused"] == len(at_kill)
    assert rerun["metrics"]["shards_computed"] == num_shards - len(at_kill)
    assert rerun["metrics"]["engine_calls"] == num_shards - len(at_kill)  # one generate call per sampled shard
    after = committed(home, shards)
    assert set(after) == set(committed(tmp_path / "full", shards))  # the same 12 shard keys
    assert all(after[path] == manifest for path, manifest in at_kill.items())  # none recommitted
    # The same samples, shard by shard, and the same datasets as the uninterrupted run.
    for path in after:
        key = path.removesuffix("/manifest.json")
        mine, theirs = (pq.read_table(fetch_artifact((h / "artifacts" / key).as_uri()) / "samples.parquet")
                        for h in (home, tmp_path / "full"))
        assert mine.to_pylist() == theirs.to_pylist(), key
    for name, uri in full["outputs"].items():
        assert read_table.fn(rerun["outputs"][name]).to_pylist() == read_table.fn(uri).to_pylist(), name
    pass_rates = [row["pass_rate"] for row in read_table.fn(full["outputs"]["rl_math"]).to_pylist()]
    assert len(set(pass_rates)) > 1, "every pass rate equal: the comparison would be weak, pick other problems"
    _report("curate", [
        f"killed: {killed.describe()}",
        f"rerun reused {len(at_kill)} of {num_shards} shards (manifests unchanged), sampled "
        f"{rerun['metrics']['shards_computed']:.0f}; datasets equal to the uninterrupted run's: "
        f"{sorted(full['outputs'])}",
        f"wall s: uninterrupted {full_s:.1f}, killed at {killed.seconds_after_start:.1f}, rerun {rerun_s:.1f}"])


SFT_STEPS = {"s1": 8, "s2": 8}


def _global_step(committed_keys: list[str]) -> int:
    """The global step of the newest checkpoint among `checkpoints/sft/<key>/<stage>/step-N/manifest.json`."""
    steps = {stage: 0 for stage in SFT_STEPS}
    for path in committed_keys:
        stage, step = path.split("/")[-3:-1]
        steps[stage] = max(steps[stage], int(step.removeprefix("step-")))
    return steps["s1"] if steps["s1"] < SFT_STEPS["s1"] else SFT_STEPS["s1"] + steps["s2"]


@pytest.mark.slow  # three `passband run sft` processes: 180 s in all on the shared 2-core box
def test_sft_killed_resumes_to_the_same_weights(tmp_path):
    model_dir, data = tmp_path / "tiny", tmp_path / "data.jsonl"
    tiny_llama(seed=0).save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    _write_data(data)
    stage = {"max_length": 96, "lr": 1e-2, "schedule": "cosine", "warmup_steps": 2, "batch_tokens": 300,
             "micro_batch_tokens": 192, "checkpoint_every": 1}
    args = ["run", "sft", *_config_file(tmp_path / "sft.yaml", {
        "model": str(model_dir),
        "stages": [{"name": name, "datasets": {str(data): 1.0}, "num_steps": steps, "seed": index, **stage}
                   for index, (name, steps) in enumerate(SFT_STEPS.items())],
        "eval": None,
    })]
    checkpoints = "checkpoints/sft/*/*/*/manifest.json"
    total = sum(SFT_STEPS.values())
    full, _, full_s = run_to_end(args, tmp_path / "full", RUN_TIMEOUT_S, "uninterrupted")
    assert _steps(tmp_path / "full", full["mlflow_run_id"], "loss") == list(range(1, total + 1))

    home = tmp_path / "killed"
    killed = kill_after_commits(args, home, checkpoints, kill_seed(), max_delay_s=4.0, timeout_s=RUN_TIMEOUT_S,
                                     done_pattern="stages/sft/*/manifest.json")
    last = _global_step(list(killed.committed))
    assert 1 <= last <= total
    left_behind = _scratch(home)
    rerun, _, rerun_s = run_to_end(args, home, RUN_TIMEOUT_S, "rerun")
    assert _scratch(home) == []  # the killed run's scratch went too (tasks/artifacts/checkpoints.py)

    # Only the steps after the last committed checkpoint were trained; no committed one was redone.
    assert _steps(home, rerun["mlflow_run_id"], "loss") == list(range(last + 1, total + 1))
    tags = _tracking(home).get_run(rerun["mlflow_run_id"]).data.tags
    s1_status = "skipped" if last >= SFT_STEPS["s1"] else f"resumed from step {last}"
    assert tags["stage.s1.status"] == s1_status
    if last > SFT_STEPS["s1"]:
        assert tags["stage.s2.status"] == f"resumed from step {last - SFT_STEPS['s1']}"
    after = committed(home, checkpoints)
    assert len(after) == total and all(after[path] == manifest for path, manifest in killed.committed.items())
    diff = _max_abs_diff(full["outputs"]["checkpoint"], rerun["outputs"]["checkpoint"])
    assert diff <= 1e-6
    start = load_file(model_dir / "model.safetensors")
    final = load_file(fetch_artifact(full["outputs"]["checkpoint"]) / "model.safetensors")
    assert max((final[name] - start[name]).abs().max().item() for name in start) > 1e-3  # training moved them
    _report("sft", [
        f"killed: {killed.describe()}",
        f"last committed global step {last} of {total}; rerun: stage s1 {s1_status}, trained steps "
        f"{last + 1}..{total}; max |w_rerun - w_uninterrupted| = {diff:.3g}; scratch the kill left: {left_behind}",
        f"wall s: uninterrupted {full_s:.1f}, killed at {killed.seconds_after_start:.1f}, rerun {rerun_s:.1f}"])


RL_ITERATIONS = 10


def _rl_state(home: Path, key: str) -> dict:
    return json.loads((fetch_artifact((home / "artifacts" / key).as_uri()) / "trainer_state.json").read_text())


def _rl_args(digits: Path, tmp_path: Path, lora: dict | None = None, **settings) -> list[str]:
    """`passband run rl` on the digit model over TRAIN_PROMPTS, a checkpoint every iteration (with `lora`,
    adapters of those settings at 10x the lr)."""
    return ["run", "rl", *_config_file(tmp_path / "rl.yaml", {
        "model": str(digits),
        "datasets": {"math": {"suite": None, "path": _rows_file(tmp_path / "train.jsonl", TRAIN_PROMPTS),
                              "task": "math", "num_problems": len(TRAIN_PROMPTS)},
                     "code": None, "ifeval": None},  # a file's map starts from the default entries
        # 2 prompts per iteration over 8 rows: the cursor crosses two epoch boundaries in 10 iterations
        "prompts_per_step": 2, "num_iterations": RL_ITERATIONS, "seed": 7, "checkpoint_every": 1,
        "sampling": {"n": 4, "max_tokens": 4}, "engine": {"kind": "hf"},
        "algo": {"lr": 1e-2, "micro_batch_size": 3} if lora is None else {"lr": 1e-1, "micro_batch_size": 3, "lora": lora},
        "eval": None, **settings,
    })]


@pytest.mark.slow  # three `passband run rl` processes: 100 s in all on the shared 2-core box
@pytest.mark.parametrize("max_off_policy_steps,lora,math_tool,partial", [  # 1: the rollouts in flight at the kill come from the checkpoint
    (0, None, None, None), (1, None, None, None), (0, {"rank": 4}, None, None),  # LoRA: the adapters and their AdamW state resume
    (1, None, {}, None),  # math as tool episodes: the episodes in flight at the kill come from the checkpoint, token-exact
    # partial rollouts: answers cut after every token, one group of two ends an iteration; the carried ones resume
    (0, None, None, {"chunk_tokens": 1, "min_complete": 0.5, "max_carries": 2})])
def test_rl_killed_continues_from_its_last_checkpoint(request, tmp_path, max_off_policy_steps, lora, math_tool, partial):
    extra = {} if math_tool is None else {"math_tool": math_tool}
    if partial is not None:  # answers of 2 and 8 tokens, cut after every token: long groups are carried
        extra |= {"rollout": {"partial": partial}, "sampling": {"n": 4, "max_tokens": 8}}
    model = request.getfixturevalue("digits" if partial is None else "short_and_long")
    args = _rl_args(model, tmp_path, lora, **({"rollout": {"max_off_policy_steps": max_off_policy_steps}} | extra))
    checkpoints = "checkpoints/rl/*/iter-*/manifest.json"
    full, _, full_s = run_to_end(args, tmp_path / "full", RUN_TIMEOUT_S, "uninterrupted")

    home = tmp_path / "killed"
    # 1.5 s: ten iterations of a digit model take a few seconds, so a longer delay may outlive the run
    killed = kill_after_commits(args, home, checkpoints, kill_seed(), max_delay_s=1.5, timeout_s=RUN_TIMEOUT_S,
                                     done_pattern="stages/rl/*/manifest.json")
    last = max(int(path.split("/")[-2].removeprefix("iter-")) for path in killed.committed)
    assert 1 <= last <= RL_ITERATIONS
    left_behind = _scratch(home)
    if last < RL_ITERATIONS:  # killed inside the loop, whose weight-sync scratch nobody could remove
        assert any(name.startswith("rl-sync-") for name in left_behind), left_behind
    rerun, rerun_stderr, rerun_s = run_to_end(args, home, RUN_TIMEOUT_S, "rerun")
    assert _scratch(home) == []  # removed by the rerun, as its owner is dead (tasks/artifacts/checkpoints.py)

    # It continued from the newest checkpoint and ran each later iteration exactly once.
    resumed_from = re.findall(r"rl: resuming after iteration (\d+)", rerun_stderr)
    assert resumed_from == [str(last)]
    assert _steps(home, rerun["mlflow_run_id"], "seconds/iteration") == list(range(last + 1, RL_ITERATIONS + 1))
    after = committed(home, checkpoints)
    assert len(after) == RL_ITERATIONS and all(after[path] == manifest for path, manifest in killed.committed.items())
    # Every iteration drew the uninterrupted run's prompts, the cursor ended in the same place.
    full_keys = {path.split("/")[-2]: path.removesuffix("/manifest.json")
                 for path in committed(tmp_path / "full", checkpoints)}
    mine_keys = {path.split("/")[-2]: path.removesuffix("/manifest.json") for path in after}
    assert full_keys.keys() == mine_keys.keys() and len(full_keys) == RL_ITERATIONS
    orders = {name: (_rl_state(tmp_path / "full", full_keys[name]), _rl_state(home, mine_keys[name]))
              for name in sorted(full_keys)}
    for name, (uninterrupted, resumed) in orders.items():
        assert resumed["prompt_ids"] == uninterrupted["prompt_ids"], name
        assert resumed["consumed"] == uninterrupted["consumed"], name
        # partial rollouts: the answers carried out of every iteration, token for token, log-probs and versions
        assert resumed["carried"] == uninterrupted["carried"], name
    drawn = [p for uninterrupted, _ in orders.values() for p in uninterrupted["prompt_ids"]]
    assert sorted(drawn[:8]) == sorted(TRAIN_PROMPTS)  # one epoch: every prompt once before any repeats
    # ... each with the uninterrupted run's weight version (at k = 1 the checkpoint's in-flight batch first)
    versions = {name: _values(home_, run["mlflow_run_id"], "rollout/weight_version")
                for name, home_, run in (("full", tmp_path / "full", full), ("rerun", home, rerun))}
    assert versions["rerun"] == {step: versions["full"][step] for step in range(last + 1, RL_ITERATIONS + 1)}
    diff = _max_abs_diff(full["outputs"]["checkpoint"], rerun["outputs"]["checkpoint"])
    assert diff <= 1e-6
    if lora is not None:  # the merged weights above, and the adapters a further resume would train on
        adapters = [load_file(fetch_artifact(run["outputs"]["checkpoint"]) / "adapter" / "adapter_model.safetensors")
                    for run in (full, rerun)]
        assert adapters[0].keys() == adapters[1].keys()
        assert max((adapters[0][n] - adapters[1][n]).abs().max().item() for n in adapters[0]) <= 1e-6
    # ... and the iterations after the resume moved the weights (AdamW state restored from the checkpoint)
    resumed_at = (home / "artifacts" / mine_keys[f"iter-{last:06d}"]).as_uri()
    moved = _max_abs_diff(resumed_at, rerun["outputs"]["checkpoint"])
    assert last == RL_ITERATIONS or moved > 0
    if partial is not None:  # answers were carried across the kill and finished by the rerun under newer weights
        carried = [len(state["carried"]) for _, state in orders.values()]
        spanning = _values(home, rerun["mlflow_run_id"], "partial/spanning_answers")
        assert any(carried) and sum(spanning.values()) > 0, (carried, spanning)
    if math_tool is not None:  # every iteration trained on episodes: their counts are logged once per iteration
        assert _steps(home, rerun["mlflow_run_id"], "math/num_episodes") == list(range(last + 1, RL_ITERATIONS + 1))
    _report(f"rl, max_off_policy_steps {max_off_policy_steps}{', lora' if lora else ''}{', partial' if partial else ''}"
            f"{', math tool episodes' if math_tool is not None else ''}", [
        f"killed: {killed.describe()}",
        f"rerun resumed after iteration {last}, ran iterations {last + 1}..{RL_ITERATIONS} once each; prompt ids "
        f"of iterations {last + 1}..{RL_ITERATIONS} equal the uninterrupted run's: "
        f"{[orders[f'iter-{i:06d}'][1]['prompt_ids'] for i in range(last + 1, RL_ITERATIONS + 1)]}; "
        f"max |w_rerun - w_uninterrupted| = {diff:.3g} (weights moved {moved:.3g} after the resume); "
        f"scratch the kill left: {left_behind}",
        f"wall s: uninterrupted {full_s:.1f}, killed at {killed.seconds_after_start:.1f}, rerun {rerun_s:.1f}"])


RANK_EXIT_BOUND_S = 120.0  # torchrun notices a dead rank at once and gives the rest 30 s to exit


@pytest.mark.slow  # three 2-rank `passband run rl` processes: 105 s on the shared 2-core box
def test_rl_trainer_rank_killed_fails_the_run_and_the_rerun_continues(digits, tmp_path):
    """kill -9 of one trainer rank (not the flow): the run fails by itself within a bound, naming
    torchrun's exit and the request it awaited, no rank is left, and a rerun continues from the
    newest checkpoint onto the uninterrupted 2-rank run's prompts and weights."""
    args = _rl_args(digits, tmp_path, distributed={"nproc_per_node": 2})
    checkpoints = "checkpoints/rl/*/iter-*/manifest.json"
    full, _, full_s = run_to_end(args, tmp_path / "full", RUN_TIMEOUT_S, "uninterrupted")

    home = tmp_path / "killed"
    killed = kill_rank_after_commits(args, home, checkpoints, kill_seed(), max_delay_s=1.5, timeout_s=RUN_TIMEOUT_S,
                                     rank=1, exit_bound_s=RANK_EXIT_BOUND_S)
    assert killed.returncode not in (0, -9), killed.stderr[-3000:]  # it failed by itself, not by our SIGKILL
    assert re.search(r"torchrun --nproc_per_node 2 for the rl trainer exited with code -?\d+ awaiting request \d+",
                     killed.stderr), killed.stderr[-3000:]
    last = max(int(path.split("/")[-2].removeprefix("iter-")) for path in killed.committed)
    assert 1 <= last < RL_ITERATIONS
    rerun, rerun_stderr, rerun_s = run_to_end(args, home, RUN_TIMEOUT_S, "rerun")

    assert re.findall(r"rl: resuming after iteration (\d+)", rerun_stderr) == [str(last)]
    assert _steps(home, rerun["mlflow_run_id"], "seconds/iteration") == list(range(last + 1, RL_ITERATIONS + 1))
    full_states = {path.split("/")[-2]: _rl_state(tmp_path / "full", path.removesuffix("/manifest.json"))
                   for path in committed(tmp_path / "full", checkpoints)}
    mine_states = {path.split("/")[-2]: _rl_state(home, path.removesuffix("/manifest.json"))
                   for path in committed(home, checkpoints)}
    assert mine_states.keys() == full_states.keys() and len(full_states) == RL_ITERATIONS
    for name, uninterrupted in full_states.items():
        assert mine_states[name]["prompt_ids"] == uninterrupted["prompt_ids"], name
    diff = _max_abs_diff(full["outputs"]["checkpoint"], rerun["outputs"]["checkpoint"])
    assert diff <= 1e-6  # the same two ranks, the same order of every reduction: the same floats
    _report("rl trainer rank", [
        f"killed: {killed.describe()}",
        f"rerun resumed after iteration {last}; prompt ids of every iteration equal the uninterrupted run's; "
        f"max |w_rerun - w_uninterrupted| = {diff:.3g}",
        f"wall s: uninterrupted {full_s:.1f}, rank killed at {killed.seconds_after_start:.1f}, run exited "
        f"{killed.seconds_to_exit:.1f} after, rerun {rerun_s:.1f}"])


PIPELINE_STAGES = 7  # curate, sft, recurate, rl, evaluate-base, evaluate-sft, evaluate-rl


def _stage_summaries(home: Path, manifests: dict[str, bytes]) -> dict[str, str]:
    """MLflow run id of the run that computed each committed stage summary -> its stage key."""
    summaries = {}
    for path in manifests:
        key = path.removesuffix("/manifest.json")
        summary = json.loads((fetch_artifact((home / "artifacts" / key).as_uri()) / "summary.json").read_text())
        summaries[summary["mlflow_run_id"]] = key
    return summaries


@pytest.mark.slow  # two `passband run pipeline` processes: 73 s in all on the shared 2-core box
def test_pipeline_killed_serves_finished_stages_from_the_cache(tmp_path):
    model_dir = tmp_path / "tiny"
    tiny_llama(seed=0).save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    args = ["run", "pipeline", *_config_file(tmp_path / "pipeline.yaml",
                                             tiny_pipeline_config(model_dir, lr=1e-4).model_dump(mode="json"))]
    stages = "stages/*/*/manifest.json"
    home = tmp_path / "killed"
    # A tiny stage takes seconds: the kill point is the k-th finished stage, k drawn from the seed.
    seed = kill_seed()
    num_finished = random.Random(seed).randint(1, PIPELINE_STAGES - 1)
    killed = kill_after_commits(args, home, stages, seed, max_delay_s=0.5, timeout_s=RUN_TIMEOUT_S,
                                num_commits=num_finished)
    assert 1 <= len(killed.committed) < PIPELINE_STAGES, "every stage had finished: nothing left to resume"
    finished = _stage_summaries(home, killed.committed)
    client = _tracking(home)
    finished_names = sorted(client.get_run(run_id).info.run_name for run_id in finished)
    rerun, _, rerun_s = run_to_end(args, home, RUN_TIMEOUT_S, "rerun")

    # The rerun's stage runs: exactly those finished before the kill are cache hits, each reusing
    # the killed run's own stage run; the rest computed.
    experiment = client.get_experiment_by_name("passband").experiment_id
    children = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{rerun['mlflow_run_id']}'")
    assert len(children) == PIPELINE_STAGES
    hits = {run.info.run_name: run.data.tags["passband.cached_from_run"] for run in children
            if run.data.tags.get("passband.cache_hit") == "true"}
    assert sorted(hits.values()) == sorted(finished)
    assert sorted(hits) == finished_names
    computed = sorted(run.info.run_name for run in children if run.info.run_name not in hits)
    assert len(computed) == PIPELINE_STAGES - len(finished)
    assert len(committed(home, stages)) == PIPELINE_STAGES
    # Every output the pipeline names is a committed artifact, and the table has every checkpoint.
    for name, uri in rerun["outputs"].items():
        assert (Path(uri.removeprefix("file://")) / "manifest.json").is_file(), name
    for label in ("base", "sft", "rl"):
        for task in ("math", "code", "ifeval"):
            assert 0.0 <= rerun["metrics"][f"{label}/{task}/pass@1"] <= 1.0
    _report("pipeline", [
        f"killed: after stage summary {num_finished} was seen; {killed.describe()}",
        f"stages finished before the kill: {finished_names}; rerun served them from the cache (passband.cache_hit, "
        f"cached_from_run = the killed run's stage runs) and computed {computed}",
        f"wall s: killed at {killed.seconds_after_start:.1f}, rerun {rerun_s:.1f}"])


def test_scratch_of_dead_processes_is_removed(tmp_path, monkeypatch):
    from passband.tasks.artifacts.checkpoints import scratch_dir

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    root = tmp_path / "scratch"
    for name in (f"rl-sync-pid{dead.pid}-a", f"rl-checkpoint-pid{live.pid}-b", "notes"):
        (root / name).mkdir(parents=True)
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path))
    with scratch_dir("sft-checkpoints-") as mine:
        assert mine.parent == root and mine.name.startswith(f"sft-checkpoints-pid{os.getpid()}-")
        assert sorted(p.name for p in root.iterdir()) == sorted([f"rl-checkpoint-pid{live.pid}-b", "notes", mine.name])
    assert sorted(p.name for p in root.iterdir()) == sorted([f"rl-checkpoint-pid{live.pid}-b", "notes"])
    live.stdin.close()
    live.wait()
