"""Full fine-tuning against LoRA on the demo's RL stage: speed, memory and held-out pass@1, side by side.

    .venv/bin/python scripts/bench_lora.py [--iterations 8] [--lora-lr 1e-4] [--ranks 1 32]
        [--adapter-rank 32] [--home DIR] [--out FILE] [--parallel]

Runs `passband run rl --preset demo` (from the shipped model; its own held-out evaluation off) once per
variant, same seeds: full fine-tuning at the preset's lr, LoRA at each of --ranks with --lora-lr (the anchor,
"LoRA Without Regret" 2025: ~10x full's lr, alpha fixed at 32) publishing merged weights, and LoRA at
--adapter-rank publishing the adapter alone for vLLM to serve (engine_weights: adapter). Then one
`passband run evaluate --preset demo` per LoRA variant with that variant's final checkpoint as `model` and
the full run's as `baseline`: held-out pass@1 per task with 95% intervals and paired deltas against full.

Prints per variant: median seconds per iteration by phase (rollout, scoring, training, weight_sync), bytes of
one published weight version, trainable parameters, peak RSS per phase (memory/*_peak_gb, max over
iterations), and the evaluation table. --parallel starts the RL runs at once (each then sees the same
contention on a shared box: compare them with each other, not with another sitting's numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent / "passband"
PHASES = ("rollout", "scoring", "training", "weight_sync", "iteration")


def variants(args: argparse.Namespace) -> dict[str, list[str]]:
    """Variant name -> its `--set` overrides."""
    lora = [f"algo.lr={args.lora_lr}", "algo.lora.alpha=32"]
    named = {"full": []}
    for rank in args.ranks:
        named[f"lora-r{rank}"] = [*lora, f"algo.lora.rank={rank}", "algo.lora.engine_weights=merged"]
    if args.adapter_rank:
        named[f"lora-r{args.adapter_rank}-adapter"] = [*lora, f"algo.lora.rank={args.adapter_rank}",
                                                       "algo.lora.engine_weights=adapter"]
    return named


def start_rl(name: str, overrides: list[str], args: argparse.Namespace, home: Path) -> subprocess.Popen:
    sets = [f"num_iterations={args.iterations}", "eval=null", "checkpoint_every=0", *overrides]
    cmd = [str(BIN), "run", "rl", "--preset", "demo", *[arg for s in sets for arg in ("--set", s)]]
    log = open(home / f"{name}.log", "w")  # noqa: SIM115 - the process writes it until it ends
    print(f"{name}: {' '.join(cmd[1:])}", flush=True)
    return subprocess.Popen(cmd, env={**os.environ, "PASSBAND_HOME": str(home)}, stdout=subprocess.PIPE,
                            stderr=log, text=True)


def finish(proc: subprocess.Popen, name: str, home: Path) -> dict:
    out, _ = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed (exit {proc.returncode}): see {home / f'{name}.log'}")
    return json.loads(out.strip().splitlines()[-1])


def run_figures(summary: dict, home: Path) -> dict[str, float]:
    """Medians per phase, peak RSS per phase, the published version's bytes, from the run's MLflow history."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    run_id = summary["mlflow_run_id"]
    figures: dict[str, float] = {}
    for phase in PHASES:
        history = [m.value for m in client.get_metric_history(run_id, f"seconds/{phase}")]
        figures[f"s/{phase}"] = statistics.median(history) if history else float("nan")
    for key in client.get_run(run_id).data.metrics:
        if key.startswith("memory/") and key.endswith("_peak_gb"):
            figures[key] = max(m.value for m in client.get_metric_history(run_id, key))
    for key in ("weights/version_mb",):
        if key in summary["metrics"]:
            figures[key] = summary["metrics"][key]
    return figures


def evaluate(model_uri: str, baseline_uri: str, name: str, home: Path) -> dict:
    cmd = [str(BIN), "run", "evaluate", "--preset", "demo", "--set", f"model={model_uri}",
           "--set", f"baseline={baseline_uri}"]
    with open(home / f"eval-{name}.log", "w") as log:
        done = subprocess.run(cmd, env={**os.environ, "PASSBAND_HOME": str(home)}, stdout=subprocess.PIPE,
                              stderr=log, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"evaluate {name} failed: see {home / f'eval-{name}.log'}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--lora-lr", type=float, default=1e-4, help="10x the demo preset's 1e-5")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--adapter-rank", type=int, default=32, help="0: no adapter-served variant")
    parser.add_argument("--home", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--parallel", action="store_true")
    args = parser.parse_args()
    root = args.home or Path(tempfile.mkdtemp(prefix="passband-bench-lora-"))
    named = variants(args)
    homes = {name: root / name for name in named}
    for home in homes.values():
        home.mkdir(parents=True, exist_ok=True)
    start = time.time()
    summaries = {}
    if args.parallel:
        procs = {name: start_rl(name, sets, args, homes[name]) for name, sets in named.items()}
        summaries = {name: finish(proc, name, homes[name]) for name, proc in procs.items()}
    else:
        for name, sets in named.items():
            summaries[name] = finish(start_rl(name, sets, args, homes[name]), name, homes[name])
    rl_wall = time.time() - start
    results = {name: {"wall_s": summaries[name]["metrics"].get("wall_s"), **run_figures(summaries[name], homes[name])}
               for name in named}
    full_ckpt = summaries["full"]["outputs"]["checkpoint"]
    # all in the full run's home: the baseline's samples are drawn once and reused from its shard cache
    evaluations = {name: evaluate(summaries[name]["outputs"]["checkpoint"], full_ckpt, name, homes["full"])
                   for name in named if name != "full"}
    print(f"\nRL runs: {rl_wall / 60:.1f} min ({'in parallel' if args.parallel else 'one after another'}); "
          f"{args.iterations} iterations of the rl demo preset each")
    keys = sorted({key for figures in results.values() for key in figures})
    print("| figure | " + " | ".join(named) + " |")
    print("|---|" + "---|" * len(named))
    for key in keys:
        print(f"| {key} | " + " | ".join(f"{results[name].get(key, float('nan')):.4g}" for name in named) + " |")
    for name, summary in evaluations.items():
        metrics = summary["metrics"]
        print(f"\n{name} (model) vs full (baseline), held-out pass@1:")
        for key in sorted(metrics):
            if "pass@1" in key:
                print(f"  {key}: {metrics[key]:.4f}")
    if args.out:
        args.out.write_text(json.dumps({"results": results, "evaluations": evaluations,
                                        "rl_wall_s": rl_wall, "home": str(root)}, indent=2))


if __name__ == "__main__":
    main()
