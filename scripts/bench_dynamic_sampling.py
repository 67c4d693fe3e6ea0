"""What dynamic sampling costs in rollouts and buys in held-out reward per wall-clock minute.

    .venv/bin/python scripts/bench_dynamic_sampling.py [--iterations 8] [--max-rounds 3] [--oversample 1.0]

Runs `rl --preset demo` twice in one fresh PASSBAND_HOME with the same seeds, one after the other
on the same box: dynamic sampling off, then on (`dynamic_sampling: {max_rounds, oversample}`,
`when_short: fill`). Each run evaluates the preset's held-out sets before and after. Prints per
run: wall minutes, rollouts sampled (groups x G), groups trained on with differing rewards, the
held-out mean pass@1 before and after, and the gain per wall minute; then the two side by side as
ratios (on / off). The batch reward is not compared: dynamic sampling selects groups by their
rewards, so its batch reward is biased by construction; the held-out sets are not.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--max-rounds", type=int, default=3)
    parser.add_argument("--oversample", type=float, default=1.0)
    args = parser.parse_args()
    os.environ["PASSBAND_HOME"] = tempfile.mkdtemp(prefix="passband-dynamic-sampling-")

    from mlflow import MlflowClient

    from passband.flows.config import resolve_config
    from passband.flows.rl.flow import RLConfig, rl
    from passband.tasks.reporting import tracking

    runs = {"off": [], "on": [f"dynamic_sampling={{max_rounds: {args.max_rounds}, oversample: {args.oversample}}}"]}
    results = {}
    for label, overrides in runs.items():
        config = resolve_config(RLConfig, "rl", "demo", None, [f"num_iterations={args.iterations}", "eval_every=0",
                                                               *overrides])
        start = time.perf_counter()
        summary = rl(config)
        wall_min = (time.perf_counter() - start) / 60
        tracking.configure()
        client = MlflowClient()

        def history(name: str) -> list[float]:
            return [m.value for m in client.get_metric_history(summary.mlflow_run_id, name)]

        group_size = config.sampling.n
        groups = history("dynamic_sampling/sampled_groups") or [float(config.prompts_per_step)] * args.iterations
        informative = history("dynamic_sampling/informative_groups") or [
            config.prompts_per_step * (1 - frac) for frac in history("zero_variance_group_frac")]
        before, after = summary.metrics["before/mean/pass@1"], summary.metrics["after/mean/pass@1"]
        results[label] = {"wall_min": wall_min, "rollouts": sum(groups) * group_size,
                          "informative_groups": sum(informative), "before": before, "after": after,
                          "gain_per_min": (after - before) / wall_min}

    print("\n| dynamic sampling | wall min | rollouts | informative groups trained | held-out mean pass@1 before "
          "| after | gain per wall min |")
    print("|---|---|---|---|---|---|---|")
    for label, r in results.items():
        print(f"| {label} | {r['wall_min']:.1f} | {r['rollouts']:.0f} | {r['informative_groups']:.0f} | "
              f"{r['before']:.3f} | {r['after']:.3f} | {r['gain_per_min']:+.4f} |")
    on, off = results["on"], results["off"]
    print(f"\non / off: wall {on['wall_min'] / off['wall_min']:.2f}x, rollouts {on['rollouts'] / off['rollouts']:.2f}x, "
          f"informative groups {on['informative_groups'] / max(off['informative_groups'], 1e-9):.2f}x")


if __name__ == "__main__":
    main()
