"""The curate flow and its sharded pass-rate estimation, on the real SmolLM2 with the hf engine.

- shards: a run that crashes in its second shard leaves the first committed; the rerun samples
  only the missing shard; a third identical run samples nothing and returns the same numbers.
- flow: tiny pools of all three tasks; outputs carry the required columns, removed rows carry
  reasons, and a forced rerun makes zero engine generate calls with identical pass rates.
"""

import json

import pytest
from prefect.testing.utilities import prefect_test_harness

from passband.curation.catalog import VerifierSettings
from passband.curation.suites.source import load_problems
from passband.tasks.artifacts.datasets import read_table
from passband.tasks.sampling.engine import LazyEngine
from passband.tasks.sampling.keys import checkpoint_id
from passband.tasks.sampling.passrate import estimate_pass_rates
from passband.tasks.sampling.passrate_job import ShardSampling
from passband.training.engines import EngineConfig, SamplingConfig

SAMPLING = ShardSampling(sampling=SamplingConfig(n=2, temperature=1.0, max_tokens=12), top_k=1,
                         engine_kind="hf", engine_dtype="float32")
VERIFY = VerifierSettings()  # math: plain answers, the last number
ENGINE = EngineConfig(kind="hf", dtype="float32", seed=0)


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=120):  # the shared 2-core box can be slow to start it
        yield


def test_shards_resume_after_a_crash_and_are_reused(harness, smollm2_dir, tmp_path, monkeypatch):
    from passband.training.model_source import load_tokenizer

    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path))
    rows = load_problems(suite="math", num_problems=4, seed=3, answer_format="plain").rows
    tokenizer = load_tokenizer(smollm2_dir)
    checkpoint = checkpoint_id(str(smollm2_dir), str(smollm2_dir))

    def estimate(problem_rows, engine):
        return estimate_pass_rates(problem_rows, engine, tokenizer, checkpoint, SAMPLING, VERIFY, shard_size=2)

    # Run 1 crashes while verifying shard 2: the math verifier refuses the empty reference of its
    # second problem, whose 2 samples are the verifier's items 2 and 3.
    broken = [*rows[:3], {**rows[3], "reference": ""}]
    first_engine = LazyEngine(ENGINE, str(smollm2_dir))
    with pytest.raises(ValueError, match="reference 2: reference is empty"):
        estimate(broken, first_engine)
    assert first_engine.num_generate_calls == 2  # both shards were sampled, only the first committed
    first_engine.close()
    assert len(list((tmp_path / "artifacts" / "passrate").glob("*/manifest.json"))) == 1

    # Run 2 resumes: shard 1 is read back, only shard 2 is sampled.
    engine = LazyEngine(ENGINE, str(smollm2_dir))
    resumed = estimate(rows, engine)
    assert (resumed.num_shards_reused, resumed.num_shards_computed, resumed.engine_calls) == (1, 1, 1)
    engine.close()

    # Run 3 is identical: no engine is even opened, and the numbers are the stored ones.
    idle = LazyEngine(ENGINE, str(smollm2_dir))
    repeated = estimate(rows, idle)
    assert (repeated.num_shards_reused, repeated.engine_calls, idle.engine) == (2, 0, None)
    assert repeated.summaries == resumed.summaries
    assert repeated.samples == resumed.samples

    # The summaries agree with the samples counted by hand: pass_rate = passes / n per problem.
    assert [s["problem_id"] for s in resumed.summaries] == [row["id"] for row in rows]
    for summary in resumed.summaries:
        statuses = [s["status"] for s in resumed.samples if s["problem_id"] == summary["problem_id"]]
        assert len(statuses) == 2
        assert summary["pass_rate"] == statuses.count("pass") / 2
        assert summary["num_unparsable"] == statuses.count("unparsable")

    # Another sampling setting is another shard: nothing is reused.
    other = estimate_pass_rates(rows[:2], LazyEngine(ENGINE, str(smollm2_dir)), tokenizer, checkpoint,
                                SAMPLING.model_copy(update={"sampling": SamplingConfig(n=2, max_tokens=8)}), VERIFY,
                                shard_size=2)
    assert (other.num_shards_reused, other.engine_calls) == (0, 1)


