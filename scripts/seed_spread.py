"""What another training run gives: the demo's training under several training seeds.

    .venv/bin/python scripts/seed_spread.py [--seeds 0 1 2] [--preset demo] [--home DIR] [--out FILE]
    .venv/bin/python scripts/seed_spread.py --home DIR --runs 0=<mlflow run id> 1=<mlflow run id>

Runs `pipeline --preset PRESET --set training_seed=S` once per seed, one after another, in one
PASSBAND_HOME (default: a fresh temporary folder), so what the seed does not touch is computed
once and reused through the stage cache: the base model's evaluation (same checkpoint, eval rows
and eval sampling in every seed), the suites' problems and the held-out split. Everything the
seed moves runs again per seed: curation's pass-rate samples, the SFT order, RL's prompts and
rollouts, and the SFT and RL evaluations.

Prints, per eval set, each seed's base / SFT / RL pass@1 and gains, their mean and standard
deviation across seeds beside the mean within-run 95% half-width, and whether each gain's interval
excluded 0 in every seed; then each of the preset's claims with the seeds it held in (a claim worth
stating holds in all of them; record it in the preset's `claims.spread_check`), RL's k-curve call
per seed, and each seed's wall time. --out writes the same as JSON. --runs reports on pipeline
runs that already finished in DIR (a run of this script stopped after some seeds), checking the
preset's claims as they are now against each.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import asdict
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--home", type=Path, default=None, help="PASSBAND_HOME (default: a fresh temporary folder)")
    parser.add_argument("--out", type=Path, default=None, help="also write the spread and each seed's table as JSON")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="extra pipeline override, as `passband run --set`")
    parser.add_argument("--runs", nargs="+", default=None, metavar="SEED=RUN_ID",
                        help="report on finished pipeline runs of --home (their MLflow run ids) instead of "
                             "running the seeds, e.g. when a run of this script was stopped after some seeds")
    args = parser.parse_args()
    os.environ["PASSBAND_HOME"] = str(args.home or tempfile.mkdtemp(prefix="passband-seed-spread-"))
    from passband.stack.local import prepare_environment

    prepare_environment()  # before Prefect is imported: it reads its settings (the server's startup timeout) once

    from passband.flows.config import resolve_config
    from passband.flows.pipeline.flow import PipelineConfig, pipeline
    from passband.training.evaluation.claims import check_claims
    from passband.training.evaluation.results import CHECKPOINTS, headline_scores
    from passband.training.evaluation.spread import seed_spread, spread_markdown

    tables, walls, claims = [], [], []
    if args.runs:
        args.seeds = [int(pair.split("=")[0]) for pair in args.runs]
        tables = [logged_table(pair.split("=")[1]) for pair in args.runs]
        claims = [(table.get("claims/held"), table.get("claims/checked")) for table in tables]
        walls = [float("nan")] * len(tables)
    for seed in [] if args.runs else args.seeds:
        config = resolve_config(PipelineConfig, "pipeline", args.preset, None,
                                [*args.overrides, f"training_seed={seed}"])
        start = time.perf_counter()
        summary = pipeline(config)
        walls.append(time.perf_counter() - start)
        tables.append(summary.metrics)  # the pipeline's metrics hold its pass_at_1_table
        claims.append((summary.metrics.get("claims/held"), summary.metrics.get("claims/checked")))
        print(f"seed {seed}: {walls[-1] / 60:.1f} min, claims held {claims[-1][0]} of {claims[-1][1]}", flush=True)

    config = resolve_config(PipelineConfig, "pipeline", args.preset, None, args.overrides)
    spreads = seed_spread(tables, config.best_metric)
    print(f"\nPASSBAND_HOME={os.environ['PASSBAND_HOME']}\n")
    print(spread_markdown(spreads, args.seeds))
    held_in: dict[tuple[str, str], list[int]] = {}
    if config.claims is not None:
        for seed, table in zip(args.seeds, tables):
            sets = sorted(headline_scores(table, config.best_metric, CHECKPOINTS[0]))
            for claim in check_claims(table, config.best_metric, sets, list(CHECKPOINTS), config.claims):
                held_in.setdefault((claim.claim, claim.eval_set), []).extend([seed] if claim.holds else [])
        print("\n| claim | eval set | held in seeds |\n|---|---|---|")
        for (claim, eval_set), seeds in held_in.items():
            print(f"| {claim} | {eval_set} | {len(seeds)} of {len(args.seeds)} {seeds} |")
    calls = k_curve_calls(tables)
    if calls:
        print("\n| seed | eval set | pass@1 change | pass@n change | call |\n|---|---|---|---|---|")
        for seed, rows in zip(args.seeds, calls):
            for eval_set, pass_1, pass_n, call in rows:
                print(f"| {seed} | {eval_set} | {pass_1} | {pass_n} | {call} |")
    for seed, wall, (held, checked) in zip(args.seeds, walls, claims):
        print(f"seed {seed}: wall {wall / 60:.1f} min, claims held {held} of {checked}")
    if args.out:
        args.out.write_text(json.dumps({"seeds": args.seeds, "preset": args.preset, "wall_s": walls,
                                        "claims": claims, "tables": tables,
                                        "claims_held_in": {f"{c} | {s}": seeds for (c, s), seeds in held_in.items()},
                                        "k_curve_calls": calls,
                                        "spread": [asdict(s) for s in spreads]}, indent=1))


def logged_table(run_id: str) -> dict[str, float]:
    """A finished pipeline run's metrics as the pipeline returned them (MLflow logs `pass@k` as
    `pass_at_k`: tracking.log_metrics)."""
    from mlflow import MlflowClient

    from passband.tasks.reporting.tracking import configure

    configure()
    return {name.replace("_at_", "@"): value for name, value in MlflowClient().get_run(run_id).data.metrics.items()}


def k_curve_calls(tables: list[dict[str, float]]) -> list[list[tuple[str, str, str, str]]]:
    """Per seed, RL's k-curve against base on each set the pipeline drew it on (its `rl/k_curve/...`
    metrics): the pass@1 and pass@n changes with their intervals, and the call, made here from those
    intervals and p-values under the run's `k_curve/margin` (tables from before the margin was logged:
    the default)."""
    from passband.training.evaluation.k_curve import Change, KCurveConfig, direction

    calls = []
    for table in tables:
        sets = sorted({key.split("/")[2] for key in table if key.startswith("rl/k_curve/") and key.endswith("/direction")})
        n = max((int(key.rsplit("@", 1)[1]) for key in table
                 if key.startswith("rl/k_curve/delta/") and key.rsplit("@", 1)[1].isdigit()), default=0)
        margin = table.get("rl/k_curve/margin", KCurveConfig().margin)
        rows = []
        for eval_set in sets:
            (d1, change1), (dn, change_n) = (
                (table[key], Change(table[key + "_ci_low"], table[key + "_ci_high"], table[key + "_p_value"]))
                for key in (f"rl/k_curve/delta/{eval_set}/pass@{k}" for k in (1, n)))
            rows.append((eval_set, f"{d1:+.3f} [{change1.low:+.3f}, {change1.high:+.3f}]",
                         f"{dn:+.3f} [{change_n.low:+.3f}, {change_n.high:+.3f}]", direction(change_n, change1, margin)))
        calls.append(rows)
    return calls


if __name__ == "__main__":
    main()
