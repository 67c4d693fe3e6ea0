"""The trainer mesh (training/runtime/mesh.py): `passband config` refusing degrees that do not fit, one line
each, before anything starts; the torchrun command for one node and for several; and the mesh's groups on gloo
ranks (which ranks share a sequence, which see different samples, how FSDP2 places a parameter on it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from test_cli_errors import fails_in_one_line  # one `Error:` line, exit 2, no traceback
from passband.cli.main import main
from passband.tasks.steps.trainer_nodes import torchrun_command
from passband.training.runtime.config import DistributedConfig

REPO = Path(__file__).resolve().parents[1]

# (overrides, the one line `passband config sft` prints); SmolLM2-135M (the default model) has 9 attention
# heads and 3 KV heads.
REFUSED = [
    (["distributed.nproc_per_node=3", "distributed.sequence_parallel=2"],
     "invalid sft config: distributed: replicate x sequence_parallel = 1 x 2 does not divide the 3 ranks "
     "(nproc_per_node 3 x nnodes 1): pick degrees whose product is the world size"),
    (["distributed.nproc_per_node=2", "distributed.nnodes=2", "distributed.rendezvous_endpoint=node0:29400",
      "distributed.replicate=3"],
     "invalid sft config: distributed: replicate x sequence_parallel = 3 x 1 does not divide the 4 ranks "
     "(nproc_per_node 2 x nnodes 2): pick degrees whose product is the world size"),
    (["distributed.nproc_per_node=4", "distributed.shard=3"],
     "invalid sft config: distributed: replicate x shard x sequence_parallel = 1 x 3 x 1 = 3 is not the 4 ranks "
     "(nproc_per_node 4 x nnodes 1): make the product the world size (or leave shard unset)"),
    (["distributed.nnodes=2"],
     "invalid sft config: distributed: rendezvous_endpoint: nnodes 2 needs the host:port where the nodes' torchrun "
     "agents meet (node 0's address and a free port)"),
    (["distributed.nnodes=2", "distributed.rendezvous_endpoint=node0"],
     "invalid sft config: distributed: rendezvous_endpoint 'node0': expected host:port (e.g. node0.example:29400)"),
    (["distributed.nproc_per_node=2", "distributed.sequence_parallel=2"],
     "preflight: distributed.sequence_parallel: 2 does not divide smollm2-135m-instruct's 9 attention heads and "
     "3 KV heads (Ulysses gives each rank heads / sequence_parallel of each): pick a common divisor"),
]


@pytest.mark.parametrize("overrides,line", REFUSED, ids=[str(i) for i in range(len(REFUSED))])
def test_config_refuses_a_mesh_that_does_not_fit(overrides: list[str], line: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path))
    args = [arg for override in overrides for arg in ("--set", override)]
    assert fails_in_one_line("config", "sft", *args) == line


def test_pipeline_names_the_stage_whose_mesh_does_not_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path))
    assert fails_in_one_line("config", "pipeline", "--set", "rl.distributed.nproc_per_node=4",
                             "--set", "rl.distributed.sequence_parallel=4") == (
        "preflight: rl.distributed.sequence_parallel: 4 does not divide smollm2-135m-instruct's 9 attention heads "
        "and 3 KV heads (Ulysses gives each rank heads / sequence_parallel of each): pick a common divisor")


def test_rl_refuses_sequence_parallelism_over_padded_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path))
    assert fails_in_one_line("config", "rl", "--set", "distributed.nproc_per_node=3", "--set",
                             "distributed.sequence_parallel=3", "--set", "algo.pack_rows=false") == (
        "invalid rl config: algo.pack_rows: false, but distributed.sequence_parallel 3 splits each micro-batch's "
        "packed rows over its ranks: set algo.pack_rows: auto or true")


def test_config_accepts_a_mesh_that_fits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """3 divides 9 heads and 3 KV heads; 2 nodes x 3 ranks = replicate 2 x shard 1 x sp 3."""
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path))
    result = CliRunner().invoke(main, ["config", "sft", "--set", "distributed.nproc_per_node=3",
                                       "--set", "distributed.nnodes=2", "--set", "distributed.replicate=2",
                                       "--set", "distributed.sequence_parallel=3",
                                       "--set", "distributed.rendezvous_endpoint=node0:29400"])
    assert result.exit_code == 0, result.output
    distributed = DistributedConfig(nproc_per_node=3, nnodes=2, replicate=2, sequence_parallel=3,
                                    rendezvous_endpoint="node0:29400")
    assert (distributed.mesh.replicate, distributed.mesh.shard, distributed.mesh.sequence_parallel) == (2, 1, 3)
    assert distributed.launches_ranks


def test_torchrun_command_for_one_node_and_for_several() -> None:
    one = DistributedConfig(nproc_per_node=4)
    assert torchrun_command(one, "m", Path("c.yaml")) == [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4", "-m", "m", "c.yaml"]
    nodes = DistributedConfig(nproc_per_node=2, nnodes=3, rendezvous_endpoint="10.0.0.1:29400")
    for node in (0, 2):  # the flow's node is 0; a follower passes its own
        assert torchrun_command(nodes, "m", Path("c.yaml"), node) == [
            sys.executable, "-m", "torch.distributed.run", "--nnodes", "3", "--node_rank", str(node),
            "--rdzv_backend", "static", "--rdzv_endpoint", "10.0.0.1:29400", "--nproc_per_node", "2", "-m", "m",
            "c.yaml"]


def _mesh_ranks(nproc: int, *args: str) -> list[dict]:
    """Every rank's records (tests/mesh_ranks.py), each rank writing a file of its own."""
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MESH_RANKS_OUT": out}
        env.pop("WORLD_SIZE", None)
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                               str(nproc), str(REPO / "tests" / "mesh_ranks.py"), *args],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-4000:]
        records = [json.loads(line) for path in sorted(Path(out).glob("rank-*.jsonl"))
                   for line in path.read_text().splitlines()]
    return sorted(records, key=lambda line: (line["rank"], "failed_after_s" in line))


