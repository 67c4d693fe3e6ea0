"""The RL weight sync's memory, before and after publishing in the engine's dtype, in one process.

The RL flow's setting: the fp32 trainer's model and an in-process vLLM engine (bf16 by default)
in one process; the engine's packed weights released, as after a rollout; then one sync. Two ways:
- before: `save_pretrained` (fp32 safetensors) + the engine's in-place reload (the sync until
  this change);
- after: `tasks/steps/rl.py: push_weights` (training/weights: the tensors cast to the engine's
  dtype one at a time into 64 MB shards, manifest last, then the same reload);
- memory: push_weights with `engine.weight_transfer: memory` (the same cast tensors handed to the
  in-process engine's reload, nothing written).
They alternate for --rounds rounds. Per sync: the RSS when it starts, its peak (the kernel's
high-water mark, reset when it starts: tasks/host/memory.py), the bytes on disk and the seconds.
After each sync the engine samples the same prompts with the same seed: both ways must give the
same tokens and log-probs bit for bit (the engine ends up with the same bf16 weights).

    .venv/bin/python scripts/bench_weight_sync.py --model DIR
    .venv/bin/python scripts/bench_weight_sync.py --model DIR --lm-head-fp32
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="A safetensors checkpoint dir (the real model).")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--lm-head-fp32", action="store_true")
    args = parser.parse_args()

    from passband.tasks.host.memory import PhasePeaks, resident_gb
    from passband.tasks.steps.rl import push_weights
    from passband.training.chat import render_prompt
    from passband.training.engines import EngineConfig, SamplingConfig
    from passband.training.engines.vllm_engine import VLLMEngine
    from passband.training.model_source import load_causal_lm, load_tokenizer

    config = EngineConfig(dtype=args.dtype, lm_head_fp32=args.lm_head_fp32, in_process=True, kv_cache_gib=0.25,
                          max_model_len=512)
    model = load_causal_lm(args.model)
    engine = VLLMEngine(args.model, config)
    tokenizer = load_tokenizer(args.model)
    prompts = [render_prompt(tokenizer, q) for q in ("What is 3 + 4?", "Name a color.")]
    sampling = SamplingConfig(n=2, max_tokens=24, seed=1)

    def before(scratch: Path, version: int) -> Path:
        target = scratch / "weights-before"
        model.save_pretrained(target)
        engine.load_weights(target)
        return target

    def after(scratch: Path, version: int) -> Path:
        push_weights(model, engine, config, scratch, version)
        return scratch / "weights" / f"v{version}"

    def memory(scratch: Path, version: int) -> Path:
        push_weights(model, engine, config.model_copy(update={"weight_transfer": "memory"}), scratch, version)
        return scratch / "nothing-written"

    peaks, rows, samples = PhasePeaks(), [], {}
    with tempfile.TemporaryDirectory(dir=args.model.parent) as tmp:
        scratch = Path(tmp)
        for round_ in range(1, args.rounds + 1):
            for name, sync in (("before", before), ("after", after), ("memory", memory)):
                engine.release_weights()
                start_gb = sum(resident_gb().values())
                start = time.perf_counter()
                with peaks.phase(f"{name}-{round_}"):
                    target = sync(scratch, round_)
                seconds = time.perf_counter() - start
                on_disk = sum(p.stat().st_size for p in target.glob("*.safetensors"))
                rows.append((name, round_, start_gb, peaks.peaks_gb[f"{name}-{round_}"], on_disk / 1e9, seconds))
                out = engine.generate(prompts, sampling)
                samples[name, round_] = [(s.token_ids, s.logprobs) for group in out for s in group]
                if name == "before":
                    import shutil

                    shutil.rmtree(target)
    engine.close()
    print(f"engine dtype {args.dtype}, lm_head_fp32 {args.lm_head_fp32}, model {args.model}")
    print("| sync | round | RSS at start (GB) | peak (GB) | peak - start (GB) | on disk (GB) | s |")
    print("|---|---|---|---|---|---|---|")
    for name, round_, start_gb, peak_gb, disk_gb, seconds in rows:
        print(f"| {name} | {round_} | {start_gb:.2f} | {peak_gb:.2f} | {peak_gb - start_gb:+.2f} | {disk_gb:.3f} | "
              f"{seconds:.1f} |")
    same = all(samples["before", r] == samples["after", r] == samples["memory", r] for r in range(1, args.rounds + 1))
    print(f"samples after each sync identical (tokens and log-probs, bit for bit): {same}")


if __name__ == "__main__":
    main()
