"""Where the RL trainer's memory goes: RSS of one process after each stage of an RL update.

One batch shaped like the issue-16 config (P=6 prompts x G=8, prompts of --prompt-tokens, responses
of --response-tokens, random token ids: memory and time do not depend on the values) through
`rl_update` on the real model. Each variant runs in its own process, so its RSS high-water mark
is its own; stages: imports, model loaded, optimizer built (AdamW state is allocated lazily, at
the first step), after each update, after the weight sync's save and after malloc_trim (what the
process still holds; the difference is freed heap that glibc kept), and seconds of the update.
The peak of each phase (the no-grad scoring pass, forward + backward, the optimizer step, the
save, "other": the rest after loading) is the kernel's high-water mark VmHWM, reset at each phase
boundary (/proc/self/clear_refs, tasks.memory.PhasePeaks); the run's peak is the largest of them,
and the stage "peak while loading" is the mark before the first of them.

    .venv/bin/python scripts/bench_rl_trainer_memory.py --model DIR
    .venv/bin/python scripts/bench_rl_trainer_memory.py --model DIR --variant precision=fp32
    .venv/bin/python scripts/bench_rl_trainer_memory.py --model DIR --steps 8 --varied-lengths \
        --variant pad_to_multiple=1 --variant pad_to_multiple=16     # RSS after each update
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def rss_gb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 1e9


def in_phase(phases, name: str, fn):
    """`fn`, each call of it a phase `name` of `phases` (tasks.memory.PhasePeaks)."""
    def wrapped(*args, **kwargs):
        with phases.phase(name):
            return fn(*args, **kwargs)
    return wrapped


def one(model_dir: Path, overrides: dict, prompt_tokens: int, response_tokens: int, steps: int,
        varied_lengths: bool) -> dict:
    import torch

    stages = {"python + torch": rss_gb()}
    from passband.tasks.host.memory import PhasePeaks, high_water_mark_gb
    from passband.training.heap import trim_heap
    from passband.training.rl import update
    from passband.training.rl.batches.batching import RolloutBatch
    from passband.training.rl.config import RLAlgoConfig
    from passband.training.rl.trainer import open_trainer
    from passband.training.weights.versions import publish_version

    stages["imports"] = rss_gb()
    algo = RLAlgoConfig(lr=1e-5, micro_batch_size=8, **overrides)
    trainer = open_trainer(model_dir, ["math"], algo)
    stages["model + optimizer (no state yet)"] = rss_gb()
    gen = torch.Generator().manual_seed(0)
    vocab = trainer.model.config.vocab_size

    def make_batch() -> RolloutBatch:
        """6 prompts x 8 responses of random tokens: all `response_tokens` long, or, with
        varied_lengths, each of a length drawn from 5..response_tokens (as rollouts are)."""
        prompts, responses = [], []
        for _ in range(6):
            prompt = torch.randint(0, vocab, (prompt_tokens,), generator=gen).tolist()
            for _ in range(8):
                length = int(torch.randint(5, response_tokens + 1, (1,), generator=gen)) if varied_lengths else response_tokens
                prompts.append(prompt)
                responses.append(torch.randint(0, vocab, (length,), generator=gen).tolist())
        return RolloutBatch(prompt_ids=prompts, response_ids=responses,
                            engine_logp=[[-1.0] * len(response) for response in responses],
                            rewards=[float(i % 3 == 0) for i in range(48)], valid=[True] * 48, tasks=["math"] * 48,
                            group_size=8)

    batch = make_batch()
    stages["peak while loading"] = high_water_mark_gb()
    phases = PhasePeaks()
    update._scoring_pass = in_phase(phases, "scoring pass (no grad)", update._scoring_pass)
    update._inner_step = in_phase(phases, "forward + backward", update._inner_step)
    trainer.optimizer.step = in_phase(phases, "optimizer step", trainer.optimizer.step)
    with phases.phase("other"):  # the rest of the run from here: batches, the update's own code, the trim
        seconds = []
        for step in range(steps):
            if varied_lengths and step:
                batch = make_batch()
            start = time.perf_counter()
            metrics = update.rl_update(trainer.model, trainer.ref_model, trainer.optimizer, batch, algo)
            seconds.append(time.perf_counter() - start)
            stages[f"after update {len(seconds)}"] = rss_gb()
        # the weight sync's save (tasks/steps/rl.py: push_weights), for the RL flow's bf16 engine
        save = in_phase(phases, "weight-sync save", publish_version)
        with tempfile.TemporaryDirectory() as scratch:
            save(trainer.model, Path(scratch) / "weights", 1, "bfloat16", False)
        stages["after weight-sync save"] = rss_gb()
        trim_heap()  # what is left is what the process holds: the rest was freed heap kept by malloc
        stages["after malloc_trim"] = rss_gb()
    return {"variant": overrides, "stages_gb": stages, "phase_peaks_gb": phases.peaks_gb,
            "peak_gb": max(phases.peaks_gb.values()), "update_s": seconds, "skipped": metrics["skipped"]}


def run_child(script: str, variant: str, argv: list[str]) -> dict:
    """Run `script --child OVERRIDES argv` in a process of its own; the JSON its last line prints.

    variant: "key=value,key=value" config overrides; values that read as JSON (numbers, true,
    false, null, lists) are parsed, the rest stay strings."""
    overrides = {}
    for item in filter(None, variant.split(",")):
        key, value = item.split("=", 1)
        overrides[key] = json.loads(value) if value[:1] in "0123456789-[{" or value in ("true", "false", "null") else value
    out = subprocess.run([sys.executable, script, "--child", json.dumps(overrides), *argv],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def variant_parser(doc: str, config: str, default: str) -> argparse.ArgumentParser:
    """The arguments both memory benchmarks take: the model, the variants, and the child's hidden flag."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="A safetensors checkpoint dir (the real model).")
    parser.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                        help=f"{config} overrides of one variant, each run in a process of its own (repeatable; "
                        f"default: {default}).")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return parser


def main() -> None:
    parser = variant_parser(__doc__, "RLAlgoConfig", "fp32 and bf16_autocast")
    parser.add_argument("--prompt-tokens", type=int, default=60)
    parser.add_argument("--response-tokens", type=int, default=128)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--varied-lengths", action="store_true",
                        help="A new batch each update, response lengths drawn from 5..--response-tokens.")
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(one(args.model, json.loads(args.child), args.prompt_tokens, args.response_tokens, args.steps,
                             args.varied_lengths)))
        return
    variants = args.variant or ["precision=fp32", "precision=bf16_autocast"]
    for variant in variants:
        result = run_child(__file__, variant, ["--model", str(args.model), "--prompt-tokens", str(args.prompt_tokens),
                                               "--response-tokens", str(args.response_tokens), "--steps", str(args.steps),
                                               *(["--varied-lengths"] if args.varied_lengths else [])])
        stages = ", ".join(f"{name} {gb:.2f}" for name, gb in result["stages_gb"].items())
        phases = ", ".join(f"{name} {gb:.2f}" for name, gb in result["phase_peaks_gb"].items())
        print(f"{variant}: peak {result['peak_gb']:.2f} GB; RSS after: {stages}; phase peaks: {phases}; update s: "
              + " ".join(f"{s:.1f}" for s in result["update_s"]), flush=True)


if __name__ == "__main__":
    main()
