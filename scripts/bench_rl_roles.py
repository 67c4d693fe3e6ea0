"""RL's three roles side by side (issue 29): the demo's RL stage in one process, then with its
rollouts on a Prefect task worker at k=0 and at k=1, one after the other on this box.

    .venv/bin/python scripts/bench_rl_roles.py [--iterations 3] [--gpus 1 2 4 8]

Each run is `rl --preset demo` with `num_iterations`, no held-out evaluation and no checkpoint
but the last, in one fresh PASSBAND_HOME with a temporary Prefect server (task workers need one)
and one task worker started before the worker runs (its engine start is paid once, in the first
of them, as a long-lived worker pays it). Prints per run: seconds per iteration after the first
(the first holds the engine start), the phases of an iteration (rollout, scoring, training,
weight sync or publish, the trainer's wait for rollouts), the rollouts' overlap share, the flow
process's peak RSS (`memory/*_peak_gb`) and the worker's (VmHWM of its process: the largest it
held so far). On 2 cores the flow's trainer and the worker's engine share the cores, so
disaggregating cannot win here; the last table is a PROJECTION, not a measurement: from the
in-process run's measured phase times, the seconds per iteration with the trainer on its own
device and the rollouts spread over N engines, synchronous (k=0: rollouts/N + scoring + training
+ sync) and one update ahead (k=1: the longer of the two sides, each as measured), assuming
rollouts scale linearly with engines and the training side does not change.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

PHASES = ("rollout", "scoring", "training", "weight_sync", "rollout_wait")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2, 4, 8], help="rollout engines to project for")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="passband-roles-"))
    os.environ["PASSBAND_HOME"] = str(home)
    os.environ["PREFECT_LOCAL_STORAGE_PATH"] = str(home / "prefect-storage")  # the flow's and the worker's
    from passband.stack.local import prepare_environment

    prepare_environment()  # before Prefect is imported: it reads its settings once

    from mlflow import MlflowClient
    from prefect.testing.utilities import prefect_test_harness

    from passband.flows.config import resolve_config
    from passband.flows.rl.flow import RLConfig, rl
    from passband.stack.local import stop_services
    from passband.stack.task_workers import start_task_workers
    from passband.tasks.reporting import tracking

    runs = [("in process, k=0", []), ("1 rollout worker, k=0", ["rollout.workers=task_workers"]),
            ("1 rollout worker, k=1", ["rollout.workers=task_workers", "rollout.max_off_policy_steps=1"])]
    rows = []
    with prefect_test_harness(server_startup_timeout=300):
        import prefect.settings

        try:
            for label, overrides in runs:
                if overrides and not (home / "run" / "task-worker-0.pid").exists():
                    start_task_workers(1, prefect.settings.PREFECT_API_URL.value())
                config = resolve_config(RLConfig, "rl", "demo", None, [
                    f"num_iterations={args.iterations}", "eval=null", f"checkpoint_every={args.iterations}",
                    *overrides])
                start = time.perf_counter()
                summary = rl(config)
                wall_s = time.perf_counter() - start
                tracking.configure()
                client = MlflowClient()

                def history(name: str) -> list[float]:
                    metrics = client.get_metric_history(summary.mlflow_run_id, name)
                    return [m.value for m in sorted(metrics, key=lambda m: m.step)]

                def after_first(name: str) -> float:
                    values = history(name)[1:] or history(name)
                    return sum(values) / len(values)

                worker_gb = _worker_peak_gb(home) if overrides else 0.0
                peaks = {phase: max(history(f"memory/{phase}_peak_gb"), default=0.0)
                         for phase in ("rollout", "training", "weight_sync")}
                rows.append((label, wall_s, after_first("seconds/iteration"),
                             {phase: after_first(f"seconds/{phase}") for phase in PHASES},
                             after_first("rollout/overlap_share"), max(peaks.values()), worker_gb))
                print(f"{label}: {wall_s:.0f} s", flush=True)
        finally:
            stop_services()

    print(f"\nMeasured, `rl --preset demo`, {args.iterations} iterations (means over iterations 2..; s):\n")
    print("| run | wall s | s/iteration | rollout | scoring | training | sync/publish | trainer waits "
          "| overlap share | flow peak RSS GB | worker peak RSS GB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, wall_s, per_iteration, phases, overlap, flow_gb, worker_gb in rows:
        print(f"| {label} | {wall_s:.0f} | {per_iteration:.1f} | " + " | ".join(f"{phases[p]:.1f}" for p in PHASES)
              + f" | {overlap:.2f} | {flow_gb:.2f} | {worker_gb:.2f} |")
    base = rows[0]
    print("\nratio of s/iteration to in process: " + ", ".join(f"{row[0]} {row[2] / base[2]:.2f}x" for row in rows[1:]))

    phases = base[3]
    train_side = phases["training"] + phases["weight_sync"]
    print("\nPROJECTION (not measured): seconds per iteration with the trainer on its own device and the "
          "rollouts on N engines, from the in-process run's phase times above\n")
    print("| rollout engines | k=0 (sync) | k=1 (one update ahead) | k=1 vs in-process |")
    print("|---|---|---|---|")
    for gpus in args.gpus:
        rollout_side = phases["rollout"] / gpus + phases["scoring"]
        sync = rollout_side + train_side
        ahead = max(rollout_side, train_side)
        print(f"| {gpus} | {sync:.1f} | {ahead:.1f} | {base[2] / ahead:.2f}x |")


def _worker_peak_gb(home: Path) -> float:
    """The task worker's peak resident set so far (VmHWM), in GB."""
    pid = int((home / "run" / "task-worker-0.pid").read_text())
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e9
    raise RuntimeError(f"no VmHWM for the task worker (pid {pid})")


if __name__ == "__main__":
    main()
