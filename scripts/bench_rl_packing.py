"""Packed against padded RL micro-batches (algo.pack_rows, algo.micro_batch_tokens, issue 68) on a long-tailed batch,
beside TRL's GRPOTrainer update on the same batch: update tokens/s and peak memory, side by side in one run, each
row in a process of its own (its peak RSS is its own).

The batch: `--prompts` prompts x G=8 responses on the shipped SmolLM2-135M, response lengths log-normal (median
`--median`, sigma 1) capped at `--max-tokens`, the first of each group at the cap (the tail); 48-token prompts;
engine log-probs the model's own. Each row runs one warm-up update, then `--updates` timed ones (rl_update; the
config's defaults otherwise: micro_batch_size 8, activation checkpointing, seq-MIS, eager attention padded):

- padded: today's default (micro-batches of 8 rows sorted by length, each padded to its longest);
- packed: pack_rows (the same micro-batches, each one sequence, varlen attention);
- budget: pack_rows with micro_batch_tokens `--budget`;
- trl: TRL 1.16's GRPOTrainer (in `.venv/trl`, put on PYTHONPATH here) on the same prompt and completion ids,
  handed to it by its `rollout_func` (so nothing is generated), one optimizer step over the batch (micro-batches
  of 8: one group each, in rollout order, TRL's layout), no KL, its other defaults; its update is the step's
  time less the rollout function's and the rewards' (`GRPOTrainer._generate`, timed apart).

tokens/s counts the real tokens (prompt + response) of the batch per second of update, the same numerator for
every row. `--ranks R` also times each rank's share of the micro-batches (forward and backward of its own
micro-batches, one after another in one process, so no rank waits on another here) under today's round-robin of
8-row micro-batches and under the token budget's split. `--profile` profiles one update on TRL's fixed-length
batch (1 prompt x 8 x (64 + 192) tokens, as docs/benchmarks.md's "Our RL update beside TRL's") with
torch.profiler, its operators grouped by what they compute (by their input shapes).

    nice .venv/bin/python scripts/bench_rl_packing.py --max-tokens 1024 --precisions fp32 bf16_autocast --trl \
        --ranks 2 --profile
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

GROUP = 8
PROMPT_LEN = 48
REPO = Path(__file__).resolve().parents[1]


def long_tailed_lengths(num_prompts: int, group_size: int, median: float, max_tokens: int, seed: int) -> list[int]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    return [max_tokens if g == 0 else min(max_tokens, max(1, round(math.exp(math.log(median) + float(
        torch.randn(1, generator=gen)))))) for _ in range(num_prompts) for g in range(group_size)]


def model_dir_of(args: argparse.Namespace) -> Path:
    from passband.training.model_source import gguf_to_safetensors, smollm2_gguf_path

    model_dir = Path(args.model_dir)
    if not (model_dir / "config.json").exists():
        gguf_to_safetensors(smollm2_gguf_path(), model_dir)
    return model_dir


def build_batch(args: argparse.Namespace, model_dir: Path, lengths: list[int], prompt_len: int = PROMPT_LEN):
    """The RolloutBatch of `lengths` (G per prompt) with random token ids and the model's own log-probs."""
    import torch

    from passband.training.logprobs import sequence_logprobs
    from passband.training.model_source import load_causal_lm
    from passband.training.rl.batches.batching import RolloutBatch

    gen = torch.Generator().manual_seed(2)
    model = load_causal_lm(model_dir).eval()
    vocab = model.config.vocab_size
    num_prompts = len(lengths) // GROUP
    prompts = [torch.randint(0, vocab, (prompt_len,), generator=gen).tolist() for _ in range(num_prompts)]
    prompt_ids = [prompts[i // GROUP] for i in range(len(lengths))]
    response_ids = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lengths]
    engine = [lp.tolist() for lp in sequence_logprobs(model, prompt_ids, response_ids)]
    return RolloutBatch(prompt_ids=prompt_ids, response_ids=response_ids, engine_logp=engine,
                        rewards=[float(i % 3 == 0) for i in range(len(lengths))], valid=[True] * len(lengths),
                        tasks=["math"] * len(lengths), group_size=GROUP)


def config_of(path: str, args: argparse.Namespace):
    from passband.training.rl.config import RLAlgoConfig

    packed = path in ("packed", "budget")
    return RLAlgoConfig(precision=args.precision, pack_rows=packed, lr=1e-6,
                        micro_batch_tokens=args.budget if path == "budget" else None)


def ours(args: argparse.Namespace, batch, model_dir: Path) -> dict:
    import torch

    from passband.training.rl.trainer import load_policy
    from passband.training.rl.update import build_optimizer, rl_update

    torch.manual_seed(0)
    cfg = config_of(args.path, args)
    model = load_policy(model_dir, cfg)
    optimizer = build_optimizer(model, cfg)
    rl_update(model, None, optimizer, batch, cfg)  # warm-up
    seconds = []
    for _ in range(args.updates):
        start = time.perf_counter()
        rl_update(model, None, optimizer, batch, cfg)
        seconds.append(time.perf_counter() - start)
    return {"seconds": seconds}


def trl(args: argparse.Namespace, batch, model_dir: Path) -> dict:
    """TRL's GRPOTrainer on `batch`'s ids (module docstring)."""
    import tempfile

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    num_prompts = batch.num_rows // GROUP
    rows_of = {f"p{k}": list(range(k * GROUP, (k + 1) * GROUP)) for k in range(num_prompts)}
    generate_seconds: list[float] = []

    def rollout(prompts: list[str], _trainer) -> dict:
        # one entry per completion when TRL repeats each prompt G times, else G completions per prompt
        if len(prompts) == GROUP * len(set(prompts)):
            taken = {p: iter(rows) for p, rows in rows_of.items()}
            rows = [next(taken[p]) for p in prompts]
        else:
            rows = [row for p in prompts for row in rows_of[p]]
        return {"prompt_ids": [batch.prompt_ids[i] for i in rows], "completion_ids": [batch.response_ids[i] for i in rows],
                "logprobs": [batch.engine_logp[i] for i in rows]}

    def rewards(completions, **_) -> list[float]:
        return [float(index % 3 == 0) for index in range(len(completions))]

    class TimedGRPO(GRPOTrainer):
        def _generate(self, prompts):
            start = time.perf_counter()
            result = super()._generate(prompts)
            generate_seconds.append(time.perf_counter() - start)
            return result

    class StepTimer(TrainerCallback):
        seconds: list[float] = []

        def on_step_begin(self, *_, **__):
            self.start = time.perf_counter()

        def on_step_end(self, *_, **__):
            self.seconds.append(time.perf_counter() - self.start)

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    timer = StepTimer()
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    with tempfile.TemporaryDirectory() as output_dir:
        config = GRPOConfig(
            output_dir=output_dir, use_cpu=True, bf16=args.precision == "bf16_autocast", report_to="none",
            save_strategy="no", logging_steps=1, disable_tqdm=True, seed=0, max_steps=args.updates + 1,
            learning_rate=1e-6, lr_scheduler_type="constant", per_device_train_batch_size=GROUP,
            gradient_accumulation_steps=num_prompts, num_generations=GROUP,
            max_completion_length=max(len(r) for r in batch.response_ids), temperature=1.0, top_p=1.0, beta=0.0,
            num_iterations=1)
        trainer = TimedGRPO(model=model, reward_funcs=rewards, args=config,
                            processing_class=AutoTokenizer.from_pretrained(model_dir), rollout_func=rollout,
                            train_dataset=Dataset.from_list([{"prompt": p} for p in rows_of]), callbacks=[timer])
        trainer.train()
    steps = timer.seconds[1:]
    generated = generate_seconds[1:]
    return {"seconds": [s - g for s, g in zip(steps, generated)], "trl_generate_s": generated}


def rank_shares(args: argparse.Namespace, batch, model_dir: Path) -> dict:
    """Seconds of each rank's own micro-batches (forward + backward of a stand-in loss with the real one's graph),
    today's round-robin of micro_batch_size rows against the token budget's split."""
    from unittest import mock

    import torch

    from passband.training.rl import update
    from passband.training.rl.trainer import load_policy
    from passband.training.runtime.distributed import rank_micro_batches
    from passband.training.runtime.precision import resolve_precision

    rows = list(range(batch.num_rows))
    out = {}
    for name, path in (("today (8 rows, padded)", "padded"), ("today (8 rows, packed)", "packed"),
                       (f"budget {args.budget} (packed)", "budget")):
        cfg = config_of(path, args)
        model = load_policy(model_dir, cfg)
        precision = resolve_precision(cfg.precision, torch.device("cpu"))
        with mock.patch.object(update, "world_size", lambda: args.ranks):
            chunks = update._micro_batches(batch, rows, cfg)
        seconds = []
        with update._attention_for(model, None, cfg):
            update._forward_logprobs(model, batch, chunks[0], cfg, precision).logp.sum().backward()  # warm-up
            for r in range(args.ranks):
                start = time.perf_counter()
                for index, counts in rank_micro_batches(len(chunks), args.ranks, r):
                    update._forward_logprobs(model, batch, chunks[index], cfg, precision).logp.sum().backward()
                seconds.append(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
        out[name] = {"seconds": seconds, "micro_batches": len(chunks)}
    return out


def profile(args: argparse.Namespace, model_dir: Path) -> dict:
    """One update on TRL's fixed-length batch under torch.profiler: each operator's self CPU time, grouped by what
    it computes, read off its input shapes (SmolLM2: hidden 576, MLP 1536, vocabulary 49152)."""
    import torch
    from torch.profiler import ProfilerActivity, profile as torch_profile

    from passband.training.rl.trainer import load_policy
    from passband.training.rl.update import build_optimizer, rl_update

    batch = build_batch(args, model_dir, [192] * GROUP, prompt_len=64)
    cfg = config_of("padded", args)
    model = load_policy(model_dir, cfg)
    optimizer = build_optimizer(model, cfg)
    rl_update(model, None, optimizer, batch, cfg)  # warm-up
    start = time.perf_counter()
    with torch_profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        rl_update(model, None, optimizer, batch, cfg)
    wall = time.perf_counter() - start
    hidden, inner, vocab = model.config.hidden_size, model.config.intermediate_size, model.config.vocab_size
    groups: dict[str, float] = {}
    for event in prof.events():
        if event.name.startswith("Optimizer.step") or event.name.startswith("Optimizer.zero_grad"):
            group = "optimizer (AdamW step)"
        else:
            parent, group = event.cpu_parent, None
            while parent is not None:  # an operator the optimizer ran: its time is the optimizer's
                if parent.name.startswith("Optimizer."):
                    group = "inside the optimizer"
                    break
                parent = parent.cpu_parent
            if group is None:
                group = _group(event.name, event.input_shapes, hidden, inner, vocab)
        groups[group] = groups.get(group, 0.0) + event.self_cpu_time_total / 1e6
    groups["optimizer (AdamW step)"] = groups.get("optimizer (AdamW step)", 0.0) + groups.pop("inside the optimizer", 0.0)
    tokens = GROUP * (64 + 192)
    layers = model.config.num_hidden_layers
    kv = model.config.num_key_value_heads * hidden // model.config.num_attention_heads
    # multiply-adds x 2 = FLOPs. The decoder: the fused step's forward, its recompute (activation checkpointing)
    # and backward (2 forwards' worth) = 4 forwards. The head: forward, recompute (each chunk is checkpointed),
    # backward (2) and the entropy's forward = 5, over the response tokens only. Eager attention computes the
    # whole T x T score matrix, masked half included.
    flops = {"MLP (gate, up, down; forward, recompute, backward)": 4 * 2 * tokens * layers * 3 * hidden * inner,
             "attention projections (q, k, v, o)": 4 * 2 * tokens * layers * (2 * hidden * hidden + 2 * hidden * kv),
             "attention core (scores, softmax, values)": 4 * 2 * layers * GROUP * 2 * (64 + 192) ** 2 * hidden,
             "LM head and embedding (log-probs, their recompute and backward, entropy)":
                 5 * 2 * GROUP * 192 * hidden * vocab}
    return {"wall_s": wall, "groups": groups, "flops": flops}


def _group(name: str, shapes: list, hidden: int, inner: int, vocab: int) -> str:
    """What an operator computes, by its input shapes (and, for attention's own, its name)."""
    dims = {d for shape in shapes if isinstance(shape, list) for d in shape if isinstance(d, int)}
    if vocab in dims:
        return "LM head and embedding (log-probs, their recompute and backward, entropy)"
    if inner in dims:
        return "MLP (gate, up, down; forward, recompute, backward)"
    if any(k in name for k in ("softmax", "bmm", "scaled_dot", "attention")):
        return "attention core (scores, softmax, values)"
    if hidden in dims and any(k in name for k in ("mm", "linear", "matmul")):
        return "attention projections (q, k, v, o)"
    return "other (norms, RoPE, elementwise, copies)"


def child(args: argparse.Namespace) -> None:
    model_dir = model_dir_of(args)
    if args.path == "profile":
        print(json.dumps(profile(args, model_dir)))
        return
    lengths = long_tailed_lengths(args.prompts, GROUP, args.median, args.max_tokens, seed=1)
    batch = build_batch(args, model_dir, lengths)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if args.path == "ranks":
        print(json.dumps(rank_shares(args, batch, model_dir)))
        return
    found = trl(args, batch, model_dir) if args.path == "trl" else ours(args, batch, model_dir)
    real = sum(len(p) + len(r) for p, r in zip(batch.prompt_ids, batch.response_ids))
    print(json.dumps({**found, "path": args.path, "precision": args.precision, "real_tokens": real,
                      "lengths": sorted(lengths), "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                      * 1024 / 1e9, "rss_before_update_gb": rss_before / 1e9}))


def run_child(path: str, precision: str, argv: list[str]) -> dict:
    env = dict(os.environ)
    if path == "trl":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / ".venv" / "trl"), env.get("PYTHONPATH")]))
    command = [sys.executable, __file__, *argv, "--path", path, "--precision", precision]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        sys.exit(f"{path} ({precision}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--median", type=float, default=64.0)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--updates", type=int, default=1)
    parser.add_argument("--budget", type=int, default=2048, help="micro_batch_tokens of the 'budget' row")
    parser.add_argument("--precisions", nargs="+", default=["fp32"], choices=["fp32", "bf16_autocast"])
    parser.add_argument("--paths", nargs="+", default=["padded", "packed"], choices=["padded", "packed", "budget"],
                        help="our rows (module docstring)")
    parser.add_argument("--trl", action="store_true", help="also TRL's GRPOTrainer update on the same batch")
    parser.add_argument("--ranks", type=int, default=0, help="also each rank's share of the micro-batches")
    parser.add_argument("--profile", action="store_true", help="also profile one update on TRL's fixed-length batch")
    parser.add_argument("--model-dir", default=str(Path.home() / ".cache" / "passband-bench" / "smollm2"))
    parser.add_argument("--path", choices=["padded", "packed", "budget", "trl", "ranks", "profile"],
                        help="(internal) run one row in this process")
    parser.add_argument("--precision", default="fp32", help="(internal) the row's precision")
    args = parser.parse_args()
    if args.path:
        child(args)
        return
    argv = [a for a in sys.argv[1:]]
    paths = args.paths + ["trl"] * args.trl
    print(f"{args.prompts} prompts x {GROUP}, response lengths log-normal (median {args.median:g}) capped at "
          f"{args.max_tokens}, {PROMPT_LEN}-token prompts; {args.updates} timed update(s) after a warm-up")
    for precision in args.precisions:
        results = [run_child(path, precision, argv) for path in paths]
        print(f"\nresponse lengths (sorted): {results[0]['lengths']}; real tokens {results[0]['real_tokens']}")
        print(f"\n| {precision} | s/update (median) | real tokens/s | over {paths[0]} | over TRL | peak RSS GB |")
        print("|---|---|---|---|---|---|")
        trl_s = median(results[-1]["seconds"]) if args.trl else None
        padded_s = median(results[0]["seconds"])  # the first of --paths
        for r in results:
            s = median(r["seconds"])
            over_trl = f"{trl_s / s:.2f}x" if trl_s else "-"
            print(f"| {r['path']} | {s:.2f} | {r['real_tokens'] / s:.0f} | {padded_s / s:.2f}x | {over_trl} | "
                  f"{r['peak_rss_gb']:.2f} |")
    if args.ranks:
        shares = run_child("ranks", args.precisions[0], argv)
        print(f"\n| split ({args.ranks} ranks, {args.precisions[0]}) | micro-batches | each rank's seconds | "
              "slowest / fastest |")
        print("|---|---|---|---|")
        for name, found in shares.items():
            s = found["seconds"]
            print(f"| {name} | {found['micro_batches']} | {' / '.join(f'{x:.2f}' for x in s)} | "
                  f"{max(s) / min(s):.2f} |")
    if args.profile:
        found = run_child("profile", args.precisions[0], argv)
        total = sum(found["groups"].values())
        print(f"\nprofile, {args.precisions[0]}, 1 x 8 x (64 + 192) tokens: update {found['wall_s']:.2f} s wall "
              f"({total:.2f} s in operators)")
        print("| where | s | share | GFLOP | GFLOP/s |")
        print("|---|---|---|---|---|")
        for name, seconds in sorted(found["groups"].items(), key=lambda kv: -kv[1]):
            flops = found["flops"].get(name)
            rate = f"{flops / 1e9 / seconds:.0f}" if flops and seconds > 0 else "-"
            print(f"| {name} | {seconds:.2f} | {seconds / total:.0%} | "
                  f"{flops / 1e9:.0f} |" if flops else f"| {name} | {seconds:.2f} | {seconds / total:.0%} | - |",
                  f"{rate} |")


if __name__ == "__main__":
    main()
