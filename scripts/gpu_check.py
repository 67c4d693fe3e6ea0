"""The GPU checks' measurements (scripts/gpu_check.sh runs them with the tests that need CUDA).

    .venv-gpu/bin/python scripts/gpu_check.py engine [--model DIR] [--prompts 64] [--tokens 256]
    .venv-gpu/bin/python scripts/gpu_check.py weights [--model DIR] [--rounds 3]
    .venv-gpu/bin/python scripts/gpu_check.py broadcast [--model DIR] [--rounds 3]   # 2 GPUs

`engine`: our vLLM engine (training/engines/vllm_engine.py, bf16) against raw `vllm.LLM` on the
same prompts and sampling, side by side in one process: seconds to start each, generated tokens
per second (EOS ignored, so both generate exactly prompts x 4 x tokens), and the ratio. Ours does
more per call (per-request seeds, log-probs of every token, a prefix-cache reset), so the ratio
says what that costs.

`weights`: the RL weight sync by the disk path (training/weights/versions.py): the fp32 policy
published as a version in the engine's dtype, then loaded into the live engine in place; seconds
for each, per round.

`broadcast`: the NCCL path (training/engines/vllm_broadcast.py, EngineConfig.weight_transfer 'nccl'):
the engine on GPU 0 in its own processes, the sender (what the ranks' rank 0 runs) here on GPU 1.
Seconds to link them and per round; then the check that matters: after a round of perturbed
weights, the engine's greedy completions equal those of a fresh engine that read the same weights
from a disk-published version.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def _model_dir(model: str | None) -> Path:
    from passband.tasks.artifacts.model import resolve_model

    return Path(resolve_model(model or "smollm2-135m-instruct"))


def _prompts(model_dir: Path, count: int) -> list[str]:
    from passband.training.chat import render_prompt
    from passband.training.model_source import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    return [render_prompt(tokenizer, f"Write a short story about the number {i}.", None) for i in range(count)]


def engine(args: argparse.Namespace) -> None:
    from vllm import LLM, SamplingParams

    from passband.training.engines import EngineConfig, SamplingConfig, open_engine

    model_dir = _model_dir(args.model)
    prompts = _prompts(model_dir, args.prompts)
    expected = len(prompts) * 4 * args.tokens

    start = time.perf_counter()
    ours = open_engine(EngineConfig(kind="vllm", dtype="bfloat16"), model_dir)
    ours_start = time.perf_counter() - start
    settings = SamplingConfig(n=4, temperature=1.0, max_tokens=args.tokens, ignore_eos=True, seed=0)
    ours.generate(prompts[:4], settings)  # warm-up: CUDA graphs, first kernels
    start = time.perf_counter()
    groups = ours.generate(prompts, settings)
    ours_s = time.perf_counter() - start
    assert sum(len(s.token_ids) for g in groups for s in g) == expected
    ours.close()

    start = time.perf_counter()
    raw = LLM(model=str(model_dir), dtype="bfloat16", seed=0)
    raw_start = time.perf_counter() - start
    params = SamplingParams(n=4, temperature=1.0, max_tokens=args.tokens, ignore_eos=True, seed=0)
    raw.generate(prompts[:4], params, use_tqdm=False)
    start = time.perf_counter()
    outputs = raw.generate(prompts, params, use_tqdm=False)
    raw_s = time.perf_counter() - start
    assert sum(len(c.token_ids) for o in outputs for c in o.outputs) == expected

    print(f"engine start: ours {ours_start:.1f} s, raw vLLM {raw_start:.1f} s")
    print(f"throughput ({len(prompts)} prompts x 4 x {args.tokens} tokens): ours {expected / ours_s:.0f} tok/s, "
          f"raw vLLM {expected / raw_s:.0f} tok/s, ours/raw {raw_s / ours_s:.2f}")


def weights(args: argparse.Namespace) -> None:
    from passband.training.engines import EngineConfig, open_engine
    from passband.training.model_source import load_causal_lm
    from passband.training.weights.versions import load_version, publish_version

    model_dir = _model_dir(args.model)
    policy = load_causal_lm(model_dir)  # the trainer's fp32 copy
    live = open_engine(EngineConfig(kind="vllm", dtype="bfloat16"), model_dir)
    root = Path(tempfile.mkdtemp(prefix="passband-gpu-versions-"))
    for version in range(1, args.rounds + 1):
        start = time.perf_counter()
        publish_version(policy, root, version, "bfloat16", lm_head_fp32=False)
        published = time.perf_counter()
        load_version(live, root, version)
        loaded = time.perf_counter()
        print(f"v{version}: publish {published - start:.2f} s, load into the engine {loaded - published:.2f} s")
    live.close()


def broadcast(args: argparse.Namespace) -> None:
    import torch

    from passband.tasks.steps.rl_torchrun import free_port
    from passband.training.engines import EngineConfig, SamplingConfig, open_engine
    from passband.training.model_source import load_causal_lm
    from passband.training.engines.vllm_broadcast import BroadcastEndpoint, EngineDtypeSource, open_sender, update_info
    from passband.training.weights.versions import publish_version, version_dir

    model_dir = _model_dir(args.model)
    live = open_engine(EngineConfig(kind="vllm", dtype="bfloat16", weight_transfer="nccl"), model_dir)  # GPU 0
    torch.cuda.set_device(1)
    policy = load_causal_lm(model_dir).cuda()
    endpoint = BroadcastEndpoint("127.0.0.1", free_port(), world_size=2)
    start = time.perf_counter()
    sender = live.connect_trainer(endpoint, lambda: open_sender(policy, torch.bfloat16, endpoint, rank=0))
    print(f"link: {time.perf_counter() - start:.2f} s")
    info = update_info(EngineDtypeSource(policy, torch.bfloat16).metadata())
    generator = torch.Generator(device="cuda").manual_seed(0)
    for round_ in range(1, args.rounds + 1):
        with torch.no_grad():  # an update's worth of change, so a stale engine would show
            for parameter in policy.parameters():
                parameter.add_(torch.randn(parameter.shape, generator=generator, device="cuda") * 1e-3)
        start = time.perf_counter()
        live.receive_broadcast(info, sender.send_weights)
        print(f"round {round_}: broadcast into the engine {time.perf_counter() - start:.2f} s")
    greedy = SamplingConfig(n=1, temperature=0.0, max_tokens=32, seed=0)
    prompts = _prompts(model_dir, 8)
    by_broadcast = [g[0].text for g in live.generate(prompts, greedy)]
    live.close()
    root = Path(tempfile.mkdtemp(prefix="passband-gpu-broadcast-"))
    publish_version(policy, root, 1, "bfloat16", lm_head_fp32=False)
    torch.cuda.set_device(0)
    fresh = open_engine(EngineConfig(kind="vllm", dtype="bfloat16"), model_dir)
    fresh.load_weights(version_dir(root, 1))
    by_disk = [g[0].text for g in fresh.generate(prompts, greedy)]
    fresh.close()
    same = sum(a == b for a, b in zip(by_broadcast, by_disk))
    print(f"greedy completions after the broadcast equal the disk path's: {same} of {len(prompts)}")
    assert same == len(prompts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("check", choices=["engine", "weights", "broadcast"])
    parser.add_argument("--model", default=None, help="a model dir or name (default: the shipped SmolLM2-135M)")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    {"engine": engine, "weights": weights, "broadcast": broadcast}[args.check](args)


if __name__ == "__main__":
    main()
