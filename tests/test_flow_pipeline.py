"""The pipeline on a tiny model built here: stage wiring, the stage cache (a rerun with no change
samples and trains nothing; a changed RL setting reruns only RL and its evaluation), the pass@1
table in the summary, and the best checkpoint in the MLflow registry."""

from __future__ import annotations

import json

import pytest
from mlflow import MlflowClient
from prefect.testing.utilities import prefect_test_harness
from tiny_chat_model import tiny_llama, tiny_tokenizer

import passband.tasks.stages.cache
from passband.flows.pipeline.flow import PipelineConfig, _sft_held_out, bind_refs, pipeline
from passband.training.engines.hf_engine import HFEngine

ENGINE = {"kind": "hf"}
POOL = {"num_problems": 6, "difficulty": 0}


def tiny_config(model_dir, lr: float) -> PipelineConfig:
    """Every stage at the smallest size that still runs it; bands keep everything (a random tiny
    model solves nothing, and RL needs non-empty pools)."""
    evals = {"math": "@curate.eval_math", "code": "@curate.eval_code", "ifeval": "@curate.eval_ifeval"}
    return PipelineConfig.model_validate({
        "model": str(model_dir),
        "curate": {
            "tasks": {
                "math": {"source": {"suite": "math", "answer_format": "plain", **POOL}, "eval_size": 2, "band": "[0, 1]"},
                "code": {"source": {"suite": "code", **POOL}, "eval_size": 2, "band": "[0, 1]"},
                "ifeval": {"source": {"suite": "ifeval", "num_problems": 6, "difficulty": "easy"}, "eval_size": 2,
                           "band": "[0, 1]"},
            },
            "pass_rate": {"sampling": {"n": 2, "max_tokens": 6}, "shard_size": 8},
            "engine": ENGINE,
            "sft": {"enabled": False}, "correction": {"enabled": False}, "synthetic": {"enabled": False},
            "hygiene": {"against_humaneval": False},
        },
        "sft": {
            "generated": {"worked": {"num_examples": 6, "difficulties": [0]}},
            "stages": [{"name": "s1", "datasets": {"worked": 1.0}, "max_length": 480, "num_steps": 1,
                        "lr": 1e-3, "batch_tokens": 960, "micro_batch_tokens": 480}],
            "eval": None,
        },
        "rl": {
            "datasets": {"math": "@recurate.rl_math", "code": "@recurate.rl_code", "ifeval": "@recurate.rl_ifeval"},
            "prompts_per_step": 3, "num_iterations": 1, "checkpoint_every": 0,
            "sampling": {"n": 2, "max_tokens": 6}, "engine": ENGINE, "eval": None, "algo": {"lr": lr},
        },
        "evaluate": {"suites": {}, "datasets": evals, "sampling": {"n": 2, "max_tokens": 6}, "engine": ENGINE},
        "registered_model": "tiny-reasoner",
    })


def test_bind_refs_replaces_values_and_keys() -> None:
    outputs = {"curate": {"sft_stage1": "file:///a"}, "recurate": {"rl_math": "file:///b"}}
    bound = bind_refs({"datasets": {"@curate.sft_stage1": 1.0}, "math": "@recurate.rl_math", "n": 3}, outputs)
    assert bound == {"datasets": {"file:///a": 1.0}, "math": "file:///b", "n": 3}
    with pytest.raises(ValueError, match="@sft.checkpoint"):
        bind_refs("@sft.checkpoint", outputs)


def test_sft_holds_out_every_set_the_evaluate_stage_scores(tmp_path) -> None:
    config = tiny_config(tmp_path, lr=1e-4)
    outputs = {"curate": {"eval_math": "file:///m", "eval_code": "file:///c", "eval_ifeval": "file:///i"}}
    assert _sft_held_out(config, outputs) == {
        "evaluate.math": "file:///m", "evaluate.code": "file:///c", "evaluate.ifeval": "file:///i"}
    data = config.model_dump(mode="json")
    data["evaluate"]["suites"] = {"humaneval": {"suite": "humaneval"}}
    with_suite = PipelineConfig.model_validate(data)
    assert _sft_held_out(with_suite, outputs)["evaluate.humaneval"]["suite"] == "humaneval"


