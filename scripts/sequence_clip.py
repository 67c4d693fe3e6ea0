"""How far GSPO's sequence-level ratio moves in the recipe preset, and which clip range binds.

    .venv/bin/python scripts/sequence_clip.py [--iterations 3]

Runs `rl --preset recipe` (sequence-level ratio, S = 2 inner steps, lr 1e-5, seq-MIS) twice in a
fresh PASSBAND_HOME, held-out eval off, with the same seeds: once with the clip range the recipe
names for token ratios, [0.28, 0.40], and once with the level's default, GSPO's [3e-4, 4e-4].
Prints per iteration the sequence ratio's extremes over the inner steps (the first step's ratio
is exactly 1, so the extremes are the second step's) and the fraction of sequences clipped.
A clip binds only where ratio_max > 1 + clip_high or ratio_min < 1 - clip_low.
"""

from __future__ import annotations

import argparse
import os
import tempfile

CLIPS = {"reference [0.28, 0.40]": ("0.28", "0.40"), "GSPO default [3e-4, 4e-4]": ("null", "null")}
METRICS = ("ratio_max", "ratio_min", "clip_frac", "clip_frac_low", "clip_frac_high")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=3)
    args = parser.parse_args()
    os.environ["PASSBAND_HOME"] = tempfile.mkdtemp(prefix="passband-sequence-clip-")

    from mlflow import MlflowClient

    from passband.flows.config import resolve_config
    from passband.flows.rl.flow import RLConfig, rl
    from passband.tasks.reporting import tracking

    rows = []
    for label, (low, high) in CLIPS.items():
        config = resolve_config(RLConfig, "rl", "recipe", None, [
            f"num_iterations={args.iterations}", "eval=null", f"algo.clip_low={low}", f"algo.clip_high={high}"])
        summary = rl(config)
        tracking.configure()
        client = MlflowClient()
        history = {name: {m.step: m.value for m in client.get_metric_history(summary.mlflow_run_id, name)}
                   for name in METRICS}
        for step in sorted(history["ratio_max"]):
            rows.append((label, config.algo.clip_low, config.algo.clip_high, step,
                         *(history[name][step] for name in METRICS)))

    print("\n| clip range | clip_low | clip_high | iteration | ratio_max - 1 | 1 - ratio_min | clip_frac "
          "| clip_frac_low | clip_frac_high |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, low, high, step, ratio_max, ratio_min, frac, frac_low, frac_high in rows:
        print(f"| {label} | {low:g} | {high:g} | {step} | {ratio_max - 1:.2e} | {1 - ratio_min:.2e} | {frac:.3f} "
              f"| {frac_low:.3f} | {frac_high:.3f} |")


if __name__ == "__main__":
    main()
