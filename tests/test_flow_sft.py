"""The sft flow on a tiny Llama built here: stages in order, committed checkpoints, skip and resume.

Three runs share one MLflow database: A (uninterrupted) under artifact root A; under root B, a run
killed during its 6th optimizer step (stage 1 complete, stage 2 checkpointed at its step 1), then
a rerun, which must skip stage 1, run only stage 2's step 2 and end with A's weights.
"""

import json
import random

import pytest
import torch
from mlflow import MlflowClient
from prefect.testing.utilities import prefect_test_harness
from safetensors.torch import load_file

from passband.curation.hygiene import question_key
from passband.curation.suites.math_suite import generate_math, question_of
from passband.flows.common_config import ProblemSource
from passband.flows.sft import SFTConfig, WorkedMathSource, sft
from passband.tasks.artifacts.datasets import read_table
from passband.tasks.artifacts.store import fetch_artifact, open_store
from tiny_chat_model import tiny_llama, tiny_tokenizer
from passband.training.sft import loop
from passband.training.sft.config import StageConfig

STAGE2_LR = 1e-4


class KilledForTesting(RuntimeError):
    """Raised after N optimizer steps, before that step's checkpoint, as a kill would."""


def kill_after_steps(patch: pytest.MonkeyPatch, num_steps: int) -> None:
    """The test seam: wrap the SFT loop so the Nth optimizer step of this run (across stages)
    raises from its metrics callback, which the loop calls before that step's checkpoint."""
    real_train_stage, done = loop.train_stage, [0]

    def train_stage(*args, on_metrics, **kwargs):
        def counted(metrics, step):
            on_metrics(metrics, step)
            done[0] += 1
            if done[0] >= num_steps:
                raise KilledForTesting(f"killed after {done[0]} steps, at step {step}, before its checkpoint")

        return real_train_stage(*args, on_metrics=counted, **kwargs)

    patch.setattr(loop, "train_stage", train_stage)


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=300):  # the shared 2-core box can be slow to start it
        yield


def _write_data(path):
    """30 chat rows: half {prompt, completion}, half in the messages format."""
    rng = random.Random(0)
    lines = []
    for i in range(30):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        if i % 2:
            lines.append({"prompt": f"{a}+{b}=?", "completion": f"{a}+{b}={a + b}."})
        else:
            lines.append({"messages": [{"role": "user", "content": f"{a}+{b}=?"},
                                       {"role": "assistant", "content": f"{a}+{b}={a + b}."}]})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def _config(model_dir, data_path, **overrides):
    stages = [
        # 4 steps at a large lr, a checkpoint every 2 steps (so a kill at step 3 resumes from 2).
        StageConfig(name="s1", datasets={str(data_path): 1.0}, max_length=96, num_steps=4, lr=1e-2,
                    schedule="constant", batch_tokens=300, micro_batch_tokens=192, checkpoint_every=2, seed=1),
        # Two constant-lr AdamW steps: each moves a weight by at most ~lr from where the stage started.
        StageConfig(name="s2", datasets={"worked": 1.0}, max_length=256, num_steps=2, lr=STAGE2_LR,
                    schedule="constant", weight_decay=0.0, batch_tokens=600, micro_batch_tokens=512, seed=2,
                    checkpoint_every=1, activation_checkpointing=True, loss_chunk_size=64),
    ]
    return SFTConfig(model=str(model_dir), stages=stages,
                     generated={"worked": WorkedMathSource(num_examples=15, difficulties=[0])}, **{"eval": None, **overrides})


