"""The RL demo trained in fp32 and in bf16 autocast, side by side: reward and vllm_kl per iteration.

Issue 16 asks that bf16 autocast (fp32 master weights and optimizer state) trains no worse than
fp32 on the RL demo: same reward curve, no larger training-inference mismatch (the engine samples
in bf16, so a bf16 trainer may even sit closer to it). This script runs `passband run rl --preset
demo` once per precision, each in a fresh PASSBAND_HOME (so nothing is reused between them), with
everything else equal (seeds included), reads each run's per-iteration metrics from its MLflow
store and prints one table: reward and vllm_kl per iteration for both, their means, and the
held-out pass@1 before and after.

    .venv/bin/python scripts/compare_rl_precision.py                  # the rl demo preset
    .venv/bin/python scripts/compare_rl_precision.py --set num_iterations=4

The two runs take the same samples at iteration 1 (same weights, same engine seed path); from
iteration 2 on they sample from differently rounded weights, so their curves are two draws of the
same process, not one curve twice: read the means and the spread, not single iterations.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRECISIONS = ("fp32", "bf16_autocast")
SERIES = ("reward", "vllm_kl")


def run_rl(precision: str, home: Path, extra: list[str]) -> dict:
    """One `passband run rl` in its own home; returns its summary JSON line."""
    command = [str(ROOT / ".venv/bin/passband"), "run", "rl", "--preset", "demo",
               "--set", f"algo.precision={precision}"] + [arg for value in extra for arg in ("--set", value)]
    env = dict(os.environ, PASSBAND_HOME=str(home))
    done = subprocess.run(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def histories(home: Path, run_id: str) -> dict[str, list[float]]:
    """Per-iteration values of every metric whose name ends with one of SERIES, in step order."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{home}/mlflow.db")
    names = [name for name in client.get_run(run_id).data.metrics if name.split("/")[-1] in SERIES]
    return {name: [m.value for m in sorted(client.get_metric_history(run_id, name), key=lambda m: m.step)]
            for name in sorted(names)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", action="append", default=[], help="extra rl setting for both runs, KEY=VALUE")
    parser.add_argument("--workdir", type=Path, default=None, help="where the two homes go (default: a temp dir)")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="rl-precision-"))
    results = {}
    for precision in PRECISIONS:
        home = workdir / precision
        summary = run_rl(precision, home, args.set)
        results[precision] = (summary, histories(home, summary["mlflow_run_id"]))
        print(f"{precision}: run {summary['mlflow_run_id']} in {home}", file=sys.stderr)

    names = sorted(set.intersection(*(set(h) for _, h in results.values())))
    for name in names:
        series = {p: results[p][1][name] for p in PRECISIONS}
        print(f"\n{name} per iteration")
        print("  iter  " + "  ".join(f"{p:>14}" for p in PRECISIONS))
        for step in range(max(len(s) for s in series.values())):
            print(f"  {step + 1:>4}  " + "  ".join(
                f"{series[p][step]:>14.5f}" if step < len(series[p]) else " " * 14 for p in PRECISIONS))
        print("  mean  " + "  ".join(f"{statistics.fmean(series[p]):>14.5f}" for p in PRECISIONS))
    print("\nheld-out pass@1 (the preset's eval sets)")
    for precision in PRECISIONS:
        metrics = results[precision][0]["metrics"]
        shown = {k: round(v, 3) for k, v in sorted(metrics.items())
                 if k.startswith(("before/", "after/")) and k.endswith("pass@1")}
        print(f"  {precision}: {shown}")


if __name__ == "__main__":
    main()
