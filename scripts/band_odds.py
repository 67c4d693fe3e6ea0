"""How likely a curate preset's RL band is empty per task, from the base model's measured pass rates.

    .venv/bin/python scripts/band_odds.py [--preset smoke] [--samples 32]

Runs the preset's curate once with `--samples` rollouts per problem (SFT sets off; every band
opened to [0, 1] and alignment off, so each RL set holds every training problem with its pass
count), in a fresh PASSBAND_HOME. Then, per task, the probability that the preset's own run (its
`pass_rate.sampling.n` samples, its band) finds no problem in the band (curation/band_odds.py: Jeffreys
posterior per problem, beta-binomial at n). Sampling differs between machines, so this is the
chance a machine of this kind sees an empty band, not a property of this machine's bits.
"""

from __future__ import annotations

import argparse
import os
import tempfile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="smoke")
    parser.add_argument("--samples", type=int, default=32, help="rollouts per problem of the measuring run")
    args = parser.parse_args()
    os.environ["PASSBAND_HOME"] = tempfile.mkdtemp(prefix="passband-band-odds-")

    from passband.curation.band_odds import empty_band_probability, in_band_probability
    from passband.curation.bands import BandFilter
    from passband.curation.catalog import task
    from passband.curation.suites.rows import table_to_rows
    from passband.flows.config import resolve_config
    from passband.flows.curate.flow import CurateConfig, curate
    from passband.tasks.artifacts.datasets import read_table

    preset = resolve_config(CurateConfig, "curate", args.preset)
    opened = [f"tasks.{name}.band='[0, 1]'" for name in preset.pools()]
    measuring = resolve_config(CurateConfig, "curate", args.preset, None, [
        f"pass_rate.sampling.n={args.samples}", "sft.enabled=false", "balance.align_sizes=false",
        "balance.stratify_key=null", *opened])
    summary = curate(measuring)
    n = preset.pass_rate.sampling.n
    print(f"\ncurate preset {args.preset!r}: n = {n} samples per problem; pass counts measured at {args.samples}")
    print("| task | problems | band | expected in band | P(band empty) |")
    print("|---|---|---|---|---|")
    for name, pool in preset.pools().items():
        band = BandFilter.parse(pool.band) if pool.band else task(name).default_band
        rows = table_to_rows(read_table(summary.outputs[f"rl_{name}"]))
        counts = [(row["pass_count"], row["num_samples"]) for row in rows]
        expected = sum(in_band_probability(c, total, n, band) for c, total in counts)
        print(f"| {name} | {len(rows)} | {band} | {expected:.1f} | {empty_band_probability(counts, n, band):.2e} |")


if __name__ == "__main__":
    main()