@pytest.fixture(scope="module")
def runs(harness, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sft")
    model_dir, data_path = tmp / "tiny", tmp / "data.jsonl"
    tiny_llama(seed=0).save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    _write_data(data_path)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PASSBAND_HOME", str(tmp / "home"))
        patch.setenv("PASSBAND_EXPERIMENT", "test-sft")
        patch.setenv("PASSBAND_ARTIFACT_ROOT", str(tmp / "root_a"))
        full = sft(_config(model_dir, data_path))
        store_a = open_store()
        patch.setenv("PASSBAND_ARTIFACT_ROOT", str(tmp / "root_b"))
        with pytest.raises(KilledForTesting), pytest.MonkeyPatch.context() as killing:
            kill_after_steps(killing, 6)
            sft(_config(model_dir, data_path))
        store_b = open_store()
        killed_run_id = MlflowClient().search_runs(
            [MlflowClient().get_experiment_by_name("test-sft").experiment_id], "attributes.status = 'FAILED'")[0].info.run_id
        # Stage 2's keys differ between roots (its start is stage 1's URI): look them up by prefix.
        s2_prefix = store_b.root / "checkpoints" / "sft"
        committed_s2 = sorted(p.parent.name for p in s2_prefix.glob("*/s2/*/manifest.json"))
        resumed = sft(_config(model_dir, data_path))
        yield {"full": full, "resumed": resumed, "store_a": store_a, "killed_run_id": killed_run_id,
               "committed_s2": committed_s2, "model_dir": model_dir}


def _keys(summary, stage, steps):
    """Checkpoint keys of a stage, derived from the URI of its final checkpoint."""
    uri = summary.outputs["stage1_checkpoint" if stage == "s1" else "stage2_checkpoint"]
    prefix = uri.split("/checkpoints/")[1].rsplit("/", 1)[0]
    return [f"checkpoints/{prefix}/step-{step:06d}" for step in steps]


def _weights(uri):
    return load_file(fetch_artifact(uri) / "model.safetensors")


def _loss_steps(run_id):
    return [m.step for m in sorted(MlflowClient().get_metric_history(run_id, "loss"), key=lambda m: m.step)]


def test_stages_run_in_order_and_stage2_starts_from_stage1(runs):
    full = runs["full"]
    base = load_file(runs["model_dir"] / "model.safetensors")
    s1, s2 = _weights(full.outputs["stage1_checkpoint"]), _weights(full.outputs["stage2_checkpoint"])
    assert full.outputs["checkpoint"] == full.outputs["stage2_checkpoint"]
    # Stage 1 moved weights far (4 steps of lr 1e-2). An Adam step moves a weight by
    # lr * |m_hat| / sqrt(v_hat): exactly lr at step 1 (m_hat = g, v_hat = g^2) and at most
    # lr * sqrt(a^2/c + b^2/d) = 1.0014 lr at step 2 (Cauchy-Schwarz, a = .09/.19, b = .1/.19,
    # c = .000999/.001999, d = .001/.001999). So stage 2 (2 steps) started from stage 1's weights.
    # Slack: fp32 rounding of weights near 1 (norm weights), half an ulp (6e-8) per step.
    assert max((s1[k] - base[k]).abs().max().item() for k in base) > 100 * STAGE2_LR
    moved = max((s2[k] - s1[k]).abs().max().item() for k in s1)
    assert 0.5 * STAGE2_LR < moved <= 2.0014 * STAGE2_LR + 2.5e-7


def test_checkpoints_committed_with_manifests(runs):
    store = runs["store_a"]
    for stage, steps, total in (("s1", (2, 4), 4), ("s2", (1, 2), 2)):
        for key in _keys(runs["full"], stage, steps):
            manifest = store.manifest(key)
            assert {"model.safetensors", "optimizer.pt", "rng.pt", "trainer_state.json"} <= set(manifest["files"])
            assert (manifest["extra"]["step"], manifest["extra"]["total_steps"]) == (int(key[-6:]), total)


def test_metrics_and_tags_in_mlflow(runs):
    run_id = runs["full"].mlflow_run_id
    client = MlflowClient()
    assert _loss_steps(run_id) == [1, 2, 3, 4, 5, 6]  # global steps across both stages
    for name in ("lr", "grad_norm", "tokens_per_s", "padding_fraction", "num_loss_tokens"):
        assert len(client.get_metric_history(run_id, name)) == 6
    assert [m.value for m in client.get_metric_history(run_id, "lr") if m.step == 5] == [STAGE2_LR]
    tags = client.get_run(run_id).data.tags
    assert (tags["stage.s1.start_step"], tags["stage.s1.end_step"], tags["stage.s2.start_step"]) == ("1", "4", "5")
    assert tags["model.checkpoint_uri"] == runs["full"].outputs["checkpoint"]
    # An MLflow transformers model (MLmodel + the checkpoint's loadable files), no trainer state.
    logged = {item.path for item in client.list_artifacts(run_id, "model")}
    assert {"model/MLmodel", "model/model"} <= logged
    weights = {item.path for item in client.list_artifacts(run_id, "model/model")}
    assert "model/model/model.safetensors" in weights and "model/model/optimizer.pt" not in weights
    assert runs["full"].metrics["s1/num_steps"] == 4.0


def test_killed_run_reruns_skipping_the_done_stage_and_resuming_the_broken_one(runs):
    full, resumed = runs["full"], runs["resumed"]
    # The killed run ran steps 1..6, committed stage 2's step 1 and not its step 2.
    assert _loss_steps(runs["killed_run_id"]) == [1, 2, 3, 4, 5, 6]
    assert runs["committed_s2"] == ["step-000001"]
    # The rerun skipped stage 1 and ran only stage 2's step 2 (global step 6): no replay, no skip.
    assert _loss_steps(resumed.mlflow_run_id) == [6]
    tags = MlflowClient().get_run(resumed.mlflow_run_id).data.tags
    assert (tags["stage.s1.status"], tags["stage.s2.status"]) == ("skipped", "resumed from step 1")
    assert resumed.outputs["stage1_checkpoint"].replace("root_b", "root_a") == full.outputs["stage1_checkpoint"]
    final_full, final_resumed = _weights(full.outputs["checkpoint"]), _weights(resumed.outputs["checkpoint"])
    assert final_full.keys() == final_resumed.keys()
    for name in final_full:
        assert torch.equal(final_full[name], final_resumed[name]), name


def test_held_out_questions_are_not_trained_on_in_another_format(harness, tmp_path, monkeypatch):
    """The pipeline's eval sets ask for plain answers; worked math and user data ask for boxed ones.
    Neither may bring an eval question into training (20 held-out questions per sub-domain at
    difficulty 0: the worked rows must avoid them, the data file's copies must be quarantined)."""
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PASSBAND_EXPERIMENT", "test-sft-held-out")
    model_dir, data_path = tmp_path / "tiny", tmp_path / "data.jsonl"
    tiny_llama(seed=0).save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    held_out_source = ProblemSource(suite="math", num_problems=100, seed=7, difficulty=0, answer_format="plain")
    held_out = generate_math(100, seed=7, difficulty=0, answer_format="plain")
    keys = {question_key(row["prompt"]) for row in held_out}
    # 10 held-out questions re-asked in the boxed format, and 10 questions of the other suite seed
    copies = [question_of(row["prompt"]) + " Put the final answer in \\boxed{}." for row in held_out[:10]]
    others = [row["prompt"] for row in generate_math(40, seed=8, difficulty=0, answer_format="boxed")
              if question_key(row["prompt"]) not in keys][:10]
    assert len(others) == 10
    data_path.write_text("".join(json.dumps({"prompt": p, "completion": "The answer is \\boxed{1}."}) + "\n"
                                 for p in copies + others))
    stage = StageConfig(name="s1", datasets={str(data_path): 1.0, "worked": 1.0}, max_length=256, num_steps=1,
                        lr=1e-4, batch_tokens=600, micro_batch_tokens=512)
    summary = sft(SFTConfig(model=str(model_dir), stages=[stage], held_out={"eval_math": held_out_source},
                            generated={"worked": WorkedMathSource(num_examples=40, difficulties=[0])}, eval=None))

    worked = read_table(summary.outputs["data_worked"]).to_pylist()
    assert len(worked) == 40 and not {question_key(row["prompt"]) for row in worked} & keys
    quarantine_path = MlflowClient().download_artifacts(summary.mlflow_run_id, "quarantine/s1.jsonl", str(tmp_path))
    quarantined = [json.loads(line) for line in open(quarantine_path)]
    contaminated = [row["prompt"] for row in quarantined if row["removed_reason"] == "asks a question of the eval set"]
    # the mix takes all 20 file rows and 20 worked rows (equal weights): exactly the 10 copies go
    assert sorted(contaminated) == sorted(copies)


def test_sft_commits_worked_analyses_and_reads_them_back_as_chat_rows(harness, tmp_path, monkeypatch):
    from passband.curation.grading.analyses import worked_analysis
    from passband.curation.grading.triples import generate_triples
    from passband.curation.hygiene import asks_held_out, held_out_keys
    from passband.tasks.steps.sft_data import commit_worked_analyses, load_dataset_rows

    monkeypatch.setenv("PASSBAND_ARTIFACT_ROOT", str(tmp_path / "root"))
    config = SFTConfig.model_validate({"worked_analyses": {"analyses": {"num_examples": 12, "seed": 3}},
                                       "generated": {"worked_math": None},
                                       "stages": [{"name": "grading", "datasets": {"analyses": 1.0}, "max_length": 256,
                                                   "num_steps": 1, "lr": 1e-5, "batch_tokens": 256,
                                                   "micro_batch_tokens": 256}]})
    held = generate_triples(6, 0, 0)
    uri = commit_worked_analyses.fn(config.worked_analyses["analyses"].model_dump(), [row["prompt"] for row in held])
    rows, bad = load_dataset_rows.fn(uri)
    assert bad == [] and len(rows) == 12
    assert all(row["completion"] == worked_analysis(row["reference"]) for row in rows)
    assert not any(asks_held_out(row["prompt"], held_out_keys([r["prompt"] for r in held])) for row in rows)
    with pytest.raises(ValueError, match=r"generated and worked_analyses both name \['worked_math'\]"):
        SFTConfig.model_validate({"worked_analyses": {"worked_math": {"num_examples": 2}}})
