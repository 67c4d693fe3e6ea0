"""Where the rollout engine's memory goes: RSS of each of its processes after each stage of RL.

The engine of scripts/bench_rl_vs_trl.py (the checkpoint, 6 math prompts x G=8, 128 tokens, a KV
cache sized to that batch as the RL flow's kv_cache_gib="batch") started alone, one process tree
per variant (EngineConfig overrides), through what an RL iteration does to it: start-up, one
rollout batch, a weight reload from the trainer's safetensors (the flow's sync: fp32 as the
trainer saves them, or --sync-dtype bfloat16), another batch and reload. After each stage, every
process of the tree (this one too: the LLM frontend, or the whole engine when in_process) is
reported by its RSS and high-water mark (VmHWM, GB).

    .venv/bin/python scripts/bench_rl_engine_memory.py --model DIR
    .venv/bin/python scripts/bench_rl_engine_memory.py --model DIR --variant in_process=true \\
        --variant max_num_seqs=48,max_num_batched_tokens=1024
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from pathlib import Path


def _memory(pid: int) -> tuple[float, float]:
    """(RSS, VmHWM) of process `pid` in GB."""
    with open(f"/proc/{pid}/status") as f:
        status = f.read()
    rss, hwm = (int(re.search(rf"{key}:\s+(\d+) kB", status).group(1)) * 1024 / 1e9 for key in ("VmRSS", "VmHWM"))
    return rss, hwm


def _tree() -> dict[str, tuple[float, float]]:
    import psutil

    me = psutil.Process()
    out = {}
    for proc in [me, *me.children(recursive=True)]:
        name = "bench process (frontend)" if proc.pid == me.pid else " ".join(proc.cmdline())[:40]
        for marker, label in (("EngineCore", "vLLM engine core"), ("Worker", "vLLM worker"),
                              ("resource_tracker", "mp resource tracker")):
            if marker in proc.name() or marker in " ".join(proc.cmdline()):
                name = label
        out[f"{name} [{proc.pid}]"] = _memory(proc.pid)
    return out


def one(model_dir: Path, overrides: dict, prompts: int, group: int, max_tokens: int, sync_dir: Path) -> dict:
    from passband.curation.suites.source import load_problems
    from passband.training.chat import render_prompt
    from passband.training.engines.config import EngineConfig, SamplingConfig
    from passband.training.engines.kv_cache import rollout_kv_cache_gib
    from passband.training.engines.vllm_engine import VLLMEngine
    from passband.training.model_source import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    rows = load_problems(suite="math", num_problems=96, seed=0, difficulty=0, subdomains=["arithmetic"],
                         answer_format="plain").rows
    config = EngineConfig(**overrides)
    gib = rollout_kv_cache_gib(model_dir, config.dtype, tokenizer, [r["prompt"] for r in rows], None,
                               prompts * group, max_tokens, config.max_model_len)
    config = config.model_copy(update={"kv_cache_gib": gib})
    texts = [render_prompt(tokenizer, row["prompt"]) for row in rows[:prompts]]
    sampling = SamplingConfig(n=group, temperature=1.0, max_tokens=max_tokens, seed=1)
    stages = {"imports": _tree()}
    engine = VLLMEngine(model_dir, config)
    stages["started"] = _tree()
    for step in (1, 2):
        engine.generate(texts, sampling)
        stages[f"rollout {step}"] = _tree()
        engine.load_weights(sync_dir)
        stages[f"weight load {step}"] = _tree()
    engine.close()
    return {"variant": overrides, "kv_cache_gib": gib, "stages": stages}


def main() -> None:
    from bench_rl_trainer_memory import run_child, variant_parser  # this script's folder is on sys.path

    parser = variant_parser(__doc__, "EngineConfig", "the defaults")
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--sync-dtype", choices=["float32", "bfloat16"], default="float32",
                        help="dtype of the safetensors the engine reloads (the trainer saves fp32).")
    parser.add_argument("--sync-dir", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(one(args.model, json.loads(args.child), args.prompts, args.group, args.max_tokens,
                             args.sync_dir)))
        return
    import torch

    from passband.training.model_source import load_causal_lm

    with tempfile.TemporaryDirectory() as scratch:
        sync_dir = Path(scratch) / "weights"
        load_causal_lm(args.model).to(getattr(torch, args.sync_dtype)).save_pretrained(sync_dir)
        for variant in args.variant or [""]:
            result = run_child(__file__, variant, ["--model", str(args.model), "--prompts", str(args.prompts), "--group",
                                                   str(args.group), "--max-tokens", str(args.max_tokens),
                                                   "--sync-dir", str(sync_dir)])
            print(f"\n{variant or 'defaults'} (KV cache {result['kv_cache_gib']:.2f} GiB, sync {args.sync_dtype}): "
                  "RSS / high-water mark per process, GB", flush=True)
            for stage, procs in result["stages"].items():
                total = sum(rss for rss, _ in procs.values())
                print(f"  {stage:14s} total RSS {total:.2f}: " + "; ".join(
                    f"{name} {rss:.2f}/{hwm:.2f}" for name, (rss, hwm) in procs.items()), flush=True)


if __name__ == "__main__":
    main()
