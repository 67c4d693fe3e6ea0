"""Curate's pass rates or evaluate's sampling, in-process vs on N Prefect task workers, side by side.

    .venv/bin/python scripts/bench_task_workers.py [--stage curate|evaluate] [--workers 2] [--preset smoke]

Starts a real Prefect server (task workers cannot use the ephemeral API) and times the stage's
preset twice per placement, each run in a fresh PASSBAND_HOME so nothing is reused:
- cold: the first run; the in-process flow opens its engine, the workers open theirs on their
  first shard (workers are started just before);
- warm: a second run with another seed (new shard keys); the in-process flow opens its engine
  again, as every flow run does, while the workers still hold theirs.
`curate`: the preset with SFT sets off, so the time is the pass-rate shards plus the flow's fixed
costs. `evaluate`: the preset without baseline and k-curve, `--n` samples per problem, shards of
`--shard-size` problems on the workers; the table says whether both placements gave the same rows.
Prints problems sampled per second and the workers/in-process ratio. On a machine with C cores
each worker gets C/N of them, so on 2 cores expect little gain beyond the saved engine start.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path


def timed_curate(model_dir: Path, args: argparse.Namespace, workers: str, seed: int) -> tuple[float, int, None]:
    """(wall seconds, problems sampled, None) of one curate run in the current PASSBAND_HOME."""
    from passband.flows.config import resolve_config
    from passband.flows.curate.flow import CurateConfig, curate

    config = resolve_config(CurateConfig, "curate", args.preset, None,
                            [f"model={model_dir}", f"sampling.workers={workers}", "sft.enabled=false",
                             f"engine.seed={seed}"])
    start = time.perf_counter()
    summary = curate(config)
    elapsed = time.perf_counter() - start
    problems = sum(pool.source.num_problems - pool.eval_size for pool in config.pools().values())
    assert summary.metrics["shards_reused"] == 0, "a fresh home must sample every shard"
    return elapsed, problems, None


def timed_evaluate(model_dir: Path, args: argparse.Namespace, workers: str, seed: int) -> tuple[float, int, list]:
    """(wall seconds, problems sampled, per-sample rows) of one evaluate run in the current PASSBAND_HOME."""
    from passband.flows.config import resolve_config
    from passband.flows.evaluate.flow import EvaluateConfig, evaluate
    from passband.tasks.artifacts.datasets import read_table

    config = resolve_config(EvaluateConfig, "evaluate", args.preset, None,
                            [f"model={model_dir}", "baseline=null", "k_curve=null", f"sampling.n={args.n}",
                             f"sampling.seed={seed}", f"shards.workers={workers}", f"shards.shard_size={args.shard_size}"])
    start = time.perf_counter()
    summary = evaluate(config)
    elapsed = time.perf_counter() - start
    rows = read_table(summary.outputs["samples"]).to_pylist()
    return elapsed, len({(row["eval_set"], row["problem_id"]) for row in rows}), rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", choices=("curate", "evaluate"), default="curate")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--preset", default="smoke")
    parser.add_argument("--n", type=int, default=4, help="evaluate: samples per problem")
    parser.add_argument("--shard-size", type=int, default=4, help="evaluate: problems per shard on the workers")
    args = parser.parse_args()
    timed = timed_curate if args.stage == "curate" else timed_evaluate

    os.environ["PREFECT_LOCAL_STORAGE_PATH"] = tempfile.mkdtemp(prefix="bench-prefect-storage-")
    from prefect.testing.utilities import prefect_test_harness

    from passband.stack.local import stop_services
    from passband.stack.task_workers import start_task_workers
    from passband.training.model_source import gguf_to_safetensors, smollm2_gguf_path

    model_dir = gguf_to_safetensors(smollm2_gguf_path(), Path(tempfile.mkdtemp(prefix="bench-model-")))
    results: dict[tuple[str, str], tuple[float, int, list | None]] = {}
    with prefect_test_harness(server_startup_timeout=180):
        import prefect.settings

        for placement in ("local", "task_workers"):
            os.environ["PASSBAND_HOME"] = tempfile.mkdtemp(prefix=f"bench-{placement}-")
            if placement == "task_workers":
                start_task_workers(args.workers, prefect.settings.PREFECT_API_URL.value())
            try:
                results[placement, "cold"] = timed(model_dir, args, placement, seed=0)
                results[placement, "warm"] = timed(model_dir, args, placement, seed=1)
            finally:
                stop_services()

    if args.stage == "curate":
        print(f"\ncurate {args.preset} pass rates (SFT off), {os.cpu_count()} cores, {args.workers} task workers")
    else:
        print(f"\nevaluate {args.preset} (no baseline, no k-curve), n={args.n}, shards of {args.shard_size} problems, "
              f"{os.cpu_count()} cores, {args.workers} task workers")
    print(f"{'run':>5} {'in-process s':>13} {'workers s':>10} {'in-proc prob/s':>15} {'workers prob/s':>15} {'ratio':>6}"
          + ("  same rows" if args.stage == "evaluate" else ""))
    for run in ("cold", "warm"):
        (local_s, problems, local_rows), (workers_s, _, workers_rows) = results["local", run], results["task_workers", run]
        print(f"{run:>5} {local_s:13.1f} {workers_s:10.1f} {problems / local_s:15.3f} {problems / workers_s:15.3f} "
              f"{local_s / workers_s:6.2f}" + (f"  {local_rows == workers_rows}" if args.stage == "evaluate" else ""))


if __name__ == "__main__":
    main()
