"""The rl flow end to end with the hf engine.

1. (slow) The real SmolLM2 on 2 prompts x G=4 (math + ifeval), 2 iterations: per-task metrics
   exist, the fp32 hf engine and the trainer agree (vllm_kl ~ 0), weights move, evals before/after.
2. Resume, on a tiny Llama taught here to answer "1" or "2" (so math rewards vary): a run of 2
   iterations vs a run stopped after 1 and rerun; same prompts per iteration, same final weights.
"""

import json

import pytest
import torch
from mlflow import MlflowClient
from prefect.testing.utilities import prefect_test_harness
from safetensors.torch import load_file

from passband.flows.common_config import EngineConfig, ProblemSource, SamplingConfig
from passband.flows.rl.flow import RewardConfig, RLConfig, rl
from passband.flows.evaluate.config import EvalConfig
from passband.tasks.artifacts.store import fetch_artifact
from tiny_chat_model import tiny_llama, tiny_tokenizer
from passband.training.chat import encode_sft_example
from passband.training.rl.config import RLAlgoConfig

PER_TASK = ("reward", "pass_rate", "unparsable_frac", "response_len_mean", "response_len_max", "truncated_frac",
            "zero_variance_group_frac")
OVERALL = ("vllm_kl", "entropy", "trainer_ppl", "advantages_std", "grad_norm", "lr", "clip_frac_low", "clip_frac_high",
           "ratio_max", "mismatch_ratio_max", "mismatch_masked_token_frac", "mismatch_masked_seq_frac",
           "rollout_tokens_per_s", "train_tokens_per_s", "seconds/rollout", "seconds/scoring", "seconds/training",
           "seconds/weight_sync", "zero_variance_group_frac")


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=300):  # the shared 2-core box can be slow to start it
        yield


def _weights(checkpoint_uri):
    return load_file(str(fetch_artifact(checkpoint_uri) / "model.safetensors"))


