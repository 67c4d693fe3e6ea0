"""The data of one SFT stage: load each named dataset, mix by weight, decontaminate, chat-encode.

A stage names its datasets (training.sft.config.StageConfig.datasets). Each name is resolved:
- a key of the flow's `generated` block -> built-in worked math solutions (curation.worked_math),
  or of `worked_analyses` -> built-in proof-grading analyses (curation.grading.analyses), committed
  as a Parquet artifact so the run records exactly which data it trained on;
- an artifact URI (file://, s3://) -> a committed Parquet dataset, e.g. the curation flow's
  `sft_stage1` output;
- anything else -> a local .jsonl/.parquet file of chat-format rows (training.sft.sources).
Every row left out (bad row, band, mix share, eval overlap, too long) is logged to MLflow as
`quarantine/<stage>.jsonl` with its reason.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NONE

from passband.curation.hygiene import asks_held_out, held_out_keys
from passband.tasks.artifacts.datasets import DATA_FILE, commit_table
from passband.tasks.artifacts.manifest import ARTIFACT_SCHEMES
from passband.tasks.artifacts.provenance import config_hash
from passband.tasks.artifacts.store import fetch_artifact
from passband.training.sft.config import StageConfig
from passband.training.sft.packing import SFTExample



def _commit_generated(kind: str, spec: dict[str, Any], held_out: frozenset[str], rows: list[dict],
                      failed: list[dict]) -> str:
    """Commit generated SFT rows of `kind` (keyed by their spec and the held-out questions they
    avoid); a row that failed its verifier stops the run, naming it."""
    from passband.curation.suites.rows import rows_to_table

    if failed:
        raise ValueError(f"{kind.replace('_', ' ')}: {len(failed)} generated completions fail their verifier, "
                         f"first: {failed[0]['id']}: {failed[0]['removed_reason']}")
    config = {kind: spec, "held_out": config_hash({"questions": sorted(held_out)})}
    key = f"datasets/sft-{kind.replace('_', '-')}/{config_hash(config)[:24]}"
    return commit_table(rows_to_table(rows), key, "sft", config)


@task(name="generate-worked-math", retries=2, retry_delay_seconds=2)
def commit_worked_math(spec: dict[str, Any], decontaminate_prompts: list[str]) -> str:
    """Generate, verify and commit worked math rows that ask no held-out question; return the URI."""
    from passband.curation.worked_math import worked_math_rows

    held_out = held_out_keys(decontaminate_prompts)
    return _commit_generated("worked_math", spec, held_out, *worked_math_rows(**spec, exclude_questions=held_out))


@task(name="generate-worked-analyses", retries=2, retry_delay_seconds=2)
def commit_worked_analyses(spec: dict[str, Any], decontaminate_prompts: list[str]) -> str:
    """Generate, verify and commit proof-grading analyses of triples whose problem no held-out prompt
    asks (a grading prompt asks its problem: curation.hygiene.question_key); return the URI."""
    from passband.curation.grading.analyses import worked_analysis_rows
    from passband.curation.hygiene import question_key

    held_out = held_out_keys(decontaminate_prompts)
    return _commit_generated("worked_analyses", spec, held_out, *worked_analysis_rows(
        **spec, excluded=lambda question: question_key(question) in held_out))


@task(name="generate-tool-traces", retries=2, retry_delay_seconds=2)
def commit_tool_traces(spec: dict[str, Any], decontaminate_prompts: list[str], model_ref: str, model_dir: str,
                       trust_remote_code: bool = False) -> str:
    """Write, run and commit teacher tool episodes (flows/sft.py: ToolTraceSource) that ask no held-out
    question, tokenized by `model_dir`'s tokenizer (the artifact is keyed by `model_ref`, the model as
    the config names it: token ids mean something under that tokenizer only); return the URI.
    `trust_remote_code`: the model's own code allowed (EngineConfig.trust_remote_code)."""
    from passband.curation.worked_math import draw_math_problems
    from passband.training.episodes.math_python import MathToolConfig
    from passband.training.episodes.teacher import math_tool_traces
    from passband.training.model_source import load_tokenizer

    held_out = held_out_keys(decontaminate_prompts)
    drawn = draw_math_problems(spec["num_examples"], spec["seed"], spec["difficulties"], spec["subdomains"],
                               spec["answer_format"], held_out, spec["balanced"], namespace="tool",
                               what="tool traces")
    kept, quarantined = math_tool_traces(load_tokenizer(model_dir, trust_remote_code), drawn, spec["seed"], spec["answer_format"],
                                         MathToolConfig.model_validate(spec["math_tool"]))
    return _commit_generated("tool_traces", {**spec, "tokenizer_of": model_ref}, held_out, kept, quarantined)


