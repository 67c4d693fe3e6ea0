"""Math with the Python tool, end to end (issue 55): the math-tool pipeline, then every checkpoint
once more without the tool on the same held-out problems.

    .venv/bin/python scripts/tool_pipeline.py [--home DIR]

Runs `pipeline --preset math-tool` in PASSBAND_HOME (default: a fresh temporary folder; a rerun in
the same --home reuses every stage that completed, through the stage cache), which curates by tool episodes, SFTs on teacher tool
traces, runs RL on the tool task and evaluates base, SFT and RL as tool episodes on the
held-out split. Then the evaluate flow scores the same three checkpoints on the same split, with
the same sampling, single-turn (`math_tool: null`: no tool offered, the math suite's own prompt).
Prints, per checkpoint: pass@1 with the tool and without it (95% intervals over problems), their
paired difference (per problem, the mean over its samples with the tool less without: paired t
interval), and per episode the mean tool calls, the mean model turns and the share of episodes
that ran the tool at least once.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path


def _model_rows(samples_uri: str) -> list[dict]:
    """An evaluation's samples of its `model` (with a baseline, the table holds the baseline's beside them)."""
    from passband.tasks.artifacts.datasets import read_table

    return [row for row in read_table(samples_uri).to_pylist() if row["checkpoint"] == "model"]


def _per_problem(rows: list[dict]) -> dict[str, float]:
    """Problem id -> its mean score over its samples."""
    scores: dict[str, list[float]] = {}
    for row in rows:
        scores.setdefault(row["problem_id"], []).append(float(row["score"] or 0.0))
    return {problem: sum(values) / len(values) for problem, values in scores.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, default=None, help="PASSBAND_HOME (default: a fresh temporary folder)")
    args = parser.parse_args()
    os.environ["PASSBAND_HOME"] = str(args.home or tempfile.mkdtemp(prefix="passband-tool-pipeline-"))

    import numpy as np
    from passband.flows.config import resolve_config
    from passband.flows.evaluate.flow import EvaluateConfig, evaluate
    from passband.flows.pipeline.flow import PipelineConfig, evaluate_config, pipeline
    from passband.training.evaluation.intervals import difference_interval

    start = time.perf_counter()
    config = resolve_config(PipelineConfig, "pipeline", "math-tool", None, [])
    summary = pipeline(config)
    pipeline_run, pipeline_s = summary.mlflow_run_id, time.perf_counter() - start
    outputs: dict[str, dict[str, str]] = {}
    for name, uri in summary.outputs.items():
        if "." in name:
            stage, output = name.split(".", 1)
            outputs.setdefault(stage, {})[output] = uri
    split = summary.outputs["curate.eval_math"]
    checkpoints = {"base": config.model, "sft": summary.outputs["sft.checkpoint"], "rl": summary.outputs["rl.checkpoint"]}

    print(f"\npipeline run {pipeline_run} ({pipeline_s / 60:.1f} min); held-out split {split}\n")
    print("| checkpoint | pass@1 with the tool | pass@1 without | with - without (paired) | tool calls / episode "
          "| turns / episode | episodes that ran the tool |")
    print("|---|---|---|---|---|---|---|")
    tool_runs = {}
    for label, checkpoint in checkpoints.items():
        # the pipeline's own evaluation of the checkpoint, served from the stage cache
        base_samples = tool_runs["base"].outputs["samples"] if tool_runs else None
        tool_runs[label] = evaluate(evaluate_config(config, outputs, label, checkpoint, base_samples),
                                    run_name=f"evaluate-{label}")
        tool_rows = _model_rows(tool_runs[label].outputs["samples"])
        plain_start = time.perf_counter()
        plain = evaluate(EvaluateConfig.model_validate(
            {**config.evaluate.model_dump(mode="json"), "model": checkpoint, "math_tool": None, "baseline": None,
             "baseline_samples": None, "datasets": {"math": split}}), run_name=f"evaluate-{label}-no-tool")
        plain_rows = _model_rows(plain.outputs["samples"])
        with_tool, without = _per_problem(tool_rows), _per_problem(plain_rows)
        problems = sorted(with_tool)
        difference, low, high = difference_interval(np.array([with_tool[p] - without[p] for p in problems]))
        metrics = tool_runs[label].metrics
        ran = sum(row["num_tool_calls"] > 0 for row in tool_rows) / len(tool_rows)
        print(f"| {label} | {metrics['math/pass@1']:.3f} [{metrics['math/pass@1_ci_low']:.3f}, "
              f"{metrics['math/pass@1_ci_high']:.3f}] | {plain.metrics['math/pass@1']:.3f} "
              f"[{plain.metrics['math/pass@1_ci_low']:.3f}, {plain.metrics['math/pass@1_ci_high']:.3f}] "
              f"| {difference:+.3f} [{low:+.3f}, {high:+.3f}] | {metrics['math/mean_tool_calls']:.2f} "
              f"| {metrics['math/mean_turns']:.2f} | {ran:.2f} |")
        print(f"  ({len(problems)} problems x {len(tool_rows) // len(problems)} samples; the evaluation without the "
              f"tool took {time.perf_counter() - plain_start:.0f} s)")


if __name__ == "__main__":
    main()