@pytest.mark.slow  # hf sampling of the real model: minutes on a shared 2-core box
def test_real_model_two_iterations(harness, smollm2_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PASSBAND_EXPERIMENT", "test-rl")
    config = RLConfig(
        model=str(smollm2_dir),
        datasets={"math": ProblemSource(suite="math", num_problems=16, seed=3, difficulty=0),
                  "ifeval": ProblemSource(suite="ifeval", num_problems=16, seed=3, difficulty="easy")},
        prompts_per_step=2, num_iterations=2, seed=0,
        sampling=SamplingConfig(n=4, max_tokens=16), engine=EngineConfig(kind="hf", dtype="float32"),
        algo=RLAlgoConfig(lr=1e-5, micro_batch_size=4, precision="fp32"), checkpoint_every=0,
        # 16 tokens cut most answers: score the cut text rather than mask it, so groups have signal.
        reward=RewardConfig(mask_truncated=False),
        eval=EvalConfig(suites={"math": ProblemSource(suite="math", num_problems=1, seed=9001)},
                        sampling=SamplingConfig(n=2, max_tokens=16)), best_metric="math/pass@2",
    )
    summary = rl(config)
    metrics = summary.metrics
    assert summary.status == "completed"
    for task in ("math", "ifeval"):
        for name in PER_TASK:
            assert f"{task}/{name}" in metrics, f"{task}/{name}"
    for name in (*OVERALL, "before/math/pass@1", "after/math/pass@2", "eval/math/pass@1", "eval/mean/pass@1"):
        assert name in metrics, name
    # fp32 transformers sampling and the fp32 trainer compute the same distribution.
    assert metrics["vllm_kl"] < 1e-3
    # Every phase's peak holds at least the trainer's fp32 weights (the process's own high-water mark).
    weights_gb = sum(t.numel() * 4 for t in load_file(str(smollm2_dir / "model.safetensors")).values()) / 1e9
    for phase in ("rollout", "training", "weight_sync"):
        assert weights_gb < metrics[f"memory/{phase}_peak_gb"] < 24, phase
    history = MlflowClient().get_metric_history(summary.mlflow_run_id, "math/reward")
    assert sorted(m.step for m in history) == [1, 2]
    # held-out evaluations as SFT logs them: the eval/ series at the step scored, rows per evaluation
    evals = MlflowClient().get_metric_history(summary.mlflow_run_id, "eval/math/pass_at_1")
    assert sorted(m.step for m in evals) == [0, 2]
    rows = {a.path for a in MlflowClient().list_artifacts(summary.mlflow_run_id, "eval")}
    assert rows == {"eval/before.jsonl", "eval/iter-000002.jsonl"}
    zero_variance = [m.value for m in MlflowClient().get_metric_history(summary.mlflow_run_id, "zero_variance_group_frac")]
    assert min(zero_variance) < 1.0, "no group had reward variance: no gradient, pick another seed"
    start = load_file(str(smollm2_dir / "model.safetensors"))
    final = _weights(summary.outputs["checkpoint"])
    assert any(not torch.equal(start[name], final[name]) for name in final)
    assert summary.outputs["best_checkpoint"].rsplit("/", 1)[1] == "iter-000002"  # the only eval point after training


# ---- resume, on a tiny model -------------------------------------------------------------

TRAIN_PROMPTS = [f"q{i}" for i in range(8)]
EVAL_PROMPTS = ["e0", "e1"]


def _digit_model(path, repeats=lambda index: 1):
    """A tiny Llama fitted to answer "1" or "2" (about half each) to any of our prompts; with `repeats`, the
    prompt at that index of TRAIN_PROMPTS + EVAL_PROMPTS gets the digit that many times (answers of known lengths)."""
    tokenizer = tiny_tokenizer()
    model = tiny_llama(seed=0)
    examples = [encode_sft_example(tokenizer, p, digit * repeats(i), 64)
                for i, p in enumerate(TRAIN_PROMPTS + EVAL_PROMPTS) for digit in "12"]
    width = max(len(ids) for ids, _ in examples)
    ids = torch.tensor([i + [0] * (width - len(i)) for i, _ in examples])
    mask = torch.tensor([m + [0] * (width - len(m)) for _, m in examples], dtype=torch.float32)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(60):
        logp = torch.log_softmax(model(input_ids=ids).logits[:, :-1], dim=-1)
        token_logp = logp.gather(2, ids[:, 1:, None]).squeeze(-1)
        loss = -(token_logp * mask[:, 1:]).sum() / mask[:, 1:].sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)


def _rows_file(path, prompts):
    path.write_text("".join(json.dumps({"id": p, "task": "math", "prompt": p, "reference": "1"}) + "\n" for p in prompts))
    return str(path)


def _tiny_config(tmp, **overrides):
    return RLConfig(
        model=str(tmp / "digits"),
        datasets={"math": ProblemSource(suite=None, path=str(tmp / "train.jsonl"), task="math", num_problems=8)},
        prompts_per_step=2, num_iterations=2, seed=7,
        sampling=SamplingConfig(n=4, max_tokens=4), engine=EngineConfig(kind="hf"),
        algo=RLAlgoConfig(lr=1e-2, micro_batch_size=3), checkpoint_every=1,
        eval=EvalConfig(suites={"math": ProblemSource(suite=None, path=str(tmp / "eval.jsonl"), task="math")},
                        sampling=SamplingConfig(n=2, max_tokens=4)), eval_every=1,
        **overrides,
    )


def _state(uri):
    return json.loads((fetch_artifact(uri) / "trainer_state.json").read_text())


def digit_task(tmp_path, monkeypatch, experiment):
    """The digit model, its train and eval rows under `tmp_path`, and a home of its own for `experiment`."""
    _digit_model(tmp_path / "digits")
    _rows_file(tmp_path / "train.jsonl", TRAIN_PROMPTS)
    _rows_file(tmp_path / "eval.jsonl", EVAL_PROMPTS)
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PASSBAND_EXPERIMENT", experiment)


