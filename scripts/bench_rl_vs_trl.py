"""`passband run rl` against TRL's GRPOTrainer at the same config, side by side in one run.

Both train the same model on the same prompts (passband's math suite, written to a JSONL file the
TRL driver reads) with the same reward (the last number of the completion equals the reference:
passband's math verifier with the plain rule; an exact-number check in the TRL driver), P prompts x
G samples per step, the same max tokens, temperature, lr, clip range, no KL, one optimizer step per
batch. Each system runs in its own process tree (TRL in its own venv, `make bench-venv`), and this
script samples the RSS of every process of that tree every 0.5 s with psutil.

Reported per system: seconds per iteration (median and range over the steps; timed from the first
step's start, so model loading and engine start-up are excluded), peak RSS summed over the tree,
each process's own peak, and the mean reward of each step (both must have trained: rewards logged).
TRL runs with its own defaults otherwise (HF generate, bf16 autocast and gradient checkpointing).

    .venv/bin/python scripts/bench_rl_vs_trl.py                       # the issue-16 config
    .venv/bin/python scripts/bench_rl_vs_trl.py --steps 2 --only passband --set algo.precision=fp32
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent

# Runs in TRL's venv: no passband import there. argv[1] is a JSON object of the settings below.
TRL_DRIVER = r'''
import json, re, sys, time
from fractions import Fraction

from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

args = json.loads(sys.argv[1])
rows = [json.loads(line) for line in open(args["problems"])]
dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"]}], "reference": r["reference"]}
                             for r in rows])
# passband's last-number rule (curation/verifiers/math.py), compared as exact rationals
NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|-?\.\d+")

def exact_answer(completions, reference, **_):
    scores = []
    for completion, ref in zip(completions, reference):
        numbers = NUMBER.findall(completion[-1]["content"])
        ok = bool(numbers) and Fraction(numbers[-1].replace(",", "")) == Fraction(ref)
        scores.append(float(ok))
    return scores

class Timer(TrainerCallback):
    """One JSON line per optimizer step: wall seconds since the previous step ended, and the reward."""
    def on_train_begin(self, *a, **k):
        self.last = time.perf_counter()
    def on_step_end(self, *a, **k):
        now = time.perf_counter()
        self.seconds, self.last = now - self.last, now
    def on_log(self, _args, state, _control, logs=None, **k):
        if logs and "reward" in logs:
            step = {"step": state.global_step, "seconds": self.seconds, "reward": logs["reward"]}
            print("BENCH " + json.dumps(step), flush=True)  # the trainer prints its own log dicts too

config = GRPOConfig(
    output_dir=args["output_dir"], use_cpu=True, report_to="none", save_strategy="no", logging_steps=1, seed=0,
    max_steps=args["steps"], learning_rate=args["lr"], lr_scheduler_type="constant",
    # one optimizer step per batch of P prompts x G: micro-batches of G, accumulated P times
    per_device_train_batch_size=args["group"], gradient_accumulation_steps=args["prompts"],
    num_generations=args["group"], max_completion_length=args["max_tokens"], temperature=args["temperature"],
    top_p=1.0, top_k=0, beta=0.0, epsilon=0.2, epsilon_high=0.28, num_iterations=1, mask_truncated_completions=True,
)
trainer = GRPOTrainer(model=args["model"], reward_funcs=exact_answer, args=config, train_dataset=dataset,
                      callbacks=[Timer()])
trainer.train()
'''


@dataclass
class TreeMemory:
    """Peak RSS of a process tree (summed over its processes at each sample) and of each process."""

    root: int
    peak_total: int = 0
    peaks: dict[int, tuple[str, int, int]] = field(default_factory=dict)
    """pid -> (label, peak RSS bytes, file-backed and shared bytes at that peak: libraries, mmapped weights)."""
    engine_cpu: list[tuple[float, float]] = field(default_factory=list)
    """(unix time, CPU seconds used so far by the tree's vLLM processes), one per sample."""

    def sample(self) -> None:
        root = psutil.Process(self.root)
        total, engine_cpu = 0, 0.0
        for proc in [root, *root.children(recursive=True)]:
            try:
                info = proc.memory_info()
                # labelled at every sample: vLLM renames its processes (setproctitle) after they start
                label = _label(proc, proc.pid == self.root)
                cpu = proc.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += info.rss
            _, peak, shared = self.peaks.get(proc.pid, ("", 0, 0))
            if info.rss > peak:
                peak, shared = info.rss, info.shared
            self.peaks[proc.pid] = (label, peak, shared)
            if label.startswith("vLLM"):
                engine_cpu += cpu.user + cpu.system
        self.peak_total = max(self.peak_total, total)
        self.engine_cpu.append((time.time(), engine_cpu))

    def engine_cores(self, start: float, stop: float) -> float:
        """Cores the vLLM processes used on average between unix times `start` and `stop`."""
        inside = [(t, c) for t, c in self.engine_cpu if start <= t <= stop]
        if len(inside) < 2:
            return float("nan")
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def _label(proc: psutil.Process, is_root: bool) -> str:
    """A short name: the process title vLLM and Prefect set, else the command's script."""
    cmdline = " ".join(proc.cmdline())
    if is_root:
        return "main process (trainer)"
    for marker, label in (("EngineCore", "vLLM engine core"), ("Worker", "vLLM worker"), ("uvicorn", "Prefect API"),
                          ("prefect", "Prefect API"), ("resource_tracker", "mp resource tracker")):
        if marker in cmdline or marker in proc.name():
            return label
    return f"{proc.name()}: {cmdline[:60]}"


def run_tree(cmd: list[str], env: dict[str, str], log_path: Path) -> tuple[str, TreeMemory, float]:
    """(stdout, memory of the tree sampled every 0.5 s, wall seconds); stderr goes to `log_path`."""
    start = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT)
        memory = TreeMemory(proc.pid)
        done = threading.Event()

        def watch() -> None:
            while not done.wait(0.5):
                if proc.poll() is None:
                    memory.sample()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        out, _ = proc.communicate()
        done.set()
        watcher.join()
    log_path.with_suffix(".stdout").write_text(out)
    if proc.returncode != 0:
        sys.exit(f"{cmd[0]} failed (exit {proc.returncode}); its log: {log_path}")
    return out, memory, time.perf_counter() - start


