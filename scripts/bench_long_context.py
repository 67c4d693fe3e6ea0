"""Peak memory per rank of one SFT step or one RL update at long sequences, by activation checkpointing and
sequence-parallel degree, on the shipped SmolLM2-135M (issue 69).

    .venv/bin/python scripts/bench_long_context.py --model DIR [--tokens 2048 4096 8192 16384]
        [--modes none selective every-layer] [--sp 1 2] [--phase sft rl] [--heap return keep] [--cap-gib 8]

`DIR`: a causal LM as a safetensors checkpoint (tests/conftest.py's smollm2_dir makes the shipped one:
`passband.training.model_source.gguf_to_safetensors`). Each point (a phase, a length, a checkpointing mode, an
SP degree) runs in processes of its own, so their peaks are their own: SP = 1 one process, SP = P P gloo ranks
under torchrun on the trainer mesh sequence_parallel = P (training/runtime/mesh.py), each rank holding N / P of
the sequence's tokens and 1/P of the weights, gradients and AdamW state (FSDP2 over shard x sp), the
all-to-all before attention giving it 1/P of the heads over all N (training/runtime/ulysses.py). fp32 throughout.
  sft: one sequence of N random tokens packed as the SFT loop packs it (the varlen kernel, the LM head in
       1024-token chunks, `PackedLMLoss` with the Ulysses group), one forward, backward and AdamW step;
  rl:  one `rl_update` (training/rl/update.py) on one row of N tokens (a 64-token prompt, the rest response,
       engine log-probs 0), the policy loaded as the RL trainer loads it (`load_policy`: its checkpointing),
       GRPO defaults with packed rows (`pack_rows` auto; SP needs them); the one row's advantage is 0 (a group of
       one), so `skip_zero_gradient_rows` is off for the row to be forwarded and backwarded at all.
Printed per point:
  peak:      each rank's peak RSS (GiB), and that peak less its RSS before the model loaded (max over the ranks,
             and per rank);
  estimate:  the memory model's peak for one rank (training/memory_model.py `trainer_memory` with the SP degree,
             `per_rank` for the sharded state: what `passband doctor` prints): weights, gradients, AdamW,
             activations, the logits chunk;
  seconds:   the step's wall time (one step, no warm-up: a rough figure on a shared box).
A point whose estimate over all its ranks exceeds `--cap-gib` is not run, and a running point is killed when the
RSS summed over its processes (torchrun's agent and the ranks) passes the cap (the parent polls every 0.1 s),
so the sweep never pushes a shared machine into swap.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GIB = 2**30
PROMPT_TOKENS = 64  # the RL row's prompt; the rest of the N tokens is its response
SFT_CHUNK = 1024  # StageConfig.loss_chunk_size's default


def proc_text(path: str) -> str:
    """A /proc file's text; '' once its process has exited (a rank may exit between two reads of /proc)."""
    try:
        with open(path) as f:
            return f.read()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def rss_bytes(pid: str = "self") -> int:
    statm = proc_text(f"/proc/{pid}/statm")
    return int(statm.split()[1]) * resource.getpagesize() if statm else 0


def tree_pids(pid: int) -> list[int]:
    """`pid` and every process below it (torchrun's agent and its ranks)."""
    tasks = os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []
    children = [int(c) for task in tasks for c in proc_text(f"/proc/{pid}/task/{task}/children").split()]
    return [pid, *(p for child in children for p in tree_pids(child))]


def tree_rss(pid: int) -> int:
    return sum(rss_bytes(str(p)) for p in tree_pids(pid))


def estimate_bytes(model_dir: Path, tokens: int, mode: str, sp: int, phase: str) -> int:
    """One rank's peak by the memory model: the tokens it holds (N / sp), its share of the state."""
    from passband.training.memory_model import ModelShape, per_rank, trainer_memory
    from passband.training.rl.config import RLAlgoConfig

    shape = ModelShape.from_hf_config(json.loads((model_dir / "config.json").read_text()))
    algo = RLAlgoConfig()
    chunk = SFT_CHUNK if phase == "sft" else algo.logprob_chunk_size
    memory = trainer_memory(shape, "fp32", tokens, chunk, kl_reference=phase == "rl" and algo.kl_coef > 0,
                            checkpointing=mode, sequence_parallel=sp)
    return per_rank(memory, shape, "fp32", sp).peak