def test_pipeline_caches_every_stage(tmp_path, monkeypatch) -> None:
    model_dir = tmp_path / "tiny"
    tiny_llama(seed=0).save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PASSBAND_EXPERIMENT", "test-pipeline")

    completed: list[str] = []  # flow name of every stage that computed and saved its summary
    save = passband.tasks.stages.cache.save_summary
    monkeypatch.setattr(passband.tasks.stages.cache, "save_summary",
                        lambda key, flow, *args: (completed.append(flow), save(key, flow, *args))[1])
    generate_calls: list[int] = []
    generate = HFEngine.generate
    monkeypatch.setattr(HFEngine, "generate",
                        lambda self, prompts, settings, prompt_keys=None: (
                            generate_calls.append(len(prompts)), generate(self, prompts, settings, prompt_keys))[1])

    with prefect_test_harness(server_startup_timeout=180):
        first = pipeline(tiny_config(model_dir, lr=1e-4))
        assert sorted(completed) == ["curate", "curate", "evaluate", "evaluate", "evaluate", "rl", "sft"]
        assert generate_calls
        # The Prefect UI shows the results: the final table (one row per eval set, values equal to
        # the summary's), each evaluation's pass@k table, each stage's outputs.
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            artifacts = client.read_artifacts()
        tables = [json.loads(a.data) if isinstance(a.data, str) else a.data for a in artifacts if a.type == "table"]
        (final,) = [t for t in tables if t and "rl_delta" in t[0]]
        assert sorted(row["eval_set"] for row in final) == ["code", "ifeval", "math"]
        assert all(row["rl"] == first.metrics[f"rl/{row['eval_set']}/pass@1"] for row in final)
        assert sum(1 for t in tables if t and "checkpoint" in t[0]) >= 3  # evaluate-base/sft/rl
        assert any(a.type == "markdown" and "curate outputs" in a.data for a in artifacts)

        completed.clear()
        generate_calls.clear()
        again = pipeline(tiny_config(model_dir, lr=1e-4))
        assert completed == [] and generate_calls == []  # no sampling, no training
        assert again.metrics | {"wall_s": 0} == first.metrics | {"wall_s": 0}

        changed = pipeline(tiny_config(model_dir, lr=2e-4))
        assert sorted(completed) == ["evaluate", "rl"]
        assert changed.outputs["sft.checkpoint"] == first.outputs["sft.checkpoint"]
        assert changed.outputs["rl.checkpoint"] != first.outputs["rl.checkpoint"]

    for label in ("base", "sft", "rl"):
        for task in ("math", "code", "ifeval"):
            assert 0.0 <= first.metrics[f"{label}/{task}/pass@1"] <= 1.0
    client = MlflowClient()
    versions = client.search_model_versions("name = 'tiny-reasoner'")
    assert len(versions) == 3
    tags = versions[0].tags
    assert {"checkpoint_uri", "config_hash", "code_version", "dataset.rl_math"} <= set(tags)
    # The champion alias names the newest registration, and the registered model loads and generates.
    import mlflow.transformers

    champion = client.get_model_version_by_alias("tiny-reasoner", "champion")
    assert champion.version == max(v.version for v in versions)
    generator = mlflow.transformers.load_model("models:/tiny-reasoner@champion")
    out = generator("What is 2 + 3?", max_new_tokens=4, do_sample=False)[0]["generated_text"]
    assert out.startswith("What is 2 + 3?") and len(out) > len("What is 2 + 3?")
    parent = client.get_run(first.mlflow_run_id)
    children = client.search_runs([parent.info.experiment_id],
                                  f"tags.mlflow.parentRunId = '{first.mlflow_run_id}'")
    assert sorted(run.info.run_name for run in children) == sorted(
        ["curate", "recurate", "sft", "rl", "evaluate-base", "evaluate-sft", "evaluate-rl"])
    # SFT and RL are compared with the base evaluation's own samples, not with a second draw
    by_name = {run.info.run_name: run.data.metrics for run in children}
    base_pass = {name: value for name, value in by_name["evaluate-base"].items()
                 if name.endswith("/pass_at_1") and name.count("/") == 1}
    assert base_pass
    for label in ("sft", "rl"):
        assert {name: by_name[f"evaluate-{label}"][f"baseline/{name}"] for name in base_pass} == base_pass
