"""Row shapes of the curate flow's outputs: problems with pass rates, SFT traces, removed rows.

The RL sets are problem rows plus the measured pass statistics; the SFT sets are one row per
verified trace with the columns the SFT core reads (`prompt`, `completion`, `system`) and the
provenance the recipe asks for; the removed side artifact has one fixed schema for rows of any
shape, so rows removed at different steps fit in one table.
"""

import json

import pyarrow as pa

from passband.curation.suites.rows import rows_to_table

PASS_STAT_COLUMNS = ("pass_count", "num_samples", "num_unparsable", "num_timeout", "num_error",
                     "num_rollouts", "num_rollouts_solved")

RL_EXTRA_COLUMNS = {
    "generator": "string", "pass_rate": "float64", "pass_rate_per_attempt": "float64",
    **{column: "int64" for column in PASS_STAT_COLUMNS}, "checkpoint": "string", "band": "string",
}
"""Columns an RL row carries beyond the suite row schema, with their Arrow types."""

SFT_COLUMNS = (
    "id", "problem_id", "task", "subdomain", "prompt", "completion", "system", "reference", "source",
    "generator", "origin", "checkpoint", "teacher", "pass_rate", "band", "npass", "num_samples",
    "sample_index", "status", "finish_reason", "num_tokens", "verdict_consistency",
    "verdict_execution", "verdict_math", "verdict_structure", "consistency_detail",
    "structure_detail", "perplexity", "input_ids", "loss_mask",
)
"""Columns of the SFT sets, in order. `input_ids` and `loss_mask` hold a multi-turn episode's exact
tokens (the opening prompt, then sampled and environment tokens) and the mask that is 1 on the
sampled ones: SFT trains on those tokens as they are (training/sft/data.py). Null on a single-turn
trace, which SFT chat-encodes from `prompt` and `completion`."""

_SFT_FLOATS = {"pass_rate", "perplexity"}
_SFT_INTS = {"npass", "num_samples", "sample_index", "num_tokens"}
_SFT_ID_LISTS = {"input_ids", "loss_mask"}
REMOVED_COLUMNS = ("id", "task", "subdomain", "stage", "removed_reason", "reason_kind", "prompt", "completion",
                   "row_json")
"""Columns of the removed side artifact (removed_record), all strings."""


def attach_pass_rates(rows: list[dict], summaries: list[dict], checkpoint: str) -> list[dict]:
    """Problem rows with their pass statistics; `pass_rate` is the recipe's p_hat over rollouts.

    With top_k = 1 p_hat equals the per-attempt rate; with top_k > 1 a rollout of k attempts
    solves a problem if any attempt passes, and the per-attempt rate is kept apart as
    `pass_rate_per_attempt`.
    """
    if [row["id"] for row in rows] != [summary["problem_id"] for summary in summaries]:
        raise ValueError("attach_pass_rates: summaries are not aligned with the rows (ids differ)")
    return [
        {**row, "pass_rate": summary["pass_rate_top_k"], "pass_rate_per_attempt": summary["pass_rate"],
         **{column: summary[column] for column in PASS_STAT_COLUMNS}, "checkpoint": checkpoint}
        for row, summary in zip(rows, summaries)
    ]


def sft_row(trajectory: dict, origin: str, teacher: str, system: str | None) -> dict:
    """One SFT row (SFT_COLUMNS) from a selected trajectory: problem fields + sample fields.

    `origin` says how the trace was made: "rollout" (the student's pass-rate samples),
    "correction" (retries on failed problems) or "synthetic" (teacher answers to new queries).
    """
    row = {
        **{column: trajectory.get(column) for column in SFT_COLUMNS},
        "id": f"{trajectory['id']}/{origin}-{trajectory['sample_index']}",
        "problem_id": trajectory["id"],
        "origin": origin,
        "teacher": teacher,
        "system": system,
        "generator": trajectory.get("generator") or trajectory.get("source"),
    }
    return row


def removed_record(row: dict, stage: str) -> dict:
    """A removed row in the side artifact's fixed schema; the full row is kept as JSON text."""
    full = {key: value for key, value in row.items() if key != "samples"}
    return {
        "id": str(row.get("id")),
        "task": row.get("task"),
        "subdomain": row.get("subdomain"),
        "stage": stage,
        "removed_reason": row["removed_reason"],
        "reason_kind": reason_kind(row["removed_reason"]),
        "prompt": row.get("prompt") if isinstance(row.get("prompt"), str) else json.dumps(row.get("prompt")),
        "completion": row.get("completion"),
        "row_json": json.dumps(full, default=str),
    }


def reason_kind(reason: str) -> str:
    """The reason without the row-specific part: "near_duplicate_of:x jaccard=0.9" -> "near_duplicate_of"."""
    return reason.split(":", 1)[0].split(" ", 1)[0].split("=", 1)[0]


def count_by(rows: list[dict], *keys: str) -> dict[str, int]:
    """How many rows share each combination of `keys`, as {"a/b": count}."""
    counts: dict[str, int] = {}
    for row in rows:
        name = "/".join(str(row.get(key)) for key in keys)
        counts[name] = counts.get(name, 0) + 1
    return counts


def problems_table(rows: list[dict], rl_columns: bool = False) -> pa.Table:
    """Problem rows (JSON-text reference) as an Arrow table; with `rl_columns`, an empty set still
    carries the RL columns (RL_EXTRA_COLUMNS), which a non-empty one has from its rows."""
    table = rows_to_table(rows)
    if not rows and rl_columns:
        for column, kind in RL_EXTRA_COLUMNS.items():
            table = table.append_column(column, pa.array([], type=getattr(pa, kind)()))
    return table


def sft_table(rows: list[dict]) -> pa.Table:
    """SFT rows in the fixed SFT_COLUMNS schema (typed, so an empty set still has its columns)."""
    columns = {}
    for column in SFT_COLUMNS:
        values = [json.dumps(row[column]) if column == "reference" else row.get(column) for row in rows]
        kind = (pa.float64() if column in _SFT_FLOATS else pa.int64() if column in _SFT_INTS
                else pa.list_(pa.int64()) if column in _SFT_ID_LISTS else pa.string())
        columns[column] = pa.array(values, type=kind)
    return pa.table(columns)


def removed_table(removed: list[dict]) -> pa.Table:
    """Removed records (removed_record) as one all-string table of REMOVED_COLUMNS."""
    return pa.table({name: pa.array([row.get(name) for row in removed], type=pa.string()) for name in REMOVED_COLUMNS})


def removed_metrics(removed: list[dict]) -> dict[str, int]:
    """`removed/{stage}/{reason kind}` counts and `removed/total`."""
    return {**{f"removed/{name}": count for name, count in count_by(removed, "stage", "reason_kind").items()},
            "removed/total": len(removed)}
