"""Compare two curate runs' homes row for row: are two runs of one config the same data?

    .venv/bin/python scripts/compare_curate_homes.py HOME_A HOME_B

Reads every committed artifact's Parquet tables under each `PASSBAND_HOME` (eval splits, the
pass-rate shards' samples and summaries, the RL and SFT sets, the removed table; models are
skipped), names them by key with the run id masked, and compares each table both hold, rows matched
by id (`id` or `problem_id`, with `sample_index` where present). Prints one line per table (rows,
identical in order, ids that differ, pass rates equal where the table has them) and a total; exits 1
when any row differs or a table is in one home only (docs/benchmarks.md, issue #56).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pyarrow.parquet as pq


def tables(home: Path) -> dict[str, list[dict]]:
    """Key:file name -> rows of every committed Parquet table under `home`'s artifacts."""
    root = home / "artifacts"
    found = {}
    for manifest in sorted(root.glob("**/manifest.json")):
        key = str(manifest.parent.relative_to(root))
        if key.startswith("models/"):
            continue
        key = re.sub(r"^datasets/curate/[^/]+/", "datasets/curate/<run>/", key)  # each run has its own id
        for table in sorted(manifest.parent.glob("**/*.parquet")):
            found[f"{key}:{table.name}"] = pq.read_table(table).to_pylist()
    return found


def canonical(row: dict) -> str:
    return json.dumps(row, sort_keys=True, default=str)


def row_id(row: dict) -> str:
    for field in ("id", "problem_id"):
        if field in row:
            return str(row[field]) + (f"#{row['sample_index']}" if "sample_index" in row else "")
    return canonical(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("home_a", type=Path)
    parser.add_argument("home_b", type=Path)
    args = parser.parse_args()
    a, b = tables(args.home_a), tables(args.home_b)
    only = sorted(set(a) ^ set(b))
    print(f"{len(a)} tables in A, {len(b)} in B; in one home only: {only or 'none'}")
    total = differing = 0
    for name in sorted(set(a) & set(b)):
        rows_a, rows_b = a[name], b[name]
        by_id_a = {row_id(r): canonical(r) for r in rows_a}
        by_id_b = {row_id(r): canonical(r) for r in rows_b}
        changed = sorted(k for k in set(by_id_a) | set(by_id_b) if by_id_a.get(k) != by_id_b.get(k))
        total += len(set(by_id_a) | set(by_id_b))
        differing += len(changed)
        in_order = [canonical(r) for r in rows_a] == [canonical(r) for r in rows_b]
        rates = ""
        if rows_a and "pass_rate" in rows_a[0]:
            equal = [(row_id(r), r["pass_rate"]) for r in rows_a] == [(row_id(r), r.get("pass_rate")) for r in rows_b]
            rates = f", pass rates equal {equal}"
        print(f"{name}: A {len(rows_a)} rows, B {len(rows_b)}, identical in order {in_order}, differing ids "
              f"{len(changed)}{rates}" + (f" e.g. {changed[:5]}" if changed else ""))
    print(f"TOTAL over the {len(set(a) & set(b))} tables both homes hold: {total} rows (by id), {differing} differ")
    sys.exit(1 if differing or only else 0)


if __name__ == "__main__":
    main()
