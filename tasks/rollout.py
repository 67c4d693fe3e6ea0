"""Rollouts: open an engine, generate, turn samples into a table, measure the engine/trainer gap."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from prefect import task
from prefect.cache_policies import NONE

from passband.training.engines.protocol import RolloutEngine, Sample, SamplingSettings


def open_engine(kind: str, model_dir: str, engine: dict[str, Any]) -> RolloutEngine:
    """A live engine (not a task: it holds processes and memory for the flow's whole life)."""
    if kind == "vllm":
        from passband.training.engines.vllm_engine import VLLMEngine, VLLMSettings

        return VLLMEngine(Path(model_dir), VLLMSettings(
            dtype=engine["dtype"], memory_fraction=engine["memory_fraction"], kv_cache_gib=engine["kv_cache_gib"],
            max_model_len=engine["max_model_len"], max_num_seqs=engine["max_num_seqs"],
            seed=engine["seed"],
        ))
    if kind == "hf":
        from passband.training.engines.hf_engine import HFEngine

        return HFEngine(Path(model_dir), dtype="float32", seed=engine["seed"])
    raise ValueError(f"engine.kind must be 'vllm' or 'hf', got {kind!r}")


@task(name="generate", cache_policy=NONE)
def generate(engine: RolloutEngine, prompts: list[str], settings: SamplingSettings) -> tuple[list[list[Sample]], float]:
    """Samples per prompt and the wall seconds it took."""
    start = time.perf_counter()
    samples = engine.generate(prompts, settings)
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
def measure_vllm_kl(model_dir: str, samples: list[Sample], temperature: float, micro_batch: int = 8) -> float:
    """vllm_kl of `samples` against the trainer's fp32 torch model at the same weights."""
    import torch

    from passband.training.logprobs import pad_rows, response_logprobs
    from passband.training.model_source import load_causal_lm
    from passband.training.rl import mismatch_kl

    model = load_causal_lm(Path(model_dir)).eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(samples), micro_batch):
            chunk = [s for s in samples[start : start + micro_batch] if s.token_ids]
            if not chunk:
                continue
            trainer = response_logprobs(model, [s.prompt_token_ids for s in chunk],
                                        [s.token_ids for s in chunk], temperature)
            engine_logp, _ = pad_rows([s.logprobs for s in chunk], torch.float32)
            num = float(trainer.mask.sum())
            total += mismatch_kl(trainer.logp, engine_logp, trainer.mask) * num
            count += num
    return total / max(count, 1.0)
