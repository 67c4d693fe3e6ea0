"""What a reward of the user's costs in RL (issue 54): the RL smoke's math with the same rule three ways.

    .venv/bin/python scripts/bench_user_reward_cost.py [--iterations 1] [--repeats 20] [--full]

The reward comes from
- the built-in math verifier (the last-number rule, plain answers);
- the same rule as a user reward function, `reward.verifiers.rewards.math: benchreward:last_number`
  (a module written to a temp folder that calls passband's verify_math, so the verdicts are equal and
  what differs is the user contract around it), with PASSBAND_ALLOW_USER_CODE=1;
- that function behind an HTTP reward server on loopback, a process of its own (ThreadingHTTPServer),
  `{url, batch_size: 64, timeout_s: 30, retries: 2}`.
All on the RL smoke preset's math pool and sizes (4 prompts x G=4 rollouts of <= 64 tokens,
SmolLM2-135M, the default engine; no held-out evaluation), in one fresh PASSBAND_HOME.

Default: one RL run with the built-in verifier (seconds per iteration from MLflow's
seconds/iteration and seconds/scoring), then its kept rollouts (the rollouts artifact) scored again
by each of the three as the flow scores them (score_groups), `--repeats` times each after one untimed call: seconds of
scoring per iteration, and seconds per iteration for the other two as the measured iteration with
its scoring replaced (rollouts, training and sync are the same code on the same rollouts). The
verdicts of the three must be equal. `--full`: the RL flow run three times with the same seeds
instead, each iteration measured (three times the time; on a busy box the rollouts' noise is larger
than the scoring).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
from pathlib import Path

REWARD_MODULE = '''
from passband.curation.suites.math_suite import extraction_rule_for
from passband.curation.verifiers.math import verify_math


def last_number(completions, references):
    """passband's math rule (plain answers: the last number) as a user's batched reward function."""
    results = verify_math(completions, references, rule=extraction_rule_for("plain"))
    return [None if r.status == "unparsable" else (r.score, r.status, r.detail) for r in results]
'''

SERVER = '''
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from benchreward import last_number


class Score(BaseHTTPRequestHandler):
    def do_GET(self):  # readiness
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        items = last_number(request["completions"], request["references"])
        answer = json.dumps({"scores": [None if item is None else item[0] for item in items],
                             "statuses": ["unparsable" if item is None else item[1] for item in items],
                             "details": ["" if item is None else item[2] for item in items]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Score).serve_forever()
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--full", action="store_true")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="passband-user-reward-cost-"))
    os.environ["PASSBAND_HOME"] = str(home)
    (home / "user").mkdir()
    (home / "user" / "benchreward.py").write_text(REWARD_MODULE)
    (home / "user" / "server.py").write_text(SERVER)
    sys.path.insert(0, str(home / "user"))
    os.environ["PASSBAND_ALLOW_USER_CODE"] = "1"
    from passband.stack.local import prepare_environment

    prepare_environment()
    from passband.curation.catalog.reward_server import RewardServerConfig
    from passband.tasks.host.processes import ProcessDir

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    processes = ProcessDir(home / "processes")
    processes.spawn("reward-server", [sys.executable, str(home / "user" / "server.py"), str(port)],
                    {"PYTHONPATH": os.pathsep.join([str(home / "user"), *sys.path[1:]])})
    try:
        processes.wait_http("reward-server", f"http://127.0.0.1:{port}/", timeout_s=60)
        server = RewardServerConfig(url=f"http://127.0.0.1:{port}/score", batch_size=64, timeout_s=30, retries=2)
        forms = {"built-in math verifier": {}, "user reward function": {"math": "benchreward:last_number"},
                 "HTTP reward server (loopback)": {"math": server}}
        rows = (full if args.full else replayed)(forms, args)
    finally:
        processes.stop("reward-server")
    print(f"\n| reward from | seconds / RL iteration | seconds of scoring / iteration |{' verdicts |' * (not args.full)}")
    print(f"|---|---|---|{'---|' * (not args.full)}")
    for label, row in rows.items():
        print(f"| {label} | {row['iteration']:.1f} | {row['scoring']:.4f} |" + (f" {row['verdicts']} |" if 'verdicts' in row else ""))


def rl_config(rewards: dict, iterations: int):
    """The RL smoke preset's math pool and sizes (flows/presets/rl/smoke.yaml), rewarded by `rewards`."""
    from passband.curation.catalog import VerifierSettings
    from passband.flows.common_config import ProblemSource, SamplingConfig
    from passband.flows.rl.flow import RewardConfig, RLConfig
    from passband.training.rl.config import RLAlgoConfig

    source = ProblemSource(suite="math", num_problems=32, difficulty=0, answer_format="plain")
    return RLConfig(datasets={"math": source}, prompts_per_step=4, num_iterations=iterations, seed=0,
                    sampling=SamplingConfig(n=4, max_tokens=64), algo=RLAlgoConfig(lr=1e-5, micro_batch_size=8),
                    checkpoint_every=iterations, eval=None, reward=RewardConfig(verifiers=VerifierSettings(rewards=rewards)))


