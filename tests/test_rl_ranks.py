"""The RL update on 2 torchrun ranks (FSDP2 on CPU, gloo) ends where one process does, a
checkpoint the 2 ranks wrote resumes in the flow's one-process trainer, and the weights the ranks
publish for the engine are the versions the in-process trainer publishes (bf16, an fp32 head).

One tiny Llama, three fixed batches, the same Clip-Cov seeds. The reference is the in-process
trainer (`open_trainer` + `rl_update` + `publish_version`, what the flow runs at nproc_per_node 1).
The ranks get the requests update, update, checkpoint, update, checkpoint, stop (training/rl/launch.py).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from tiny_chat_model import VOCAB_SIZE, tiny_llama, tiny_tokenizer
from passband.training.logprobs import response_logprobs
from passband.training.rl.batches.batching import RolloutBatch
from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.launch import RanksConfig, batch_request, write_request
from passband.training.rl.trainer import open_trainer
from passband.training.rl.update import rl_update
from passband.training.weights.versions import MANIFEST, committed_versions, publish_version

REPO = Path(__file__).resolve().parents[1]
# fp32 (bf16's own rounding would swamp the summation-order differences compared here). Micro-batches
# of 5 over 11 valid rows and 1 invalid one: 3 + 1 micro-batches, so rank 1 runs padding passes.
ALGOS = {
    # KL as a loss (the reference sharded too), two inner steps: the scoring pass, then plain steps.
    "kl_two_steps": RLAlgoConfig(lr=3e-3, precision="fp32", micro_batch_size=5, num_inner_steps=2, kl_coef=0.1,
                                 kl_placement="loss", kl_estimator="k3", grad_clip=0.5),
    # The default fused step: pi_old from the step's own forward, row by row across ranks.
    "fused": RLAlgoConfig(lr=3e-3, precision="fp32", micro_batch_size=5, grad_clip=0.5),
    # A warmup across the resume: each rank's rate from its own optimizer state, gathered and reloaded.
    "lr_warmup": RLAlgoConfig(lr=3e-3, precision="fp32", micro_batch_size=5, grad_clip=0.5, lr_warmup_steps=3),
}
COMPARED = ("loss", "grad_norm", "vllm_kl", "vllm_kl_all", "entropy", "trainer_ppl", "advantages_std")


def _batch(model, seed: int) -> RolloutBatch:
    """3 prompts x 4 rollouts of random tokens; engine log-probs = the start model's + noise; row 5 invalid."""
    gen = torch.Generator().manual_seed(seed)
    prompts, responses = [], []
    for _ in range(3):
        prompt = torch.randint(0, 256, (int(torch.randint(3, 9, (1,), generator=gen)),), generator=gen).tolist()
        for _ in range(4):
            prompts.append(prompt)
            responses.append(torch.randint(0, VOCAB_SIZE - 3, (int(torch.randint(2, 12, (1,), generator=gen)),),
                                           generator=gen).tolist())
    with torch.no_grad():
        own = [response_logprobs(model, [p], [r]).logp[0].tolist() for p, r in zip(prompts, responses)]
    engine = [[v + 0.05 * float(torch.randn(1, generator=gen)) for v in row] for row in own]
    rewards = [float(torch.rand(1, generator=gen) > 0.5) for _ in prompts]
    valid = [i != 5 for i in range(len(prompts))]
    return RolloutBatch(prompt_ids=prompts, response_ids=responses, engine_logp=engine, rewards=rewards, valid=valid,
                        tasks=["math"] * len(prompts), group_size=4)