def open_ranks() -> None:
    """Under torchrun: the process group on the mesh sequence_parallel = world size (every rank one SP group)."""
    from passband.training.runtime.distributed import open_process_group, world_size
    from passband.training.runtime.mesh import MeshShape

    if world_size() > 1:
        open_process_group(600.0, MeshShape(sequence_parallel=world_size()))


def random_ids(tokens: int, vocab: int) -> list[int]:
    import torch

    return torch.randint(0, vocab, (tokens,), generator=torch.Generator().manual_seed(0)).tolist()


def sft_step(model_dir: Path, tokens: int, mode: str, heap: str) -> tuple[float, float]:
    """One SFT step as the loop runs it under ranks (training/sft/loop.py `_prepare_model`); (its loss, seconds)."""
    import torch

    from passband.training.heap import use_heap
    from passband.training.model_source import load_causal_lm
    from passband.training.runtime.activation_checkpointing import enable_checkpointing
    from passband.training.runtime.distributed import shard_for_training, trainer_mesh
    from passband.training.runtime.mesh import sequence_parallel_group
    from passband.training.runtime.varlen_attention import VARLEN_SDPA
    from passband.training.sft.model_loss import PackedLMLoss
    from passband.training.sft.packing import SFTExample, collate_packed

    use_heap(heap, tokens)  # as the loop does at a stage's start (an explicit setting: the tokens do not matter)
    model = load_causal_lm(model_dir)
    enable_checkpointing(model, mode)
    model.train()
    ids = random_ids(tokens, model.config.vocab_size)
    batch = collate_packed([SFTExample(ids, [0] * 16 + [1] * (tokens - 16))], [[0]], pad_id=0)
    group = sequence_parallel_group(trainer_mesh("cpu"))
    loss_module = shard_for_training(PackedLMLoss(model, SFT_CHUNK, VARLEN_SDPA, "fp32", True, group),
                                     torch.device("cpu"), "fp32")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)  # after sharding: each rank's shards' state
    start = time.perf_counter()
    loss = loss_module(batch.input_ids, batch.position_ids, batch.targets, batch.cu_seqlens) / batch.num_loss_tokens
    loss.backward()
    optimizer.step()
    return loss.item(), time.perf_counter() - start


def rl_step(model_dir: Path, tokens: int, mode: str, heap: str) -> tuple[float, float]:
    """One RL update as the ranks run it (training/rl/trainer.py `load_policy`, ranks.py `shard_policy`);
    (the trainer's perplexity on the response: the row's loss is 0 with its advantage, seconds)."""
    import torch

    from passband.training.rl.batches.batching import RolloutBatch
    from passband.training.rl.config import RLAlgoConfig
    from passband.training.rl.ranks import shard_policy
    from passband.training.rl.trainer import load_policy
    from passband.training.rl.update import rl_update

    algo = RLAlgoConfig(precision="fp32", device="cpu", activation_checkpointing=mode, skip_zero_gradient_rows=False,
                        heap=heap)
    lm = load_policy(model_dir, algo)
    policy = shard_policy(lm, torch.device("cpu"), "fp32")
    optimizer = torch.optim.AdamW(lm.parameters(), lr=1e-6)
    ids = random_ids(tokens, lm.config.vocab_size)
    batch = RolloutBatch(prompt_ids=[ids[:PROMPT_TOKENS]], response_ids=[ids[PROMPT_TOKENS:]],
                         engine_logp=[[0.0] * (tokens - PROMPT_TOKENS)], rewards=[1.0], valid=[True], tasks=["math"],
                         group_size=1)
    start = time.perf_counter()
    metrics = rl_update(policy, None, optimizer, batch, algo)
    return metrics["trainer_ppl"], time.perf_counter() - start


def child(model_dir: Path, tokens: int, mode: str, phase: str, heap: str) -> dict:
    """This process's (or rank's) point: its peak RSS, its RSS before the model loaded, the step's seconds, and
    `check`: the SFT loss or the RL update's perplexity, the same at any SP degree (tests/test_bench_long_context.py).
    heap: the trainers' `heap` setting, "return" or "keep", set as they set it (training/heap.py `use_heap`: the SFT
    step at its start, as the loop does; the RL update inside `rl_update`)."""
    from passband.training.heap import trim_heap
    from passband.training.runtime.distributed import close_process_group, rank, world_size

    open_ranks()
    trim_heap()
    before = rss_bytes()
    check, seconds = (sft_step if phase == "sft" else rl_step)(model_dir, tokens, mode, heap)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    close_process_group()
    return {"rank": rank(), "local_tokens": tokens // world_size(), "peak": peak, "before": before,
            "seconds": seconds, "check": check}