def _tiny_config(model_dir, **overrides):
    from passband.flows.curate.flow import CurateConfig

    pool = {"num_problems": 5, "seed": 1}
    return CurateConfig.model_validate({
        "model": str(model_dir),
        "tasks": {
            "math": {"source": {"suite": "math", "answer_format": "plain", **pool}, "eval_size": 2},
            "code": {"source": {"suite": "code", **pool}, "eval_size": 2},
            "ifeval": {"source": {"suite": "ifeval", "difficulty": "easy", **pool}, "eval_size": 2},
        },
        "engine": {"kind": "hf"},
        "pass_rate": {"sampling": {"n": 2, "max_tokens": 48}, "shard_size": 3},
        "correction": {"max_problems": 1, "sampling": {"n": 2, "max_tokens": 48}},
        "synthetic": {"num_queries": 1, "sampling": {"n": 2, "max_tokens": 48}},
        **overrides,
    })


@pytest.fixture(scope="module")
def flow_runs(harness, smollm2_dir, tmp_path_factory):
    from passband.flows.curate.flow import curate

    home = tmp_path_factory.mktemp("curate-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PASSBAND_HOME", str(home))
        first = curate(_tiny_config(smollm2_dir))
        forced = curate(_tiny_config(smollm2_dir, force=True))
        cached = curate(_tiny_config(smollm2_dir))
        yield home, first, forced, cached


@pytest.mark.slow  # three flow runs of the real model: minutes on a shared 2-core box
def test_flow_outputs_have_required_columns(flow_runs):
    home, first, _, _ = flow_runs
    assert set(first.outputs) == {"eval_math", "eval_code", "eval_ifeval", "rl_math", "rl_code", "rl_ifeval",
                                  "sft_stage1", "sft_stage2", "removed"}
    problem_columns = {"id", "task", "subdomain", "prompt", "reference", "source"}
    rl_columns = {"pass_rate", "band", "pass_count", "num_samples", "checkpoint", "generator"}
    for task in ("math", "code", "ifeval"):
        eval_table = read_table.fn(first.outputs[f"eval_{task}"])
        assert eval_table.num_rows == 2 and problem_columns <= set(eval_table.column_names)
        rl_table = read_table.fn(first.outputs[f"rl_{task}"])
        assert (problem_columns | rl_columns) <= set(rl_table.column_names)
        for row in rl_table.to_pylist():
            # Kept rows lie in the recipe's band: (0, 0.8] for math/code, (0, 0.4] for ifeval.
            upper = 0.4 if task == "ifeval" else 0.8
            assert 0 < row["pass_rate"] <= upper
            assert row["pass_rate"] == row["pass_count"] / 2
            assert row["band"] == ("hard" if row["pass_rate"] <= 0.3 else "medium")
        # Eval ids never reach the RL set.
        assert not set(eval_table["id"].to_pylist()) & set(rl_table["id"].to_pylist())
    sft_columns = {"prompt", "completion", "system", "task", "subdomain", "pass_rate", "band", "source",
                   "generator", "checkpoint", "teacher", "origin", "npass", "verdict_consistency",
                   "verdict_execution", "verdict_math", "verdict_structure", "perplexity"}
    for stage in ("sft_stage1", "sft_stage2"):
        table = read_table.fn(first.outputs[stage])
        assert sft_columns <= set(table.column_names)
        for row in table.to_pylist():
            assert row["status"] == "pass" and row["completion"]
            assert row["perplexity"] > 1.0
            applicable = {"math": {"consistency", "math", "structure"},
                          "code": {"consistency", "execution", "structure"},
                          "ifeval": {"consistency", "structure"}}[row["task"]]
            for check in ("consistency", "execution", "math", "structure"):
                assert row[f"verdict_{check}"] == ("pass" if check in applicable else "not_applicable")
    num_queries = sum(first.metrics.get(f"synthetic/{task}/queries", 0) for task in ("math", "code", "ifeval"))
    assert first.metrics["synthetic/generated"] == 2 * num_queries  # 2 teacher responses per query
    assert first.metrics["synthetic/passed_verification"] <= first.metrics["synthetic/generated"]