def _torchrun(config: RanksConfig) -> list[dict]:
    config_file = config.work_dir / "ranks.yaml"
    config_file.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           "-m", "passband.training.rl.launch", str(config_file)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert sorted(a) == sorted(b)
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _version(path: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """(manifest, tensors) of a published weight version."""
    manifest = json.loads((path / MANIFEST).read_text())
    tensors = {}
    for name in manifest["files"]:
        tensors |= load_file(path / name)
    return manifest, tensors


def _bf16_ulps(a: torch.Tensor, b: torch.Tensor, slack: float) -> float:
    """max of (|a - b| - slack) in units of one bf16 ulp at the larger magnitude (8 significant
    bits: |x| in [2^(e-1), 2^e) has ulp 2^(e-8)); 0 where both are zero. Two casts of fp32 values
    `slack` apart differ by at most one ulp plus that slack: near zero, where the ulp is far below
    the slack, the slack alone is the bound (a weight of 1e-6 has a bf16 ulp of 7.5e-9)."""
    big = torch.maximum(a.float().abs(), b.float().abs())
    _, exponent = torch.frexp(big)
    ulp = torch.ldexp(torch.ones_like(big), exponent - 8)
    return float(((a.float() - b.float()).abs() - slack).clamp(min=0).div(ulp).max())


@pytest.mark.parametrize("algo_name", sorted(ALGOS))
def test_two_ranks_match_one_process_and_resume_in_one(tmp_path, monkeypatch, algo_name):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    algo = ALGOS[algo_name]
    model_dir = tmp_path / "model"
    start = tiny_llama(seed=0, hidden=32).eval()
    start.save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    batches = [_batch(start, seed) for seed in (1, 2, 3)]

    # Two ranks: every request written up front; they answer in order.
    work_dir = tmp_path / "ranks"
    state = {"iteration": 2, "consumed": {"math": 6}, "prompt_ids": [], "best": None, "metrics": {}}
    for number, request in enumerate([batch_request(batches[0], 11, 1), batch_request(batches[1], 12, 2),
                                      {"kind": "checkpoint", "name": "iter-000002", "state": state},
                                      batch_request(batches[2], 13, 3),
                                      {"kind": "checkpoint", "name": "iter-000003", "state": state | {"iteration": 3}},
                                      {"kind": "stop"}], start=1):
        write_request(work_dir, number, request)
    # the engine's settings: a bf16 body, the (tied) head kept fp32; every version kept to compare them
    replies = _torchrun(RanksConfig(model=model_dir, algo=algo, work_dir=work_dir, engine_dtype="bfloat16",
                                    lm_head_fp32=True, keep_versions=3))
    assert replies[0] == {"ready": True} and [r["request"] for r in replies[1:]] == [1, 2, 3, 4, 5, 6]
    two_metrics = [replies[i]["metrics"] for i in (1, 2, 4)]
    assert [replies[i]["weights"] for i in (1, 2, 4)] == [str(work_dir / "weights" / f"v{v}") for v in (1, 2, 3)]
    assert committed_versions(work_dir / "weights") == [1, 2, 3]
    checkpoint = Path(replies[3]["checkpoint"])
    two_final = load_file(Path(replies[5]["checkpoint"]) / "model.safetensors")  # fp32, after 3 updates

    # One process, the flow's in-process trainer.
    one = open_trainer(model_dir, ["math"], algo)
    one_metrics, at_two = [], None
    for i, (batch, seed) in enumerate(zip(batches, (11, 12, 13))):
        one_metrics.append(rl_update(one.model, one.ref_model, one.optimizer, batch, algo,
                                     torch.Generator().manual_seed(seed)))
        publish_version(one.model, tmp_path / "one_weights", i + 1, "bfloat16", lm_head_fp32=True, keep=3)
        if i == 1:
            at_two = ({k: v.clone() for k, v in one.model.state_dict().items() if k != "lm_head.weight"},
                      {i: {k: v.clone() for k, v in s.items()} for i, s in one.optimizer.state_dict()["state"].items()})
    one_final = {k: v for k, v in one.model.state_dict().items() if k != "lm_head.weight"}

    # fp32: the ranks add gradients (and the clipping norm's squares) in another order, so the
    # runs differ by rounding, measured below 1e-7; one AdamW step moves a weight by ~lr = 3e-3,
    # so a micro-batch dropped or counted twice is orders of magnitude above the 1e-5 bound.
    final_diff = _max_diff(two_final, one_final)
    print(f"{algo_name}: max |2 ranks - 1 process| after 3 updates = {final_diff:.3g}")
    assert final_diff <= 1e-5

    # The published versions: what the in-process trainer publishes after the same update, bf16 with
    # the tied head (the embedding) in fp32. The head is compared as the fp32 weights are (1e-5); a bf16
    # weight may round the other way where the two fp32 runs (1e-7 apart) straddle a rounding midpoint,
    # so the body is compared to one bf16 ulp (a dropped micro-batch moves weights by ~lr = 3e-3,
    # many ulps of the ~0.02 weights).
    for version in (1, 3):
        manifest, two_version = _version(work_dir / "weights" / f"v{version}")
        one_manifest, one_version = _version(tmp_path / "one_weights" / f"v{version}")
        assert manifest == one_manifest  # the same shards, of the same sizes
        assert (manifest["version"], manifest["dtype"], manifest["lm_head_fp32"]) == (version, "bfloat16", True)
        assert {k: (t.dtype, t.shape) for k, t in two_version.items()} == {k: (t.dtype, t.shape)
                                                                            for k, t in one_version.items()}
        assert {k for k, t in two_version.items() if t.dtype == torch.float32} == {"model.embed_tokens.weight"}
        head = "model.embed_tokens.weight"
        head_diff = float((two_version[head] - one_version[head]).abs().max())
        # slack: the fp32 weights' own difference, bounded below (1.2e-7 measured after 3 updates)
        ulps = max(_bf16_ulps(two_version[k], one_version[k], 1e-6) for k in two_version if k != head)
        print(f"{algo_name}: v{version} published by 2 ranks vs 1 process: head {head_diff:.3g}, body {ulps} bf16 ulps")
        assert head_diff <= 1e-5 and ulps <= 1
    # AdamW is blind to a uniform gradient scale, so the loss and the pre-clip grad norm are compared:
    # a wrong normalisation (averaging the ranks, a padding pass that counts) shows by its factor.
    # The loss is a sum of advantage-weighted terms of size ~1 that nearly cancel (0.018 at the
    # third update of kl_two_steps, 2.2e-7 apart), so its rounding is bounded absolutely: abs=1e-6.
    keys = COMPARED + (("kl_ref_k1",) if algo.kl_coef else ())
    for two, ones in zip(two_metrics, one_metrics, strict=True):
        for key in keys:
            assert two[key] == pytest.approx(ones[key], rel=1e-5, abs=1e-6), key
        assert two["num_train_tokens"] == ones["num_train_tokens"]
    # At the first update the weights are still equal: each row's log-probs come from the same forward
    # on one rank and are merged by adding zeros, so theta_k's view of the batch is the same bit for bit.
    for key in ("vllm_kl", "vllm_kl_all", "entropy", "trainer_ppl", "advantages_std"):
        assert two_metrics[0][key] == one_metrics[0][key], key

    # The 2-rank checkpoint: the one-process layout, resumed by the in-process trainer.
    resumed = open_trainer(model_dir, ["math"], algo, resume_dir=checkpoint)
    assert resumed.state.iteration == 2 and resumed.state.consumed == {"math": 6}
    weights_diff = _max_diff({k: v for k, v in resumed.model.state_dict().items() if k != "lm_head.weight"}, at_two[0])
    adam = resumed.optimizer.state_dict()["state"]
    assert sorted(adam) == sorted(at_two[1])
    for index, moments in at_two[1].items():
        assert int(adam[index]["step"]) == int(moments["step"]) == 2 * algo.num_inner_steps  # 2 updates
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(adam[index][key], moments[key], rtol=1e-4, atol=1e-9)
    assert weights_diff <= 1e-5
    rl_update(resumed.model, resumed.ref_model, resumed.optimizer, batches[2], algo, torch.Generator().manual_seed(13))
    resumed_diff = _max_diff({k: v for k, v in resumed.model.state_dict().items() if k != "lm_head.weight"}, one_final)
    print(f"{algo_name}: resumed at 1 rank from the 2-rank checkpoint, then 1 update: max diff {resumed_diff:.3g}")
    assert resumed_diff <= 1e-5


def test_the_flow_handle_finds_the_newest_version_the_ranks_published(tmp_path):
    import queue

    from passband.tasks.steps.rl_torchrun import RanksTrainer
    from passband.training.runtime.config import DistributedConfig
    from passband.training.weights.versions import publish_state_dict

    # no ranks are launched: the handle only reads what rank 0 wrote under work_dir/weights
    trainer = RanksTrainer(tokenizer=None, weights_dir=tmp_path, state=None, work_dir=tmp_path / "ranks", ranks=None,
                           distributed=DistributedConfig(nproc_per_node=2), lines=queue.Queue())
    assert trainer.weights_root == tmp_path / "ranks" / "weights"
    with pytest.raises(FileNotFoundError, match="published no weights"):
        trainer.published
    state = {"embed.weight": torch.ones(2, 2)}
    for version in (1, 2):
        publish_state_dict(state, "embed.weight", trainer.weights_root, version, "bfloat16", False, keep=2)
    (trainer.weights_root / "v3").mkdir()  # a version being written (no manifest yet) is not the newest
    assert trainer.published == trainer.weights_root / "v2"


def two_updates_on_ranks(tmp_path: Path, algo: RLAlgoConfig, **ranks: object) -> tuple:
    """A tiny Llama saved under tmp_path/model, two batches on it, and the replies of 2 ranks (`algo`, RanksConfig
    `ranks`) asked to update on both and checkpoint: (start model, its dir, batches, replies)."""
    model_dir = tmp_path / "model"
    start = tiny_llama(seed=0, hidden=32).eval()
    start.save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    batches = [_batch(start, seed) for seed in (1, 2)]
    work_dir = tmp_path / "ranks"
    state = {"iteration": 2, "consumed": {"math": 6}, "prompt_ids": [], "best": None, "metrics": {}}
    for number, request in enumerate([batch_request(batches[0], 11, 1), batch_request(batches[1], 12, 2),
                                      {"kind": "checkpoint", "name": "iter-000002", "state": state},
                                      {"kind": "stop"}], start=1):
        write_request(work_dir, number, request)
    return start, model_dir, batches, _torchrun(RanksConfig(model=model_dir, algo=algo, work_dir=work_dir, **ranks))


@pytest.mark.slow
def test_two_ranks_in_bf16_mixed_precision_track_one_process(tmp_path, monkeypatch):
    """precision bf16_autocast on ranks: FSDP2 gathers and runs each decoder layer in bf16 and reduces its
    gradients in fp32 (MixedPrecisionPolicy), over fp32 shards and AdamW, the root (embedding, final norm,
    LM head) in fp32. Its two updates move the weights where one process under bf16 autocast moves them,
    to bf16's rounding: the residual stream inside a layer is bf16 there, fp32 under autocast."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    algo = RLAlgoConfig(lr=3e-3, precision="bf16_autocast", micro_batch_size=5, grad_clip=0.5)
    start, model_dir, batches, replies = two_updates_on_ranks(tmp_path, algo)
    two = load_file(Path(replies[3]["checkpoint"]) / "model.safetensors")
    assert {t.dtype for t in two.values()} == {torch.float32}  # the shards and the export stay fp32

    one = open_trainer(model_dir, ["math"], algo)
    for batch, seed in zip(batches, (11, 12)):
        rl_update(one.model, one.ref_model, one.optimizer, batch, algo, torch.Generator().manual_seed(seed))
    initial = {k: v for k, v in start.state_dict().items() if k != "lm_head.weight"}
    moved_one = torch.cat([(one.model.state_dict()[k] - v).flatten() for k, v in initial.items()])
    moved_two = torch.cat([(two[k] - v).flatten() for k, v in initial.items()])
    apart = float((moved_two - moved_one).norm() / moved_one.norm())
    fp32 = RLAlgoConfig(lr=3e-3, precision="fp32", micro_batch_size=5, grad_clip=0.5)
    reference = open_trainer(model_dir, ["math"], fp32)
    for batch, seed in zip(batches, (11, 12)):
        rl_update(reference.model, reference.ref_model, reference.optimizer, batch, fp32, torch.Generator().manual_seed(seed))
    moved_fp32 = torch.cat([(reference.model.state_dict()[k] - v).flatten() for k, v in initial.items()])
    bf16_vs_fp32 = float((moved_one - moved_fp32).norm() / moved_fp32.norm())
    print(f"bf16 mixed precision: |2 ranks' move - 1 process' move| / |1 process' move| = {apart:.3g}; "
          f"one process, bf16 autocast against fp32: {bf16_vs_fp32:.3g}")
    assert float(moved_one.norm()) > 0.1  # two AdamW steps of lr 3e-3 over ~20k weights
    # apart by bf16's rounding (the layers really ran in bf16: fp32 ranks agree to ~1e-7), and no more
    # than bf16 autocast is from fp32 in one process, twice over: a dropped micro-batch or a gradient
    # averaged instead of summed moves AdamW's steps by their whole size
    assert 1e-4 < apart < 2 * bf16_vs_fp32
