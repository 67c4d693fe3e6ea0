"""What a grading run's verifiers wrote, checked against the defects the triples record.

    .venv/bin/python scripts/grading_defects.py [--home .passband] [--set proof_grading]

Reads the newest `evaluate-base`, `evaluate-sft` and `evaluate-rl` runs of PASSBAND_HOME's MLflow
store (a `passband run pipeline --preset grading`), their held-out samples and the eval set's
references, and prints per checkpoint, over the analyses whose score could be read: how many name
an issue at a step where no defect was injected (what the meta-check exists to catch: a complete
solution given an issue, or a defective one given an issue elsewhere), how many name the defect's
own step, the scores given, and the (label, score) counts; then the mean |s' - s| a verifier that
always answers 0.5 would have on the same labels, the floor a hedging verifier reaches.
"""

from __future__ import annotations

import argparse
import os
from collections import Counter
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, default=Path(".passband"))
    parser.add_argument("--set", dest="eval_set", default="proof_grading", help="the eval set of grading triples")
    args = parser.parse_args()
    os.environ["PASSBAND_HOME"] = str(args.home.resolve())
    from passband.stack.local import prepare_environment

    prepare_environment()
    from mlflow import MlflowClient

    from passband.curation.grading.parse import issue_steps, parse_verdict
    from passband.curation.suites.rows import table_to_rows
    from passband.tasks.artifacts.datasets import read_table
    from passband.tasks.artifacts.store import open_store
    from passband.tasks.reporting import tracking

    tracking.configure()
    client = MlflowClient()
    experiments = [e.experiment_id for e in client.search_experiments()]
    labels = None
    for checkpoint in ("base", "sft", "rl"):
        run = client.search_runs(experiments, f"attributes.run_name = 'evaluate-{checkpoint}'",
                                 order_by=["attributes.start_time DESC"], max_results=1)[0]
        if labels is None:
            eval_rows = table_to_rows(read_table(run.data.params[f"datasets.{args.eval_set}"]))
            labels = {row["id"]: row["reference"] for row in eval_rows}
        samples = read_table(open_store().uri(f"evaluations/{run.info.run_id}/samples")).to_pylist()
        rows = [r for r in samples if r["checkpoint"] == "model" and r["eval_set"] == args.eval_set]
        read = invented = found = defective = 0
        scores, pairs = Counter(), Counter()
        for row in rows:
            verdict = parse_verdict(row["text"])
            if verdict.score is None:
                continue
            read += 1
            reference = labels[row["problem_id"]]
            named = set(issue_steps(verdict.analysis))
            step = None if reference["defect"] == "complete" else reference["defect_step"]
            invented += bool(named - {step})
            defective += step is not None
            found += step in named
            scores[float(verdict.score)] += 1
            pairs[(reference["score"], float(verdict.score))] += 1
        print(f"{checkpoint}: {len(rows)} analyses, {read} read; an issue named where none was injected: {invented} "
              f"({invented / max(read, 1):.1%}); the defect's step named: {found} of {defective} defective; "
              f"scores given {dict(sorted(scores.items()))}")
        print(f"    (label, score): {dict(sorted(pairs.items()))}")
    hedge = sum(abs(0.5 - reference["score"]) for reference in labels.values()) / len(labels)
    print(f"always 0.5: mean |s' - s| {hedge:.3f} on these {len(labels)} labels")


if __name__ == "__main__":
    main()
