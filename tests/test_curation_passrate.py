"""Pass-rate and top-k arithmetic, shard keys and shard splitting, checked against hand counts."""

import hashlib
from pathlib import Path

import pytest

from passband.curation.passrate import shard_key, split_into_shards, summarize_attempts

P, F = "pass", "fail"


def test_top_k_groups_consecutive_attempts_into_rollouts():
    # rollouts of k=2: [F,P] solved, [F,F] not, [P,P] solved, [F,F] not -> 2/4; 3 passes of 8.
    [summary] = summarize_attempts([[F, P, F, F, P, P, F, F]], k=2)
    assert summary["num_samples"] == 8
    assert summary["pass_count"] == 3
    assert summary["pass_rate"] == 3 / 8
    assert summary["num_rollouts"] == 4
    assert summary["num_rollouts_solved"] == 2
    assert summary["pass_rate_top_k"] == 0.5


def test_top_k_with_k4():
    [summary] = summarize_attempts([[F, F, F, P, F, F, F, F]], k=4)
    assert (summary["num_rollouts"], summary["num_rollouts_solved"], summary["pass_rate_top_k"]) == (2, 1, 0.5)


def test_statuses_counted_separately_and_k1_equals_pass_rate():
    summaries = summarize_attempts([["pass", "fail", "unparsable", "timeout", "error"], [P, P, F, P]])
    assert summaries[0] == {
        "num_samples": 5,
        "pass_count": 1,
        "pass_rate": 0.2,
        "num_unparsable": 1,
        "num_timeout": 1,
        "num_error": 1,
        "num_rollouts": 5,
        "num_rollouts_solved": 1,
        "pass_rate_top_k": 0.2,
    }
    assert summaries[1]["pass_rate"] == 0.75 == summaries[1]["pass_rate_top_k"]


def test_bad_inputs_are_refused_with_the_problem_index():
    with pytest.raises(ValueError, match="problem 1: 5 attempts do not split into rollouts of k=2"):
        summarize_attempts([[P, F], [P, F, F, F, F]], k=2)
    with pytest.raises(ValueError, match="problem 0: unknown statuses \\['passed'\\]"):
        summarize_attempts([["passed"]])
    with pytest.raises(ValueError, match="problem 0: no attempts"):
        summarize_attempts([[]])
    with pytest.raises(ValueError, match="k must be >= 1"):
        summarize_attempts([[P]], k=0)


def test_shard_key_is_sha256_of_canonical_json():
    expected = hashlib.sha256(
        b'{"checkpoint_id":"ck1","problem_ids":["a","b"],'
        b'"sampling":{"n":5,"temperature":1.0},"verifier_version":"v1"}'
    ).hexdigest()
    assert shard_key(["a", "b"], "ck1", {"temperature": 1.0, "n": 5}, "v1") == expected
    assert shard_key(["a", "b"], "ck1", {"n": 5, "temperature": 1.0}, "v1") == expected


def test_shard_key_changes_with_every_input():
    base = shard_key(["a", "b"], "ck1", {"n": 5}, "v1")
    assert shard_key(["b", "a"], "ck1", {"n": 5}, "v1") != base
    assert shard_key(["a", "b"], "ck2", {"n": 5}, "v1") != base
    assert shard_key(["a", "b"], "ck1", {"n": 6}, "v1") != base
    assert shard_key(["a", "b"], "ck1", {"n": 5}, "v2") != base


def test_shard_key_names_the_checkpoint_by_its_content_not_its_location():
    """The same weights stored under two homes give one key (and so one seed, one set of samples);
    different weights at one location do not."""
    here = shard_key(["a"], "file:///home/a/.passband/artifacts/checkpoints/sft/k/step-6@0123abcd", {"n": 5}, "v1")
    there = shard_key(["a"], "file:///tmp/b/.passband/artifacts/checkpoints/sft/k/step-6@0123abcd", {"n": 5}, "v1")
    other = shard_key(["a"], "file:///home/a/.passband/artifacts/checkpoints/sft/k/step-6@4567ef01", {"n": 5}, "v1")
    assert here == there == shard_key(["a"], "0123abcd", {"n": 5}, "v1")
    assert other != here


def test_split_into_shards_keeps_order():
    rows = [{"id": str(i)} for i in range(5)]
    shards = split_into_shards(rows, 2)
    assert [[row["id"] for row in shard] for shard in shards] == [["0", "1"], ["2", "3"], ["4"]]
    assert split_into_shards([], 3) == []
    with pytest.raises(ValueError, match="shard_size must be >= 1"):
        split_into_shards(rows, 0)


def test_checkpoint_id_hashes_the_model_files_not_the_resume_state(tmp_path):
    """Two runs that train bit-identical weights save different RNG states (rng.pt): committed
    under two homes, their checkpoints get one content hash; a different weight file does not."""
    from passband.tasks.artifacts.store import open_store
    from passband.tasks.sampling.keys import checkpoint_id

    def checkpoint(folder, rng: bytes, weights: bytes = b"w" * 64) -> Path:
        folder.mkdir(parents=True)
        for name, data in {"model.safetensors": weights, "config.json": b"{}", "rng.pt": rng,
                           "optimizer.pt": rng * 2, "trainer_state.json": rng + b"{}"}.items():
            (folder / name).write_bytes(data)
        return folder

    uris = [open_store(str(tmp_path / home / "artifacts")).commit(
                "checkpoints/sft/k/step-000006", checkpoint(tmp_path / home / "ckpt", rng),
                flow="sft", config={}, code_version="v")
            for home, rng in (("a", b"state-a"), ("b", b"state-b"))]
    ids = [checkpoint_id(uri, "") for uri in uris]
    assert ids[0] != ids[1]  # the refs hold the homes ...
    assert ids[0].rpartition("@")[2] == ids[1].rpartition("@")[2]  # ... the content hash does not
    plain = [checkpoint(tmp_path / name, rng, weights) for name, rng, weights in
             (("p1", b"x", b"w" * 64), ("p2", b"y", b"w" * 64), ("p3", b"x", b"v" * 64))]
    hashes = [checkpoint_id(str(path), str(path)).rpartition("@")[2] for path in plain]
    assert hashes[0] == hashes[1] != hashes[2]