def run_metrics(config) -> tuple[str, dict[str, float]]:
    """(MLflow run id, mean seconds/iteration and seconds/scoring) of one RL run of `config`."""
    from mlflow import MlflowClient

    from passband.flows.rl.flow import rl
    from passband.tasks.reporting import tracking

    summary = rl(config)
    tracking.configure()
    client = MlflowClient()
    history = {name: [m.value for m in client.get_metric_history(summary.mlflow_run_id, f"seconds/{name}")]
               for name in ("iteration", "scoring")}
    return summary.mlflow_run_id, {name: sum(values) / len(values) for name, values in history.items()}


def full(forms: dict, args: argparse.Namespace) -> dict[str, dict]:
    """The RL flow once per reward form, same seeds."""
    return {label: run_metrics(rl_config(rewards, args.iterations))[1] for label, rewards in forms.items()}


def replayed(forms: dict, args: argparse.Namespace) -> dict[str, dict]:
    """One RL run with the built-in verifier, then its kept rollouts scored by every form."""
    import time

    from mlflow import MlflowClient

    from passband.curation.catalog import VerifierSettings
    from passband.tasks.steps.rollouts_log import ROLLOUTS_TAG, read_rollouts
    from passband.training.judge.score import score_groups

    config = rl_config({}, args.iterations)
    run_id, measured = run_metrics(config)
    kept = read_rollouts(MlflowClient().get_run(run_id).data.tags[ROLLOUTS_TAG]).to_pylist()
    problems = {row["id"]: row for row in config.datasets["math"].load().rows}
    rows = {}
    for label, rewards in forms.items():
        scoring, verdicts = [], []
        for iteration in sorted({row["iteration"] for row in kept}):
            # one call per iteration, each prompt's group together, as the flow scores a batch
            batch = [row for row in kept if row["iteration"] == iteration]
            ids = list(dict.fromkeys(row["prompt_id"] for row in batch))
            groups = [[row["completion"] for row in batch if row["prompt_id"] == i] for i in ids]
            def score() -> list:
                return score_groups(["math"] * len(ids), [problems[i]["prompt"] for i in ids],
                                    [problems[i]["reference"] for i in ids], groups, VerifierSettings(rewards=rewards), {})[0]

            results = score()  # warm-up, not timed: a server's first request imports the verifier there
            start = time.perf_counter()
            for _ in range(args.repeats):
                score()
            scoring.append((time.perf_counter() - start) / args.repeats)
            verdicts += [(r.score, r.status) for group in results for r in group]
        rows[label] = {"scoring": sum(scoring) / len(scoring), "verdicts": verdicts}
    base = dict(rows["built-in math verifier"])  # before its own row is rewritten below
    for row in rows.values():
        row["iteration"] = measured["iteration"] - base["scoring"] + row["scoring"]
        row["verdicts"] = "same" if row["verdicts"] == base["verdicts"] else "DIFFER"
    print(f"\nmeasured RL run (built-in verifier): {measured['iteration']:.1f} s per iteration, of which the flow's "
          f"scoring {measured['scoring']:.4f} s; {len(kept)} kept rollouts replayed {args.repeats} times per form")
    return rows


if __name__ == "__main__":
    main()
