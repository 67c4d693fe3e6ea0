"""Which mismatch correction survives one step of staleness on long responses (issue 29 item 4).

    .venv/bin/python scripts/bench_staleness.py [--lengths 128 512] [--iterations 3] [--prompts 4] [--group 4]

Runs `rl --preset demo` with `rollout.max_off_policy_steps: 1` once per response length, in one
fresh PASSBAND_HOME, one after the other on the same box. `sampling.ignore_eos` makes every
response exactly that long, so the lengths compared are the lengths named, and
`reward.mask_truncated: false` keeps those cut rows in the gradient (and in the metrics, which
cover the rows the gradient sees). Iteration 1 samples
with v0 and trains v0 (on policy: only the engine's bf16 numerics against the fp32 trainer);
iterations 2.. sample with the weights one update older than the trainer's. Every update logs
what each rejecting correction would drop (`mismatch_would_reject/*`, training/rl/algebra/mismatch.py:
rejection_fractions) at the preset's thresholds (seq-MIS and token-MIS C = 2, geo-MIS 1.001), so
one run measures all three on the same batches. Prints, per length and for on-policy vs one step
stale: vllm_kl and the fraction of sequences each correction rejects (token-MIS: sequences with a
rejected token, and its fraction of tokens). First, at the first length, the same run with k = 0
(the synchronous loop), so the wall time of overlapping rollouts with the update is compared side
by side: on a 2-core box the two share the cores, so expect no gain there (docs/scaling.md).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

MODES = ("seq_mis", "geo_mis", "token_mis", "token_mis_tokens")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=4, help="prompts_per_step")
    parser.add_argument("--group", type=int, default=4, help="sampling.n (G)")
    args = parser.parse_args()
    os.environ["PASSBAND_HOME"] = tempfile.mkdtemp(prefix="passband-staleness-")

    from mlflow import MlflowClient

    from passband.flows.config import resolve_config
    from passband.flows.rl.flow import RLConfig, rl
    from passband.tasks.reporting import tracking

    rows, walls = [], {}
    for k, length in [(0, args.lengths[0]), *((1, length) for length in args.lengths)]:
        overrides = [f"num_iterations={args.iterations}", "eval=null", "checkpoint_every=0",
                     f"rollout.max_off_policy_steps={k}", f"prompts_per_step={args.prompts}",
                     f"sampling={{n: {args.group}, temperature: 1.0, max_tokens: {length}, ignore_eos: true}}",
                     # room for the prompt beside a response of the full length
                     f"engine.max_model_len={max(1024, length + 512)}",
                     # every response is cut at the length: score the cut text rather than mask it, since
                     # the mismatch metrics cover the rows the gradient sees
                     "reward.mask_truncated=false"]
        config = resolve_config(RLConfig, "rl", "demo", None, overrides)
        start = time.perf_counter()
        summary = rl(config)
        wall_s = walls[k, length] = time.perf_counter() - start
        tracking.configure()
        client = MlflowClient()

        def history(name: str) -> list[float]:
            return [m.value for m in sorted(client.get_metric_history(summary.mlflow_run_id, name), key=lambda m: m.step)]

        stale = history("rollout/off_policy_steps")
        if k == 0:
            continue
        for label, keep in (("on policy", lambda s: s == 0), ("1 step stale", lambda s: s == 1)):
            picked = [i for i, s in enumerate(stale) if keep(s)]

            def mean(name: str) -> float:
                values = history(name)
                return sum(values[i] for i in picked) / len(picked)

            rows.append((length, label, len(picked), mean("vllm_kl"),
                         *(mean(f"mismatch_would_reject/{mode}") for mode in MODES), wall_s))

    print("\n| response tokens | batches | iterations | vllm_kl | seq-MIS rejects (seqs) | geo-MIS rejects (seqs) "
          "| token-MIS: seqs with a rejected token | token-MIS: tokens rejected | run wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for length, label, n, kl, seq, geo, token_seqs, tokens, wall_s in rows:
        print(f"| {length} | {label} | {n} | {kl:.2e} | {seq:.3f} | {geo:.3f} | {token_seqs:.3f} | {tokens:.4f} "
              f"| {wall_s:.0f} |")
    length = args.lengths[0]
    print(f"\nwall at {length} tokens, {args.iterations} iterations: k=0 {walls[0, length]:.0f} s, k=1 {walls[1, length]:.0f} s "
          f"(k=1 / k=0 = {walls[1, length] / walls[0, length]:.2f})")


if __name__ == "__main__":
    main()