def test_stopped_and_resumed_run_matches_uninterrupted(harness, tmp_path, monkeypatch):
    digit_task(tmp_path, monkeypatch, "test-rl-resume")
    monkeypatch.setenv("PASSBAND_ARTIFACT_ROOT", str(tmp_path / "root_a"))
    full = rl(_tiny_config(tmp_path))
    again = rl(_tiny_config(tmp_path))
    assert again.mlflow_run_id == full.mlflow_run_id  # the completed config is reused, not rerun

    monkeypatch.setenv("PASSBAND_ARTIFACT_ROOT", str(tmp_path / "root_b"))
    partial = rl(_tiny_config(tmp_path, max_iterations_this_run=1))
    assert partial.status == "partial" and partial.outputs["checkpoint"].endswith("iter-000001")
    resumed = rl(_tiny_config(tmp_path))
    assert resumed.status == "completed"

    def iteration_uris(summary):
        final = summary.outputs["checkpoint"]
        return [final.replace("iter-000002", f"iter-{i:06d}") for i in (1, 2)]

    full_states = [_state(uri) for uri in iteration_uris(full)]
    resumed_states = [_state(uri) for uri in iteration_uris(resumed)]
    assert [s["prompt_ids"] for s in resumed_states] == [s["prompt_ids"] for s in full_states]
    seen = [p for s in full_states for p in s["prompt_ids"]]
    assert len(seen) == len(set(seen)) == 4  # one epoch of 8 prompts: nothing repeats yet
    assert resumed_states[1]["consumed"] == full_states[1]["consumed"] == {"math": 4}
    # The updates had signal (else equal weights would prove nothing) and are bit-identical.
    assert full.metrics["zero_variance_group_frac"] < 1.0 or full_states[0]["metrics"]["zero_variance_group_frac"] < 1.0
    start = load_file(str(tmp_path / "digits" / "model.safetensors"))
    full_weights, resumed_weights = _weights(full.outputs["checkpoint"]), _weights(resumed.outputs["checkpoint"])
    assert any(not torch.equal(start[name], full_weights[name]) for name in full_weights)
    assert all(torch.equal(full_weights[name], resumed_weights[name]) for name in full_weights)
    assert resumed.metrics["math/reward"] == full.metrics["math/reward"]
    assert resumed.metrics["before/math/pass@1"] == full.metrics["before/math/pass@1"]  # kept in the checkpoint
    assert resumed.outputs["best_checkpoint"].rsplit("/", 1)[1] == full.outputs["best_checkpoint"].rsplit("/", 1)[1]

    # What the policy wrote (issue 53): one row per rollout, every field, the logged reward series; the
    # resumed run's artifact (iteration 1 kept by the stopped run, 2 by the resumed one) equals the full run's.
    from passband.tasks.steps.rollouts_log import ROLLOUTS_TAG, read_rollouts
    from passband.training.rl.monitoring.rollout_records import ROLLOUT_COLUMNS

    client = MlflowClient()
    table = read_rollouts(client.get_run(full.mlflow_run_id).data.tags[ROLLOUTS_TAG])
    assert table.column_names == list(ROLLOUT_COLUMNS) and table.num_rows == 2 * 2 * 4  # iterations x prompts x G
    rows = table.to_pylist()
    assert all(row[name] is not None for row in rows for name in ROLLOUT_COLUMNS if name not in ("reward", "detail"))
    logged = {m.step: m.value for m in client.get_metric_history(full.mlflow_run_id, "math/reward")}
    for iteration in (1, 2):
        mine = [row["reward"] or 0.0 for row in rows if row["iteration"] == iteration]  # invalid rows count 0
        assert sum(mine) / len(mine) == pytest.approx(logged[iteration], abs=1e-12)
    assert [row["prompt_id"] for row in rows[::4]] == [p for s in full_states for p in s["prompt_ids"]]
    assert read_rollouts(client.get_run(resumed.mlflow_run_id).data.tags[ROLLOUTS_TAG]).to_pylist() == rows
