"""What multi-turn costs an RL iteration (issue 55): the same math problems single-turn and as
Python-tool episodes, side by side.

    .venv/bin/python scripts/bench_multi_turn_cost.py [--model MODEL] [--iterations 3] [--prompts 4] [--group 8]

Runs `rl --preset smoke` on its math pool only (32 problems of difficulty 0, plain answers), no
held-out evaluation and no checkpoints, twice in one fresh PASSBAND_HOME, one after the other with
the same seeds: single-turn, then with `math_tool: {}` (3 turns, 512 tokens an episode, up to 3
Python runs of 5 s). Both sample up to 192 tokens a turn. A model that never calls the tool (the
shipped one) makes the episodes one turn each, with the tool's longer system message: pass
`--model` a checkpoint that calls it (the SFT checkpoint of `scripts/tool_pipeline.py`) to see
the environment's share. Prints per run the mean over iterations 2.. (iteration 1 also starts the
engine) of seconds per iteration and per phase, and for the episodes the wall seconds of the
episode batches, the part spent outside the engine (environment steps and their tokenization:
`episode_wait_seconds`), its share of the rollout phase, and mean turns and tool calls per episode.
"""

from __future__ import annotations

import argparse
import os
import tempfile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=4, help="prompts_per_step")
    parser.add_argument("--group", type=int, default=8, help="sampling.n (G)")
    args = parser.parse_args()
    os.environ["PASSBAND_HOME"] = tempfile.mkdtemp(prefix="passband-multi-turn-cost-")

    from mlflow import MlflowClient

    from passband.flows.config import resolve_config
    from passband.flows.rl.flow import RLConfig, rl
    from passband.tasks.reporting import tracking

    base = [f"model={args.model}", f"num_iterations={args.iterations}", "eval=null", "checkpoint_every=0",
            f"prompts_per_step={args.prompts}", "datasets.code=null", "datasets.ifeval=null",
            f"sampling={{n: {args.group}, temperature: 1.0, max_tokens: 192}}"]
    runs = {}
    for label, extra in (("single-turn", []), ("Python-tool episodes", ["math_tool={}"])):
        summary = rl(resolve_config(RLConfig, "rl", "smoke", None, base + extra))
        tracking.configure()
        client = MlflowClient()

        def mean(name: str) -> float:
            values = [m.value for m in client.get_metric_history(summary.mlflow_run_id, name) if m.step >= 2]
            return sum(values) / len(values) if values else float("nan")

        runs[label] = {name: mean(name) for name in (
            "seconds/iteration", "seconds/rollout", "seconds/scoring", "seconds/training", "seconds/weight_sync",
            "episode_wall_seconds", "episode_wait_seconds", "math/num_episodes", "math/num_turns",
            "math/num_tool_calls")}

    print(f"\nmodel {args.model}; {args.prompts} prompts x G={args.group}, <= 192 tokens a turn; means over "
          f"iterations 2..{args.iterations}\n")
    print("| rollouts | s/iteration | rollout s | scoring s | training s | sync s | episode batches s "
          "| of them outside the engine s | share of the rollout phase | turns / episode | tool calls / episode |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, m in runs.items():
        episodes = m["math/num_episodes"]
        per = (lambda name: m[name] / episodes) if episodes == episodes and episodes else (lambda name: float("nan"))
        print(f"| {label} | {m['seconds/iteration']:.1f} | {m['seconds/rollout']:.1f} | {m['seconds/scoring']:.2f} "
              f"| {m['seconds/training']:.1f} | {m['seconds/weight_sync']:.2f} | {m['episode_wall_seconds']:.1f} "
              f"| {m['episode_wait_seconds']:.2f} | {m['episode_wait_seconds'] / m['seconds/rollout']:.3f} "
              f"| {per('math/num_turns'):.2f} | {per('math/num_tool_calls'):.2f} |")
    single, tool = runs["single-turn"], runs["Python-tool episodes"]
    print(f"\nepisodes / single-turn: s/iteration {tool['seconds/iteration'] / single['seconds/iteration']:.2f}x, "
          f"rollout phase {tool['seconds/rollout'] / single['seconds/rollout']:.2f}x")


if __name__ == "__main__":
    main()
