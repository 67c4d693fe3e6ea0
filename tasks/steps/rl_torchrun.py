"""The RL trainer as torchrun ranks, seen from the flow: launched once, driven by request files.

With `distributed.launches_ranks` the rl flow holds no model: the ranks
(`python -m passband.training.rl.launch`, FSDP2, training/rl/launch.py) hold the sharded policy,
the reference and the AdamW state for the whole run. The flow writes each iteration's scored batch
as a request, reads rank 0's answer (the update's metrics; the full weights are published as the
iteration's version under `weights_root`, in the engine's dtype, as the in-process trainer's are:
training/weights/versions.py) and asks for a checkpoint where its schedule says; rank 0 writes it in the
one-process layout and this process commits it manifest-last, as the in-process trainer's are. A
rank that dies ends torchrun: its stdout closes and the next answer raises with the ranks' stderr.
A rank that hangs fails the others' next collective within `distributed.collective_timeout_s`
(then torchrun stops them all); ranks that all hang at once are stopped by this process once an
answer to a request is `distributed.reply_timeout_s` late, and the error names the request (the
wait for the ranks' ready line is not bounded: loading the model may take longer than an update).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from passband.tasks.host.processes import terminate_group
from passband.tasks.steps.trainer_nodes import announced, rank_failure, ranks_env, torchrun_command
from passband.training.rl.batches.batching import RolloutBatch
from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.launch import RanksConfig, batch_request, write_request
from passband.training.engines.config import EngineConfig
from passband.training.rl.trainer import RLState
from passband.training.runtime.config import DistributedConfig


@dataclass
class RanksTrainer:
    """What the flow sees of a trainer (tokenizer, first weights, RLState) and the ranks serving it."""

    tokenizer: Any
    weights_dir: Path
    """Where the engine loads its first weights from (the start model or the resumed checkpoint)."""
    state: RLState
    work_dir: Path
    ranks: subprocess.Popen
    distributed: DistributedConfig
    lines: queue.Queue
    """Rank 0's stdout, line by line (None at its end), filled by a reader thread so a wait can time out."""
    sent: int = 0
    """Requests written so far (the next is sent + 1)."""
    update_info: dict[str, Any] | None = None
    """With weights by broadcast, once linked: what the engine is told of each round (names, dtypes, shapes)."""
    by_broadcast: bool = False
    """The engine receives each update's weights by NCCL broadcast (engine.weight_transfer 'nccl'), not from disk."""
    base_dir: Path | None = None
    """No adapters: the ranks refuse LoRA (training/rl/trainer.py: PolicyTrainer)."""

    @property
    def nproc_per_node(self) -> int:
        return self.distributed.nproc_per_node

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        self.sent += 1
        write_request(self.work_dir, self.sent, request)
        reply = self._read(f"request {self.sent} ({request['kind']})")
        if reply.get("request") != self.sent:
            raise RuntimeError(f"trainer ranks answered {reply} to request {self.sent} ({request['kind']})")
        return reply

    def _read(self, awaited: str, bounded: bool = True) -> dict[str, Any]:
        """Rank 0's next JSON line (anything else a library prints on its stdout is skipped), at
        most `reply_timeout_s` from now when `bounded`."""
        deadline = time.monotonic() + self.distributed.reply_timeout_s if bounded else None
        while (line := self._next_line(awaited, deadline)) is not None:
            if line.startswith("{"):
                return json.loads(line)
        self.ranks.wait()
        failed = rank_failure((self.work_dir / "ranks.stderr").read_text())
        raise RuntimeError(f"torchrun --nproc_per_node {self.nproc_per_node} for the rl trainer exited with code "
                           f"{self.ranks.returncode} awaiting {awaited}{': ' + failed if failed else ''}; the ranks' "
                           f"stderr ends:\n{self._stderr()}")

    def _next_line(self, awaited: str, deadline: float | None) -> str | None:
        try:
            return self.lines.get(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError(f"the rl trainer's {self.nproc_per_node} ranks did not answer {awaited} within "
                               f"distributed.reply_timeout_s = {self.distributed.reply_timeout_s:g} s: every rank "
                               f"hangs (no collective timed out); they are stopped. Their stderr ends:\n"
                               f"{self._stderr()}") from None

    def _stderr(self) -> str:
        return (self.work_dir / "ranks.stderr").read_text()[-4000:]

    def update(self, batch: RolloutBatch, seed: int, version: int) -> dict[str, float]:
        """One rl_update on the ranks (Clip-Cov seeded with `seed`); its metrics. The updated full
        weights are then published as `version` under `weights_root` (load_version loads them), in the
        same request; with weights by broadcast nothing is published (`broadcast_into` sends them)."""
        return self._ask(batch_request(batch, seed, None if self.by_broadcast else version))["metrics"]

    def hand_over(self, engine: Any, version: int, ahead: bool) -> None:
        """The update's weights to the rollouts: ahead, nothing to do (the ranks published them with the
        update); else broadcast into `engine` (weights by NCCL) or loaded from the ranks' published version."""
        from passband.training.weights.versions import load_version

        if ahead:
            return None
        if self.by_broadcast:
            self.broadcast_into(engine)
        else:
            load_version(engine, self.weights_root, version)
        return None

    def release(self) -> None:
        """Nothing here: each rank hands its device back itself after every update (training/rl/launch.py)."""

    def broadcast_into(self, engine: Any) -> None:
        """The weights the ranks hold now, sent into the flow's vLLM `engine` by NCCL broadcast
        (EngineConfig.weight_transfer 'nccl', training/engines/vllm_broadcast.py); the first call opens
        the link (rank 0 and the engine's one worker meet on a free local port)."""
        from passband.training.engines.vllm_broadcast import BroadcastEndpoint

        if self.update_info is None:
            endpoint = BroadcastEndpoint("127.0.0.1", free_port(), world_size=2)
            self.update_info = engine.connect_trainer(endpoint, lambda: self._ask(
                {"kind": "connect_engine", "endpoint": asdict(endpoint)})["update_info"])
        engine.receive_broadcast(self.update_info, lambda: self._ask({"kind": "broadcast"}))

    def publish(self, version: int) -> Path:
        """Have rank 0 publish the weights the ranks hold now as `version` under `weights_root`; its folder."""
        return Path(self._ask({"kind": "publish", "version": version})["weights"])

    @property
    def weights_root(self) -> Path:
        """The root the ranks publish weight versions under (training/weights/versions.py layout)."""
        return self.work_dir / "weights"

    @property
    def published(self) -> Path:
        """The folder of the newest version the ranks published."""
        from passband.training.weights.versions import newest_version, version_dir

        newest = newest_version(self.weights_root)
        if newest is None:
            raise FileNotFoundError(f"the rl trainer ranks have published no weights under {self.weights_root} yet")
        return version_dir(self.weights_root, newest)

    def save(self, out_dir: Path | None = None) -> Path:
        """The ranks' checkpoint of this iteration (weights, AdamW, RNG, this RLState); its local path, in
        the ranks' work dir (rank 0 writes it there whatever `out_dir`)."""
        name = f"iter-{self.state.iteration:06d}"
        return Path(self._ask({"kind": "checkpoint", "name": name, "state": self.state.to_json()})["checkpoint"])

    def close(self) -> None:
        """Ask the ranks to stop and wait for torchrun to exit."""
        self._ask({"kind": "stop"})
        self.ranks.wait()


@contextmanager
def trainer_ranks(model_dir: Path, tasks: list[str], algo: RLAlgoConfig, resume_dir: Path | None,
                  distributed: DistributedConfig, work_dir: Path, engine: EngineConfig,
                  keep_versions: int = 1) -> Iterator[RanksTrainer]:
    """Launch `distributed.nproc_per_node` ranks (from `resume_dir`, a checkpoint directory, when
    given) and yield their handle once they are ready; stop them at the end, or kill their process
    group on an error. They publish each update in `engine`'s dtype (and fp32 head), the
    `keep_versions` newest kept."""
    from passband.training.checkpoint import read_trainer_state
    from passband.training.model_source import load_tokenizer

    nproc_per_node = distributed.nproc_per_node
    config = RanksConfig(model=model_dir, resume_from=resume_dir, algo=algo, work_dir=work_dir,
                         engine_dtype=engine.resolved_dtype(), lm_head_fp32=engine.lm_head_fp32, keep_versions=keep_versions,
                         trust_remote_code=engine.trust_remote_code,
                         collective_timeout_s=distributed.collective_timeout_s, mesh=distributed.mesh)
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / "ranks.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json")))
    env = ranks_env(nproc_per_node)
    if engine.weight_transfer == "nccl":  # the flow's engine keeps the first GPU; the ranks take the next ones
        env["CUDA_VISIBLE_DEVICES"] = ranks_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), nproc_per_node)
    command = torchrun_command(distributed, "passband.training.rl.launch", work_dir / "ranks.yaml")
    state = RLState(consumed={name: 0 for name in tasks})
    if resume_dir is not None:
        state = RLState.from_json(read_trainer_state(resume_dir))
    with open(work_dir / "ranks.stderr", "w") as stderr:
        ranks = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, env=env, text=True,
                                 start_new_session=True)  # its own group: an error kills every rank
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=_read_lines, args=(ranks.stdout, lines), name="rl-ranks-stdout", daemon=True)
    reader.start()
    trainer = RanksTrainer(load_tokenizer(model_dir, engine.trust_remote_code), resume_dir or model_dir, state, work_dir, ranks, distributed,
                           lines, by_broadcast=engine.weight_transfer == "nccl")
    try:  # the other nodes (if any) join these ranks while they are announced
        with announced(distributed, "passband.training.rl.launch", work_dir / "ranks.yaml"):
            # Unbounded: loading a large model may take longer than any one update; a rank that hangs
            # while starting fails the others' first collective, and one that dies ends torchrun.
            if trainer._read("the ranks' ready line", bounded=False) != {"ready": True}:
                raise RuntimeError("the rl trainer ranks did not start with a ready line")
            yield trainer
            trainer.close()
    finally:
        if ranks.poll() is None:
            terminate_group(ranks.pid)
        reader.join(timeout=30)  # the ranks are gone, so their stdout is at its end
        ranks.stdout.close()


def ranks_devices(visible: str | None, nproc_per_node: int) -> str:
    """CUDA_VISIBLE_DEVICES for trainer ranks beside an engine on the first of the `visible` GPUs
    (this process's CUDA_VISIBLE_DEVICES; None: all of them): the next `nproc_per_node`."""
    import torch

    devices = visible.split(",") if visible else [str(index) for index in range(torch.cuda.device_count())]
    if len(devices) < nproc_per_node + 1:
        raise ValueError(f"engine.weight_transfer 'nccl' puts the engine on its own GPU and each of the "
                         f"{nproc_per_node} trainer ranks on another: {nproc_per_node + 1} GPUs needed, "
                         f"{len(devices)} visible ({visible or 'all'})")
    return ",".join(devices[1:nproc_per_node + 1])


def free_port() -> int:
    """A TCP port free on this host now (the broadcast's rendezvous)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _read_lines(stream: Any, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)
