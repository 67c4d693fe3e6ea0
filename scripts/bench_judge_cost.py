"""What a model-graded reward costs in RL, against the program it replaces, on the same task.

    .venv/bin/python scripts/bench_judge_cost.py [--judge MODEL] [--iterations 3] [--judge-n 2] [--judge-tokens 128]

Runs the RL flow twice in one fresh PASSBAND_HOME with the same seeds, one after the other: math
(one-digit arithmetic, plain answers, the demo's RL pool kind) rewarded by the math verifier, then
rewarded by a judge model (`reward.judges.math`: the rubric of docs/recipe.md section 9, --judge-n
analyses per rollout, their mean score). --judge is the judge's checkpoint: the shipped
smollm2-135m-instruct by default, or a trained verifier (the `grading` pipeline preset's SFT or RL
checkpoint URI). Prints per run: seconds per RL iteration (mean over iterations), judge samples per
rollout, the batch reward; the judged/programmatic ratio of seconds per iteration; and how often the
judge's verdict (pass: every read analysis scored 1) agreed with the math verifier's on the judged
run's rollouts, recomputed here from the judge's logged texts, with the judge's mean score on the
rollouts the math verifier passes and on those it fails (a judge that tells them apart scores the
first higher; one that never passes anything agrees on every failed rollout and tells nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--judge", default="smollm2-135m-instruct")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--judge-n", type=int, default=2)
    parser.add_argument("--judge-tokens", type=int, default=128)
    args = parser.parse_args()
    os.environ["PASSBAND_HOME"] = tempfile.mkdtemp(prefix="passband-judge-cost-")
    from passband.stack.local import prepare_environment

    prepare_environment()
    from mlflow import MlflowClient

    from passband.curation.suites.math_suite import extraction_rule_for
    from passband.curation.verifiers.math import verify_math
    from passband.flows.common_config import EngineConfig, ProblemSource, SamplingConfig
    from passband.flows.rl.flow import RewardConfig, RLConfig, rl
    from passband.tasks.reporting import tracking
    from passband.training.judge.config import JudgeConfig
    from passband.training.rl.config import RLAlgoConfig

    source = ProblemSource(suite="math", num_problems=48, difficulty=0, subdomains=["arithmetic"], answer_format="plain")
    judge = JudgeConfig(model=args.judge, engine=EngineConfig(in_process=False),
                        sampling=SamplingConfig(n=args.judge_n, temperature=1.0, max_tokens=args.judge_tokens))
    results = {}
    for label, judges in (("program", {}), ("judge", {"math": judge})):
        config = RLConfig(datasets={"math": source}, prompts_per_step=4, num_iterations=args.iterations, seed=0,
                          sampling=SamplingConfig(n=8, max_tokens=64), algo=RLAlgoConfig(lr=1e-5, micro_batch_size=8),
                          checkpoint_every=args.iterations, eval=None, reward=RewardConfig(judges=judges))
        summary = rl(config)
        tracking.configure()
        client = MlflowClient()
        seconds = [m.value for m in client.get_metric_history(summary.mlflow_run_id, "seconds/iteration")]
        rollouts = config.prompts_per_step * config.sampling.n
        judge_samples = [m.value for m in client.get_metric_history(summary.mlflow_run_id, "math/num_judge_samples")]
        results[label] = {"s_per_iteration": sum(seconds) / len(seconds), "reward": summary.metrics["math/reward"],
                          "judge_samples_per_rollout": sum(judge_samples) / (rollouts * len(seconds)) if judge_samples else 0.0}
        if judges:
            references = {row["id"]: row["reference"] for row in source.load().rows}
            agree = total = read = 0
            mean_score: dict[bool, list[float]] = {True: [], False: []}  # by the math verifier's verdict
            with tempfile.TemporaryDirectory() as tmp:
                for artifact in client.list_artifacts(summary.mlflow_run_id, "judge"):
                    path = client.download_artifacts(summary.mlflow_run_id, artifact.path, tmp)
                    records = [json.loads(line) for line in Path(path).read_text().splitlines()]
                    truth = verify_math([r["text"] for r in records], [references[r["prompt_id"]] for r in records],
                                        rule=extraction_rule_for("plain"))
                    for record, result in zip(records, truth):
                        agree += (record["status"] == "pass") == (result.status == "pass")
                        total += 1
                        scores = [s for s in record["judge_scores"] if s is not None]
                        read += bool(scores)
                        if scores:
                            mean_score[result.status == "pass"].append(sum(scores) / len(scores))
            results[label] |= {"agreement_with_math_verifier": agree / total, "read": read / total,
                               "score_if_right": _mean(mean_score[True]), "score_if_wrong": _mean(mean_score[False])}
    program, judged = results["program"], results["judge"]
    print("\n| reward from | seconds / RL iteration | judge samples / rollout | batch reward |")
    print("|---|---|---|---|")
    for label, r in results.items():
        print(f"| {label} | {r['s_per_iteration']:.1f} | {r['judge_samples_per_rollout']:.2f} | {r['reward']:.3f} |")
    print(f"\njudged / programmatic seconds per iteration: {judged['s_per_iteration'] / program['s_per_iteration']:.2f}x; "
          f"the judge's verdict agreed with the math verifier on {judged['agreement_with_math_verifier']:.1%} "
          f"of its rollouts (judge {args.judge}, {args.judge_n} analyses of <= {args.judge_tokens} tokens each); "
          f"rollouts with a read analysis {judged['read']:.1%}; the judge's mean score on rollouts the math verifier "
          f"passes {judged['score_if_right']:.3f}, fails {judged['score_if_wrong']:.3f}")


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


if __name__ == "__main__":
    main()