@dataclass
class Result:
    name: str
    seconds: list[float]
    rewards: list[float]
    memory: TreeMemory
    wall_s: float
    parts: dict[str, list[float]] = field(default_factory=dict)
    """Per-step breakdowns (passband: rollout, training, sync seconds; vllm_kl; the flow process's
    peak RSS per phase)."""


def run_passband(args: argparse.Namespace, model_dir: Path, work: Path) -> Result:
    home = work / "passband-home"
    config = {
        "model": str(model_dir),
        "datasets": {"math": {"suite": "math", "num_problems": args.num_problems, "difficulty": 0,
                              "subdomains": ["arithmetic"], "answer_format": "plain"}},
        "prompts_per_step": args.prompts, "num_iterations": args.steps, "checkpoint_every": 0, "eval": None,
        "sampling": {"n": args.group, "temperature": args.temperature, "max_tokens": args.max_tokens},
        "algo": {"lr": args.lr, "micro_batch_size": args.group,
                 "clip_low": 0.2, "clip_high": 0.28, "kl_coef": 0.0, "num_inner_steps": 1},
    }
    config_path = work / "passband_rl.json"  # YAML is a superset of JSON
    config_path.write_text(json.dumps(config))
    cmd = [str(ROOT / ".venv/bin/passband"), "run", "rl", "--config", str(config_path)]
    for override in args.set:
        cmd += ["--set", override]
    env = {**os.environ, "PASSBAND_HOME": str(home)}
    out, memory, wall = run_tree(cmd, env, work / "passband.log")
    summary = json.loads(out.strip().splitlines()[-1])
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home}/mlflow.db")

    def metric(key: str) -> list:
        return sorted(client.get_metric_history(summary["mlflow_run_id"], key), key=lambda m: m.step)

    def history(key: str) -> list[float]:
        return [m.value for m in metric(key)]

    parts = {name: history(f"seconds/{name}") for name in ("rollout", "training", "weight_sync")}
    parts["vllm_kl"] = history("vllm_kl")
    # when the flow's process (trainer, and the engine when in_process) peaks: its own high-water
    # mark per phase of each iteration (tasks/host/memory.py)
    parts |= {f"GB peak, {phase}": history(f"memory/{phase}_peak_gb") for phase in ("rollout", "training", "weight_sync")}
    parts |= {f"GB resident after the sync, {kind}": history(f"memory/resident_{kind}_gb") for kind in ("anon", "file", "shmem")}
    # The idle engine's CPU while the trainer runs: the metrics of an iteration are logged right
    # after its weight sync (plus its checkpoint, if one was due), which dates its training window;
    # its middle 80% is used, clear of the edges.
    checkpoint_s = {m.step: m.value for m in metric("seconds/checkpoint")}
    cores = []
    for logged, train_s, sync_s in zip(metric("seconds/training"), parts["training"], parts["weight_sync"]):
        stop = logged.timestamp / 1000 - sync_s - checkpoint_s.get(logged.step, 0.0)
        cores.append(memory.engine_cores(stop - 0.9 * train_s, stop - 0.1 * train_s))
    parts["vLLM cores while training"] = cores
    return Result("passband run rl", history("seconds/iteration"), history("reward"), memory, wall, parts)


