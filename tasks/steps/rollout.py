"""Rollouts: open an engine, generate, turn samples into a table, measure the engine/trainer gap."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from prefect import task
from prefect.cache_policies import NONE

from passband.training.engines import RolloutEngine, Sample, SamplingConfig, open_engine

__all__ = ["generate", "measure_vllm_kl", "open_engine", "rollout_stats", "samples_table"]
# open_engine is re-exported: it is not a task (a live engine holds processes and memory for the
# flow's whole life), flows import it from here with the tasks they call on it.


@task(name="generate", cache_policy=NONE)
def generate(engine: RolloutEngine, prompts: list[str], sampling: SamplingConfig) -> tuple[list[list[Sample]], float]:
    """Samples per prompt and the wall seconds it took."""
    start = time.perf_counter()
    samples = engine.generate(prompts, sampling)
    return samples, time.perf_counter() - start


def samples_table(rows: list[dict[str, Any]], prompts: list[str], samples: list[list[Sample]]) -> pa.Table:
    """One row per sample: problem columns + text, token ids, engine log-probs, finish reason."""
    records = []
    for row, prompt, group in zip(rows, prompts, samples):
        for s in group:
            records.append({
                "prompt_id": row["id"], "task": row.get("task"), "subdomain": row.get("subdomain"),
                "prompt": prompt, "sample_index": s.sample_index, "text": s.text,
                "token_ids": s.token_ids, "logprobs": s.logprobs, "finish_reason": s.finish_reason,
                "num_tokens": len(s.token_ids), "prompt_num_tokens": len(s.prompt_token_ids),
                "prompt_token_ids": s.prompt_token_ids,
            })
    return pa.Table.from_pylist(records)


def rollout_stats(samples: list[list[Sample]], seconds: float) -> dict[str, float]:
    flat = [s for group in samples for s in group]
    num_tokens = sum(len(s.token_ids) for s in flat)
    return {
        "num_samples": len(flat),
        "tokens_per_s": num_tokens / seconds if seconds > 0 else 0.0,
        "mean_length": num_tokens / max(len(flat), 1),
        "truncation_rate": sum(s.finish_reason == "length" for s in flat) / max(len(flat), 1),
        "rollout_seconds": seconds,
    }


@task(name="measure-vllm-kl", cache_policy=NONE)
def measure_vllm_kl(model_dir: str, samples: list[Sample], temperature: float, micro_batch: int = 8,
                    trust_remote_code: bool = False) -> float:
    """vllm_kl of `samples` against the trainer's fp32 torch model at the same weights (loaded here)."""
    from passband.training.logprobs import engine_trainer_kl
    from passband.training.model_source import load_causal_lm

    model = load_causal_lm(Path(model_dir), trust_remote_code=trust_remote_code).eval()
    return engine_trainer_kl(model, [s.prompt_token_ids for s in samples], [s.token_ids for s in samples],
                             [s.logprobs for s in samples], temperature, micro_batch)