def command(model_dir: Path, tokens: int, mode: str, sp: int, phase: str, heap: str, out: Path) -> list[str]:
    point = [__file__, "--child", str(out), "--model", str(model_dir), "--tokens", str(tokens), "--modes", mode,
             "--phase", phase, "--heap", heap]
    if sp == 1:
        return [sys.executable, *point]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(sp), *point]


def run_point(model_dir: Path, tokens: int, mode: str, sp: int, phase: str, heap: str,
              cap: int) -> list[dict] | str:
    """One point in processes of its own (each rank's result, by rank), killed if their summed RSS passes `cap`.
    Each rank writes its result to a file of its own: torchrun relays the ranks' stdout, and two ranks' lines
    came back run together on one line."""
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // sp))}
    env.pop("WORLD_SIZE", None)
    with tempfile.TemporaryDirectory() as out:
        return _watch(subprocess.Popen(command(model_dir, tokens, mode, sp, phase, heap, Path(out)), env=env),
                      cap, Path(out))


def _watch(proc: subprocess.Popen, cap: int, out: Path) -> list[dict] | str:
    """`proc`'s ranks' results from `out` once it exits, or why there are none."""
    while proc.poll() is None:
        if tree_rss(proc.pid) > cap:
            for pid in tree_pids(proc.pid):  # each by its id: torchrun starts its ranks in sessions of their own
                with contextlib.suppress(ProcessLookupError):  # a rank reaped since the listing
                    os.kill(pid, signal.SIGKILL)
            proc.wait()
            return f"killed: RSS passed the {cap / GIB:g} GiB cap"
        time.sleep(0.1)
    if proc.returncode != 0:
        return f"failed (exit {proc.returncode})"
    return [json.loads(path.read_text()) for path in sorted(out.glob("rank*.json"))]


def row(phase: str, tokens: int, mode: str, sp: int, heap: str, estimate: int, point: list[dict] | str) -> str:
    head = f"| {phase} | {tokens} | {sp} | {mode} | {heap} |"
    if isinstance(point, str):
        return f"{head} {point} | | | {estimate / GIB:.2f} | | |"
    used = [r["peak"] - r["before"] for r in point]
    per_rank = " / ".join(f"{u / GIB:.2f}" for u in used)
    return (f"{head} {max(r['peak'] for r in point) / GIB:.2f} | {max(used) / GIB:.2f} | {per_rank} | "
            f"{estimate / GIB:.2f} | {max(used) / estimate:.2f} | {max(r['seconds'] for r in point):.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--tokens", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    parser.add_argument("--modes", nargs="+", default=["none", "selective", "every-layer"])
    parser.add_argument("--sp", type=int, nargs="+", default=[1], help="sequence-parallel degrees (ranks per point)")
    parser.add_argument("--phase", nargs="+", choices=["sft", "rl"], default=["sft"])
    parser.add_argument("--heap", nargs="+", choices=["return", "keep"], default=["return"],
                        help="the trainers' heap setting (training/heap.py): return freed blocks to the system, or "
                             "keep them for reuse (glibc's default, the trainers' only behaviour before it)")
    parser.add_argument("--cap-gib", type=float, default=8.0, help="the most RSS a point's processes may hold together")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # a point's process: where it writes its result
    args = parser.parse_args()
    if args.child:
        result = child(args.model, args.tokens[0], args.modes[0], args.phase[0], args.heap[0])
        (args.child / f"rank{result['rank']}.json").write_text(json.dumps(result))
        return
    cap = int(args.cap_gib * GIB)
    print("| phase | tokens | SP | checkpointing | heap | peak RSS, max over ranks (GiB) | peak less RSS before loading, "
          "max (GiB) | the same per rank (GiB) | estimate per rank (GiB) | measured / estimate | s/step |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for phase in args.phase:
        for tokens in args.tokens:
            for sp in args.sp:
                for mode in args.modes:
                    estimate = estimate_bytes(args.model, tokens, mode, sp, phase)
                    for heap in args.heap:
                        if estimate * sp > cap:
                            point = f"not run: estimate x {sp} rank(s) over the {args.cap_gib:g} GiB cap"
                        else:
                            point = run_point(args.model, tokens, mode, sp, phase, heap, cap)
                        print(row(phase, tokens, mode, sp, heap, estimate, point), flush=True)


if __name__ == "__main__":
    main()