def run_trl(args: argparse.Namespace, model_dir: Path, work: Path) -> Result:
    driver = work / "trl_driver.py"
    driver.write_text(TRL_DRIVER)
    settings = {"problems": str(work / "problems.jsonl"), "model": str(model_dir), "output_dir": str(work / "trl-out"),
                "steps": args.steps, "lr": args.lr, "prompts": args.prompts, "group": args.group,
                "max_tokens": args.max_tokens, "temperature": args.temperature}
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    out, memory, wall = run_tree([args.trl_python, str(driver), json.dumps(settings)], env, work / "trl.log")
    steps = [json.loads(line[len("BENCH "):]) for line in out.splitlines() if line.startswith("BENCH ")]
    return Result("TRL GRPOTrainer", [s["seconds"] for s in steps], [s["reward"] for s in steps], memory, wall)


def report(results: list[Result]) -> None:
    gb = 1e9
    print("\n| system | s/iter median (min-max) | peak RSS, tree (GB) | reward per step | wall s |")
    print("|---|---|---|---|---|")
    for r in results:
        rewards = " ".join(f"{x:.2f}" for x in r.rewards)
        print(f"| {r.name} | {statistics.median(r.seconds):.1f} ({min(r.seconds):.1f}-{max(r.seconds):.1f}) | "
              f"{r.memory.peak_total / gb:.2f} | {rewards} | {r.wall_s:.0f} |")
    for r in results:
        print(f"\n{r.name}: per-process peak RSS in GB (of it file-backed/shared):\n  " + "\n  ".join(
            f"{label} {rss / gb:.2f} ({shared / gb:.2f})"
            for label, rss, shared in sorted(r.memory.peaks.values(), key=lambda x: -x[1])))
        for name, values in r.parts.items():
            print(f"  {name} per step: " + " ".join(f"{v:.3g}" for v in values))
    if len(results) == 2:
        ours, trl = results
        print(f"\nspeed (TRL s/iter / passband s/iter, medians): "
              f"{statistics.median(trl.seconds) / statistics.median(ours.seconds):.2f}x; "
              f"memory (passband peak / TRL peak): {ours.memory.peak_total / trl.memory.peak_total:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="A checkpoint dir, or the shipped SmolLM2.")
    parser.add_argument("--num-problems", type=int, default=96, help="Math suite problems (difficulty 0, arithmetic).")
    parser.add_argument("--prompts", type=int, default=6, help="P: prompts per step.")
    parser.add_argument("--group", type=int, default=8, help="G: samples per prompt.")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--steps", type=int, default=4, help="Optimizer steps (= RL iterations) per system.")
    parser.add_argument("--only", choices=["both", "passband", "trl"], default="both")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="Extra `passband run rl --set` override (repeatable), e.g. algo.precision=fp32.")
    parser.add_argument("--trl-python", default=str(ROOT / ".venv-trl/bin/python"), help="Python of TRL's venv.")
    parser.add_argument("--workdir", type=Path, default=None, help="Keep logs and outputs here (default: a temp dir).")
    parser.add_argument("--reuse", action="store_true",
                        help="With --only: report the other system's result saved in --workdir by an earlier run too.")
    args = parser.parse_args()

    from passband.curation.suites.source import load_problems
    from passband.training.model_source import SMOLLM2_NAME, gguf_to_safetensors, smollm2_gguf_path

    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-rl-"))
    work.mkdir(parents=True, exist_ok=True)
    model_dir = Path(args.model)
    if args.model == SMOLLM2_NAME:
        model_dir = work / "model"
        if not (model_dir / "config.json").exists():
            gguf_to_safetensors(smollm2_gguf_path(), model_dir)
    rows = load_problems(suite="math", num_problems=args.num_problems, seed=0, difficulty=0,
                         subdomains=["arithmetic"], answer_format="plain").rows
    (work / "problems.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"workdir {work}; {len(rows)} prompts, P={args.prompts} x G={args.group}, {args.max_tokens} tokens, "
          f"{args.steps} steps; threads: torch default on {os.cpu_count()} cores", flush=True)
    results = []
    for system, run in (("passband", run_passband), ("trl", run_trl)):
        saved = work / f"result-{system}.json"
        if args.only in ("both", system):
            result = run(args, model_dir, work)
            saved.write_text(json.dumps(asdict(result)))
            print(f"{system} done: s/iter {result.seconds}, rewards {result.rewards}", flush=True)
        elif args.reuse and saved.exists():  # the other system's result of an earlier run in this workdir
            data = json.loads(saved.read_text())
            memory = TreeMemory(**{**data["memory"], "peaks": {int(k): tuple(v) for k, v in data["memory"]["peaks"].items()}})
            result = Result(**{**data, "memory": memory})
        else:
            continue
        results.append(result)
    report(results)


if __name__ == "__main__":
    main()