@pytest.mark.slow  # 4 gloo ranks: ~40 s on the loaded 2-core box
def test_the_mesh_groups_on_four_ranks() -> None:
    """replicate 2 x shard 1 x sp 2: rank = replicate_index * 2 + sp_index (sp innermost, on one node)."""
    ranks = _mesh_ranks(4, "2", "1", "2", "30")
    assert [r["sp"] for r in ranks] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert [r["dp"] for r in ranks] == [[0, 2], [1, 3], [0, 2], [1, 3]]
    # the two ranks of an SP group take the same micro-batches: index 0 on replica 0, 1 on replica 1
    assert [r["dp_ranks"] for r in ranks] == [[2, 0], [2, 0], [2, 1], [2, 1]]
    # HSDP over replicate x (shard x sp): Linear(4, 8)'s 8 rows split in 2 within a replica, copied across
    assert all(r["fsdp_dims"] == ["replicate", "shard_sp"] for r in ranks)
    assert all(r["placements"] == ["R", "S(0)"] and r["local_rows"] == 4 for r in ranks)


def test_the_mesh_groups_without_replicas_or_sequence_parallelism() -> None:
    """shard 2 alone: today's flat FSDP (1-D), no SP group (None, not a group of one)."""
    ranks = _mesh_ranks(2, "1", "2", "1", "30")
    assert [r["sp"] for r in ranks] == [None, None]
    assert [r["dp"] for r in ranks] == [[0, 1], [0, 1]] and [r["dp_ranks"] for r in ranks] == [[2, 0], [2, 1]]
    assert all(r["fsdp_dims"] == ["shard_sp"] and r["placements"] == ["S(0)"] for r in ranks)


@pytest.mark.slow  # the sleeping rank holds torchrun 12 s beyond start-up
def test_a_sub_group_collective_fails_within_the_trainer_timeout() -> None:
    """The replicate all-reduce with the other replica asleep fails after the 3 s given, not torch's 30 min."""
    ranks = _mesh_ranks(2, "2", "1", "1", "3", "hang")
    (failed,) = [r for r in ranks if "failed_after_s" in r]
    assert failed["rank"] == 0 and 2.5 < failed["failed_after_s"] < 10, failed


def test_micro_batches_are_dealt_over_the_data_parallel_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    """An SP group's ranks run the same micro-batches (each its shard of the tokens), so the RL token budget deals
    a step over replicate x shard, not the world: 4 ranks as shard 2 x SP 2 are 2 data-parallel ranks."""
    from passband.training.runtime import distributed
    from passband.training.runtime.mesh import MeshShape

    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setitem(distributed._OPEN, "shape", MeshShape(shard=2, sequence_parallel=2))
    assert distributed.data_parallel_size() == 2
    monkeypatch.setitem(distributed._OPEN, "shape", MeshShape(replicate=2, shard=2))
    assert distributed.data_parallel_size() == 4
    monkeypatch.setitem(distributed._OPEN, "shape", None)  # a group opened without a mesh: every rank its own data
    assert distributed.data_parallel_size() == 4
