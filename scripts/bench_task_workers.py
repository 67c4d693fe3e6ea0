"""Curate's pass-rate throughput in-process vs on N Prefect task workers, side by side in one run.

    .venv/bin/python scripts/bench_task_workers.py [--workers 2] [--preset smoke]

Starts a real Prefect server (task workers cannot use the ephemeral API) and times the curate
preset (SFT sets off, so the time is the pass-rate shards plus the flow's fixed costs) twice per
placement, each run in a fresh PASSBAND_HOME so nothing is reused:
- cold: the first run; the in-process flow opens its engine, the workers open theirs on their
  first shard (workers are started just before);
- warm: a second run with another seed (new shard keys); the in-process flow opens its engine
  again, as every flow run does, while the workers still hold theirs.
Prints problems sampled per second and the workers/in-process ratio. On a machine with C cores
each worker gets C/N of them, so on 2 cores expect little gain beyond the saved engine start.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path


def timed_curate(model_dir: Path, preset: str, workers: str, seed: int) -> tuple[float, int]:
    """(wall seconds, problems sampled) of one curate run in the current PASSBAND_HOME."""
    from passband.flows.config import resolve_config
    from passband.flows.curate import CurateConfig, curate

    config = resolve_config(CurateConfig, "curate", preset, None,
                            [f"model={model_dir}", f"sampling.workers={workers}", "sft.enabled=false",
                             f"engine.seed={seed}"])
    start = time.perf_counter()
    summary = curate(config)
    elapsed = time.perf_counter() - start
    problems = sum(pool.source.num_problems - pool.eval_size for pool in config.pools().values())
    assert summary.metrics["shards_reused"] == 0, "a fresh home must sample every shard"
    return elapsed, problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--preset", default="smoke")
    args = parser.parse_args()

    os.environ["PREFECT_LOCAL_STORAGE_PATH"] = tempfile.mkdtemp(prefix="bench-prefect-storage-")
    from prefect.testing.utilities import prefect_test_harness

    from passband.flows.stack import stop_services
    from passband.flows.task_workers import start_task_workers
    from passband.training.model_source import gguf_to_safetensors, smollm2_gguf_path

    model_dir = gguf_to_safetensors(smollm2_gguf_path(), Path(tempfile.mkdtemp(prefix="bench-model-")))
    results: dict[tuple[str, str], tuple[float, int]] = {}
    with prefect_test_harness(server_startup_timeout=180):
        import prefect.settings

        for placement in ("local", "task_workers"):
            os.environ["PASSBAND_HOME"] = tempfile.mkdtemp(prefix=f"bench-{placement}-")
            if placement == "task_workers":
                start_task_workers(args.workers, prefect.settings.PREFECT_API_URL.value())
            try:
                results[placement, "cold"] = timed_curate(model_dir, args.preset, placement, seed=0)
                results[placement, "warm"] = timed_curate(model_dir, args.preset, placement, seed=1)
            finally:
                stop_services()

    print(f"\ncurate {args.preset} pass rates (SFT off), {os.cpu_count()} cores, {args.workers} task workers")
    print(f"{'run':>5} {'in-process s':>13} {'workers s':>10} {'in-proc prob/s':>15} {'workers prob/s':>15} {'ratio':>6}")
    for run in ("cold", "warm"):
        (local_s, problems), (workers_s, _) = results["local", run], results["task_workers", run]
        print(f"{run:>5} {local_s:13.1f} {workers_s:10.1f} {problems / local_s:15.3f} {problems / workers_s:15.3f} "
              f"{local_s / workers_s:6.2f}")


if __name__ == "__main__":
    main()
