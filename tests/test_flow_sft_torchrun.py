"""The sft flow with `distributed.nproc_per_node: 2` (torchrun, FSDP2 on CPU, gloo) ends where one process does.

Three artifact roots, one MLflow database, the same tiny Llama, data and stage:
A: one process (the reference); B: two ranks launched by the flow; C: one process killed after
its 3rd step (step 2 committed), then rerun with two ranks, which must resume from step 2 and run
only steps 3 and 4. The ranks' own equivalence (micro-batch split, sharded resume) is
tests/test_sft_torchrun.py's subject; this test is about the flow around them: data handed to
the ranks, MLflow metrics and checkpoint commits from this process, the resume rule.
"""


import pytest
from mlflow import MlflowClient
from prefect.testing.utilities import prefect_test_harness
from safetensors.torch import load_file

from passband.flows.sft import SFTConfig, sft
from passband.tasks.artifacts.store import fetch_artifact, open_store
from passband.training.runtime.config import DistributedConfig
from passband.training.sft.config import StageConfig
from test_flow_sft import KilledForTesting, kill_after_steps
from test_sft_torchrun import _write_rows
from tiny_chat_model import tiny_llama, tiny_tokenizer

# micro_batch_tokens == max_length: one packed row per micro-batch, several per step, split over
# the ranks; fp32 so that the comparison bounds the ranks' summation order, not bf16 rounding.
STAGE = dict(name="s1", max_length=96, num_steps=4, lr=3e-3, warmup_steps=1, batch_tokens=300,
             micro_batch_tokens=96, grad_clip=0.5, checkpoint_every=2, seed=5, activation_checkpointing=True,
             precision="fp32")


def _config(model_dir, data_path, nproc: int) -> SFTConfig:
    stage = StageConfig(datasets={str(data_path): 1.0}, **STAGE)
    return SFTConfig(model=str(model_dir), stages=[stage], generated={},
                     distributed=DistributedConfig(nproc_per_node=nproc), eval=None)


pytestmark = pytest.mark.slow  # four flow runs, two of them launching 2 torchrun ranks


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sft-torchrun")
    model_dir, data_path = tmp / "tiny", tmp / "rows.jsonl"
    tiny_llama(seed=0, hidden=32).save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    _write_rows(data_path)
    with prefect_test_harness(server_startup_timeout=300), pytest.MonkeyPatch.context() as patch:
        patch.delenv("WORLD_SIZE", raising=False)
        patch.setenv("PASSBAND_HOME", str(tmp / "home"))
        patch.setenv("PASSBAND_EXPERIMENT", "test-sft-torchrun")
        out = {"home": tmp / "home"}
        for name, nproc in (("one", 1), ("two", 2)):
            patch.setenv("PASSBAND_ARTIFACT_ROOT", str(tmp / f"root_{name}"))
            out[name] = sft(_config(model_dir, data_path, nproc))
            out[f"store_{name}"] = open_store()
        patch.setenv("PASSBAND_ARTIFACT_ROOT", str(tmp / "root_resumed"))
        with pytest.raises(KilledForTesting), pytest.MonkeyPatch.context() as killing:
            kill_after_steps(killing, 3)
            sft(_config(model_dir, data_path, 1))
        out["resumed"] = sft(_config(model_dir, data_path, 2))
        yield out


def _weights(uri):
    return load_file(fetch_artifact(uri) / "model.safetensors")


def _history(run_id, name):
    return {m.step: m.value for m in MlflowClient().get_metric_history(run_id, name)}


def test_two_ranks_match_one_process(runs):
    one = _weights(runs["one"].outputs["checkpoint"])
    for name in ("two", "resumed"):
        weights = _weights(runs[name].outputs["checkpoint"])
        assert sorted(weights) == sorted(one)
        diff = max(float((weights[k] - one[k]).abs().max()) for k in one)
        print(f"{name}: max |weight - one process| = {diff:.3g}")
        # a dropped or doubled micro-batch moves weights by ~lr = 3e-3; rounding measured ~1e-7
        assert diff < 1e-6
    # the stage key does not depend on the number of ranks: same data, same key, same step names
    assert runs["two"].outputs["checkpoint"].split("/checkpoints/")[1] == \
        runs["one"].outputs["checkpoint"].split("/checkpoints/")[1]


def test_rank_zero_metrics_reach_mlflow_from_the_flow(runs):
    one_loss = _history(runs["one"].mlflow_run_id, "loss")
    two_loss = _history(runs["two"].mlflow_run_id, "loss")
    assert sorted(two_loss) == [1, 2, 3, 4]
    for step, value in one_loss.items():
        assert two_loss[step] == pytest.approx(value, rel=1e-5), step
    for name in ("lr", "grad_norm", "num_loss_tokens", "padding_fraction"):
        one, two = _history(runs["one"].mlflow_run_id, name), _history(runs["two"].mlflow_run_id, name)
        assert sorted(two) == [1, 2, 3, 4]
        assert two == pytest.approx(one, rel=1e-5), name
    assert runs["two"].metrics["s1/num_steps"] == 4.0
    assert runs["two"].metrics["s1/final_loss"] == pytest.approx(one_loss[4], rel=1e-5)


def test_checkpoints_committed_by_the_flow_and_scratch_removed(runs):
    store = runs["store_two"]
    prefix = runs["two"].outputs["checkpoint"].split("/checkpoints/")[1].rsplit("/", 1)[0]
    for step in (2, 4):
        manifest = store.manifest(f"checkpoints/{prefix}/step-{step:06d}")
        # the ranks' layout: each rank's shards (DCP) beside the HF export; no gathered optimizer.pt
        assert {"model.safetensors", "shards/.metadata", "shards/__0_0.distcp", "shards/__1_0.distcp", "rng.pt",
                "trainer_state.json"} <= set(manifest["files"])
        assert "optimizer.pt" not in manifest["files"]
        assert (manifest["extra"]["step"], manifest["extra"]["total_steps"]) == (step, 4)
    assert not list(runs["home"].glob("scratch/sft-checkpoints-*"))  # the ranks' scratch went with the stage


def test_rerun_under_two_ranks_resumes_from_the_newest_committed_checkpoint(runs):
    run_id = runs["resumed"].mlflow_run_id
    assert sorted(_history(run_id, "loss")) == [3, 4]  # steps 1-2 were committed by the killed run
    tags = MlflowClient().get_run(run_id).data.tags
    assert tags["stage.s1.status"] == "resumed from step 2"