@pytest.mark.slow  # three flow runs of the real model: minutes on a shared 2-core box
def test_removed_rows_carry_reasons(flow_runs):
    home, first, _, _ = flow_runs
    removed = read_table.fn(first.outputs["removed"]).to_pylist()
    assert removed, "tiny pools at n=2 always lose some rows (p=0 or p=1 outside every band)"
    for row in removed:
        assert row["removed_reason"] and row["stage"] and row["reason_kind"]
        assert json.loads(row["row_json"])["removed_reason"] == row["removed_reason"]
    band_removed = [row for row in removed if row["stage"] == "band"]
    for row in band_removed:
        assert row["removed_reason"].startswith("outside_band:pass_rate=")
    # Every training problem is in its RL set or removed at the band or balance step.
    for task in ("math", "code", "ifeval"):
        rl_ids = set(read_table.fn(first.outputs[f"rl_{task}"])["id"].to_pylist())
        dropped = {row["id"] for row in removed if row["task"] == task and row["stage"] in ("hygiene", "band", "balance")}
        assert len(rl_ids | dropped) == 3 and not rl_ids & dropped


@pytest.mark.slow  # three flow runs of the real model: minutes on a shared 2-core box
def test_forced_rerun_samples_nothing_and_cached_rerun_returns_the_summary(flow_runs):
    home, first, forced, cached = flow_runs
    assert first.metrics["engine_calls"] > 0
    assert forced.metrics["engine_calls"] == 0
    assert forced.metrics["shards_computed"] == 0 and forced.metrics["shards_reused"] > 0
    for task in ("math", "code", "ifeval"):
        before = read_table.fn(first.outputs[f"rl_{task}"]).to_pylist()
        after = read_table.fn(forced.outputs[f"rl_{task}"]).to_pylist()
        assert [(r["id"], r["pass_rate"]) for r in before] == [(r["id"], r["pass_rate"]) for r in after]
        assert first.metrics[f"{task}/pass_rate_mean"] == forced.metrics[f"{task}/pass_rate_mean"]
    assert cached.outputs == forced.outputs  # the stage cache returned the forced run's summary


def test_a_run_whose_every_rl_set_is_empty_ends_partial_and_says_why(harness, smollm2_dir, tmp_path, monkeypatch):
    """One sample per problem makes every pass rate 0 or 1, so the open band (0, 1) holds nothing."""
    from passband.flows.curate.flow import curate

    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    pool = {"num_problems": 4, "seed": 1}
    config = _tiny_config(smollm2_dir, tasks={
        "math": {"source": {"suite": "math", "answer_format": "plain", **pool}, "eval_size": 1, "band": "(0, 1)"},
        "ifeval": {"source": {"suite": "ifeval", "difficulty": "easy", **pool}, "eval_size": 1, "band": "(0, 1)"},
    }, pass_rate={"sampling": {"n": 1, "max_tokens": 8}, "shard_size": 3}, sft={"enabled": False})
    summary = curate(config)
    assert summary.status == "partial"
    assert summary.message.startswith("every RL set is empty (rl_math, rl_ifeval)")
    for task in ("math", "ifeval"):
        assert summary.metrics[f"kept/rl_{task}"] == 0
        assert read_table(summary.outputs[f"rl_{task}"]).num_rows == 0
    # the 3 training problems of each task all left at the band: none at balance
    assert summary.metrics["removed/band/outside_band"] == 6
    assert not any(name.startswith("removed/balance") for name in summary.metrics)
