"""A task of the user's through the whole pipeline (issue 54, must show): docs/your-reward.md's
package made in a temp folder and installed on sys.path with its `passband.tasks` entry point
(tests/user_package.py), whose task `capitals` runs curate (pass-rate bands, SFT selection, the
correction set) -> SFT on the selected traces -> re-curate -> RL -> evaluate base, SFT and RL, then
`passband verify --task capitals` on the evaluation's samples. The policy is test_flow_rl's tiny
digit model (it answers "1" or "2", about half each); the reference capital is "1", so the page's
rule (the last word against the capital) passes about half of the samples and every number below
is checked against that rule applied by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from prefect.testing.utilities import prefect_test_harness

import passband.tasks.stages.cache
from passband.cli.main import main
from passband.curation.catalog.reward_function import USER_DEFAULT_BAND
from passband.flows.pipeline.flow import PipelineConfig, pipeline
from passband.tasks.artifacts.datasets import read_table
from test_flow_rl import EVAL_PROMPTS, TRAIN_PROMPTS, _digit_model
from user_package import forget_user_code, install_user_package

pytestmark = pytest.mark.slow  # curate twice, SFT, RL and three evaluations of the tiny model: minutes here

ENGINE = {"kind": "hf"}
SAMPLING = {"n": 4, "max_tokens": 4}


def passes(completion: str, capital: str = "1") -> bool:
    """The page's Capitals rule by hand: the last word, a final period dropped, case ignored."""
    words = completion.split()
    return bool(words) and words[-1].rstrip(".").lower() == capital.lower()


def user_pipeline(tmp: Path) -> PipelineConfig:
    pool = tmp / "capitals.jsonl"
    pool.write_text("".join(json.dumps({"id": p, "task": "capitals", "subdomain": "digits", "prompt": p,
                                        "reference": {"capital": "1"}, "source": "test"}) + "\n"
                            for p in TRAIN_PROMPTS + EVAL_PROMPTS))
    return PipelineConfig.model_validate({
        "model": str(tmp / "digits"),
        "curate": {
            # no band: the task declares none, so curate keeps USER_DEFAULT_BAND for RL
            "tasks": {"capitals": {"source": {"path": str(pool), "task": "capitals", "num_problems": "all"},
                                   "eval_size": 2}},
            "pass_rate": {"sampling": SAMPLING, "shard_size": 8},
            "correction": {"max_problems": 2, "sampling": {"n": 2, "max_tokens": 4}},
            "sft": {"perplexity": False},
            "hygiene": {"against_humaneval": False, "near_dup_ngram": 1},
            "engine": ENGINE,
        },
        "sft": {
            "stages": [{"name": "traces", "datasets": {"@curate.sft_stage1": 1.0, "@curate.sft_stage2": 1.0},
                        "max_length": 64, "num_steps": 1, "lr": 1e-3, "batch_tokens": 128, "micro_batch_tokens": 64}],
            "eval": None,
        },
        "rl": {"datasets": {"capitals": "@recurate.rl_capitals"}, "prompts_per_step": 2, "num_iterations": 1,
               "checkpoint_every": 0, "sampling": SAMPLING, "engine": ENGINE, "eval": None, "algo": {"lr": 1e-2}},
        "evaluate": {"suites": {}, "datasets": {"capitals": "@curate.eval_capitals"},
                     "sampling": {"n": 2, "max_tokens": 4}, "engine": ENGINE, "k_curve": None},
        "registered_model": "capitals-reasoner",
    })


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    install_user_package(tmp_path / "site", monkeypatch)
    _digit_model(tmp_path / "digits")
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PASSBAND_EXPERIMENT", "test-user-task")
    yield tmp_path
    forget_user_code()


def test_an_entry_point_task_runs_curate_sft_rl_and_evaluate(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evaluations: list[dict] = []  # the evaluate stages' summaries, base, SFT then RL
    save = passband.tasks.stages.cache.save_summary
    monkeypatch.setattr(passband.tasks.stages.cache, "save_summary", lambda key, flow, resolved, summary: (
        evaluations.append(summary) if flow == "evaluate" else None, save(key, flow, resolved, summary))[1])
    with prefect_test_harness(server_startup_timeout=300):  # the shared 2-core box can be slow to start it
        summary = pipeline(user_pipeline(home))
    outputs = summary.outputs

    # curate: the held-out split first, the rest labelled by pass rate, the task's default band for RL
    held_out = read_table(outputs["curate.eval_capitals"]).to_pylist()
    assert len(held_out) == 2 and {row["task"] for row in held_out} == {"capitals"}
    for stage in ("curate", "recurate"):
        rl_rows = read_table(outputs[f"{stage}.rl_capitals"]).to_pylist()
        assert rl_rows and {row["task"] for row in rl_rows} == {"capitals"}
        assert not {row["id"] for row in rl_rows} & {row["id"] for row in held_out}
        for row in rl_rows:
            assert USER_DEFAULT_BAND.alpha < row["pass_rate"] <= USER_DEFAULT_BAND.beta, row
            assert row["pass_rate"] == row["pass_count"] / SAMPLING["n"]

    # SFT selection: only passed traces of problems solved sometimes (0 < npass < n), by the page's rule
    traces = [row for name in ("sft_stage1", "sft_stage2") for row in read_table(outputs[f"curate.{name}"]).to_pylist()]
    rollouts = [row for row in traces if row["origin"] == "rollout"]
    assert rollouts, "the tiny model solves about half: some problems must be solved sometimes"
    for row in traces:
        assert row["task"] == "capitals" and passes(row["completion"]), row
        assert json.loads(row["reference"]) == {"capital": "1"}
    for row in rollouts:
        assert 0 < row["npass"] < SAMPLING["n"], row

    # SFT, RL and the three evaluations ran on the task; pass@1 is the by-hand rule's mean over the samples
    assert outputs["sft.checkpoint"] and outputs["rl.checkpoint"]
    for label in ("base", "sft", "rl"):
        assert 0.0 <= summary.metrics[f"{label}/capitals/pass@1"] <= 1.0
    assert len(evaluations) == 3
    samples = [row for row in read_table(evaluations[-1]["outputs"]["samples"]).to_pylist()
               if row["checkpoint"] == "model"]  # the RL checkpoint's own samples, not the baseline's
    assert len(samples) == 2 * 2 and all(row["eval_set"] == "capitals" for row in samples)
    for row in samples:
        assert (row["status"] == "pass") == passes(row["text"]), row
    by_hand = [float(passes(row["text"])) for row in samples]
    assert summary.metrics["rl/capitals/pass@1"] == pytest.approx(sum(by_hand) / len(by_hand))

    # passband verify scores the same samples with the entry-point task
    answers = home / "answers.jsonl"
    answers.write_text("".join(json.dumps({"id": f"s{i}", "task": "capitals", "completion": row["text"],
                                           "reference": {"capital": "1"}}) + "\n" for i, row in enumerate(samples)))
    result = CliRunner().invoke(main, ["verify", "--task", "capitals", str(answers), "-o", str(home / "scored.jsonl")])
    assert result.exit_code == 0, result.output
    scored = [json.loads(line) for line in (home / "scored.jsonl").read_text().splitlines()]
    assert [row["status"] == "pass" for row in scored] == [passes(row["text"]) for row in samples]
