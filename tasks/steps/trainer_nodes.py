"""torchrun launches of the trainers, on one node or several: the command and environment the flow's launchers
(tasks/steps/sft_torchrun.py, rl_torchrun.py) start, and the other nodes' side: node i of N runs
`python -m passband.tasks.steps.trainer_nodes` and joins each torchrun launch the flow on node 0 announces.

With `distributed.nnodes` N > 1 the flow (on node 0, the only node that runs it) writes, while each of its
torchrun launches lives, `<PASSBAND_HOME>/trainer-nodes/launch.json`: the module, its config file and the
`DistributedConfig` (tasks/steps/sft_torchrun.py, rl_torchrun.py: `announced`), then starts node 0's torchrun;
the followers, one per other node, start theirs with the same command and their own `--node_rank`
(`torchrun_command`), and the static rendezvous at `distributed.rendezvous_endpoint` holds every node's ranks
until all N have joined. So the home (the launch's config, the examples it names, the checkpoints the ranks
write) must be on storage every node mounts at the same path, which a multi-node checkpoint needs anyway.
One node = one Prefect worker's machine or one pod: infra/k8s-gpu-job-template.json's `nodes` makes the flow
run's Job an Indexed Job of N pods, pod 0 running the flow, the others this, and infra/k8s-trainer-rendezvous.yaml
names pod 0 for `rendezvous_endpoint`.

A launch ends on every node together (a rank that fails fails the others' next collective); the flow removes
its announcement when its torchrun exits, and a follower exits once no launch has been announced for
`--idle-exit-s` after the last one it joined ended (a pod whose flow failed before any launch is stopped with its
Job: backoffLimit 0).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from passband.training.runtime.config import DistributedConfig

# torchrun sets these for its ranks; inherited ones (a flow itself started under torchrun) would clash
RANK_ENV = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK")


def ranks_env(nproc_per_node: int) -> dict[str, str]:
    """The environment torchrun and its ranks start with: this process's, less RANK_ENV. One rank
    (distributed.torchrun_at_one_rank) gets this process's intra-op thread count, so its float
    reductions split across threads as the in-process trainer's do and the two runs stay equal bit
    for bit (torch's default is every core; a flow may run with fewer). Several ranks keep
    torchrun's own default of one thread each unless OMP_NUM_THREADS is set."""
    import torch

    env = {k: v for k, v in os.environ.items() if k not in RANK_ENV}
    if nproc_per_node == 1:
        env["OMP_NUM_THREADS"] = str(torch.get_num_threads())
    return env


NODE_RANK_ENV = "JOB_COMPLETION_INDEX"
"""Where a follower finds its node index without --node-rank: the index Kubernetes gives each pod of an Indexed
Job (infra/k8s-gpu-job-template.json: one pod per node, pod 0 running the flow)."""

RANK_FAILURE = re.compile(r"^(?:\[rank\d+\]:\s*)?\w*(?:Error|Exception): (node \d+ rank \d+ of \d+: .*)$", re.MULTILINE)
"""The one line a rank that failed says (training/runtime/distributed.py: failure_line), as its traceback ends
(torchrun prefixes each line of a rank's stderr with `[rankN]:`)."""


def torchrun_command(distributed: DistributedConfig, module: str, config_file: Path, node: int = 0) -> list[str]:
    """torchrun starting `module` on this node's `nproc_per_node` ranks: `--standalone` on one node; on several,
    node `node` of `nnodes` (the flow's is 0, a follower's its own) meeting the others at `rendezvous_endpoint`.

    The rendezvous is torchrun's static one (`--rdzv_backend static`: node 0 hosts its store at the endpoint and
    node i's ranks are i x nproc_per_node ...). Not c10d's: that one ignores --node_rank and numbers the nodes by
    host name and pid, so rank 0 (the one that reports to the flow, on node 0) could land on any node. A node that
    dies fails the others' next collective either way; neither restarts (the flow's rerun resumes)."""
    if distributed.nnodes == 1:
        nodes = ["--standalone"]
    else:
        nodes = ["--nnodes", str(distributed.nnodes),
                 "--node_rank", str(node),
                 "--rdzv_backend", "static", "--rdzv_endpoint", str(distributed.rendezvous_endpoint)]
    return [sys.executable, "-m", "torch.distributed.run", *nodes, "--nproc_per_node",
            str(distributed.nproc_per_node), "-m", module, str(config_file)]


def rank_failure(stderr: str) -> str | None:
    """The first line a failed rank said in torchrun's `stderr` (`node N rank R of W: ... failed: ...`), or None."""
    found = RANK_FAILURE.search(stderr)
    return found.group(1) if found else None


ANNOUNCEMENT = Path("trainer-nodes") / "launch.json"
"""Under the home: the launch the flow's node has running, while it runs."""


@contextmanager
def announced(distributed: DistributedConfig, module: str, config_file: Path) -> Iterator[None]:
    """Announce `module` on `config_file` to the other nodes for the duration of the block (nothing on one node)."""
    from passband.tasks.host.settings import StackSettings

    if distributed.nnodes == 1:
        yield
        return
    path = StackSettings.from_env().home / ANNOUNCEMENT
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps({"id": f"{os.getpid()}-{time.time_ns()}", "module": module,
                                   "config_file": str(config_file), "distributed": distributed.model_dump(mode="json")}))
    partial.rename(path)  # a follower never reads half of it
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def follow(home: Path, this_node: int, idle_exit_s: float, poll_s: float = 0.5) -> int:
    """Join every launch announced under `home` as node `this_node`, one at a time, until none has been
    announced for `idle_exit_s` after the last one ended (before the first, however long it takes); the number
    joined. A launch that fails is reported on stderr and the next one awaited (the flow's node fails with it and
    decides whether to rerun)."""
    joined, idle_since = set(), None  # before the first launch it waits as long as the flow's node prepares
    while idle_since is None or time.monotonic() - idle_since < idle_exit_s:
        launch = _announcement(home / ANNOUNCEMENT)
        if launch is None or launch["id"] in joined:
            time.sleep(poll_s)
            continue
        joined.add(launch["id"])
        distributed = DistributedConfig(**launch["distributed"])
        command = torchrun_command(distributed, launch["module"], Path(launch["config_file"]), this_node)
        code = subprocess.run(command, env=ranks_env(distributed.nproc_per_node)).returncode
        if code != 0:
            print(f"node {this_node}: {launch['module']} on {launch['config_file']} exited with code {code}",
                  file=sys.stderr, flush=True)
        idle_since = time.monotonic()
    return len(joined)


def _announcement(path: Path) -> dict | None:
    """The launch announced at `path`, or None: none now (the flow removes it when its launch ends, which may
    happen between a look and the read)."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def main(argv: list[str] | None = None) -> None:
    from passband.tasks.host.settings import StackSettings

    parser = argparse.ArgumentParser(prog="python -m passband.tasks.steps.trainer_nodes",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--node-rank", type=int, default=None,
                        help="this node's index, 1 .. nnodes - 1 (default: JOB_COMPLETION_INDEX, a Kubernetes "
                             "Indexed Job's pod index)")
    parser.add_argument("--idle-exit-s", type=float, default=900.0,
                        help="exit once no launch has been announced for this long after the last one ended")
    args = parser.parse_args(argv)
    this_node = args.node_rank if args.node_rank is not None else int(os.environ.get(NODE_RANK_ENV, "0"))
    if this_node == 0:
        parser.error("node 0 runs the flow, which starts its own torchrun: give this node's index, 1 or more")
    follow(StackSettings.from_env().home, this_node, args.idle_exit_s)


if __name__ == "__main__":
    main()