@task(name="load-sft-dataset", retries=2, retry_delay_seconds=2)
def load_dataset_rows(ref: str) -> tuple[list[dict], list[dict]]:
    """(usable rows, quarantined rows) of an artifact URI or a local JSONL/Parquet file."""
    import pyarrow.parquet as pq

    from passband.curation.suites.rows import REFERENCE_ENCODING_KEY, table_to_rows
    from passband.training.sft.sources import chat_rows, read_chat_rows

    if not ref.startswith(ARTIFACT_SCHEMES):
        path = Path(ref)
        if not path.is_file():
            raise FileNotFoundError(f"SFT dataset {ref!r} is neither a generated source, an artifact URI "
                                    "nor an existing .jsonl/.parquet file")
        return read_chat_rows(path)
    table = pq.read_table(fetch_artifact(ref) / DATA_FILE)
    # Our own tables keep `reference` as JSON text (curation.suites.rows); decode it when marked.
    encoded = (table.schema.metadata or {}).get(REFERENCE_ENCODING_KEY) == b"json"
    raw = table_to_rows(table) if encoded else table.to_pylist()
    return chat_rows(list(enumerate(raw, start=1)))


@task(name="stage-examples", cache_policy=NONE)
def stage_examples(
    stage: StageConfig, dataset_refs: dict[str, str], tokenizer: Any, eval_prompts: list[str],
    run_id: str,
) -> list[SFTExample]:
    """Encoded examples of `stage` (mixed, band-filtered, decontaminated); left-out rows logged."""
    from prefect.logging import get_run_logger

    from passband.curation.rows import quarantine
    from passband.tasks.reporting import tracking
    from passband.training.sft.data import encode_rows, mix_stage_rows

    datasets: dict[str, list[dict]] = {}
    left_out: list[dict] = []
    for name in stage.datasets:
        rows, bad = load_dataset_rows(dataset_refs[name])
        datasets[name] = rows
        left_out.extend({**row, "dataset": name} for row in bad)
    mixed, not_mixed = mix_stage_rows(datasets, stage.datasets, stage.bands, stage.seed)
    held_out = held_out_keys(eval_prompts)
    clean = [row for row in mixed if not asks_held_out(row["prompt"], held_out)]
    contaminated = [quarantine(row, "asks a question of the eval set") for row in mixed
                    if asks_held_out(row["prompt"], held_out)]
    examples, too_long = encode_rows(tokenizer, clean, stage.max_length)
    left_out += not_mixed + contaminated + too_long
    if not examples:
        raise ValueError(f"stage {stage.name!r} has no usable examples ({len(left_out)} rows left out; "
                         f"first reason: {left_out[0]['removed_reason'] if left_out else 'no rows'})")
    get_run_logger().info("stage %s: %d examples from %s, %d rows left out", stage.name, len(examples),
                          {name: sum(r["dataset"] == name for r in clean) for name in stage.datasets},
                          len(left_out))
    if left_out:
        with tempfile.TemporaryDirectory(prefix="passband-sft-") as tmp:
            path = Path(tmp) / f"{stage.name}.jsonl"
            path.write_text("".join(json.dumps(row, default=str) + "\n" for row in left_out))
            tracking.log_artifact_file(path, "quarantine", run_id)
    return examples

