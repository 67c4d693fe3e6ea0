"""The memory model per rank on a mesh (training/memory_model.py `per_rank`, `trainer_memory`'s
sequence_parallel), the doctor's plan of the long-context preset (flows/presets/sft/recipe-long.yaml), and
the checkpointing settings the preflight suggests: numbers computed by hand."""

from __future__ import annotations

from click.testing import CliRunner

from passband.cli.main import load_flow, main
from passband.flows.config import resolve_config
from passband.flows.memory_check import Estimate, Target, estimates
from passband.training.memory_model import GIB, ModelShape, activation_bytes_per_token, per_rank, trainer_memory

GPU_80 = Target("cuda", 80 * GIB)
TINY = ModelShape(hidden=64, layers=2, intermediate=128, heads=4, kv_heads=2, vocab=256, head_dim=16,
                  tied_embeddings=True)


def test_sequence_parallel_divides_the_activations_and_the_logits_chunk() -> None:
    """A rank of an SP group of 4 holds 1000 / 4 = 250 of the micro-batch's tokens; the LM head's chunk
    is min(chunk, 250) tokens; the state is the whole model's until `per_rank` splits it."""
    one = trainer_memory(TINY, "fp32", 1000, 1024)
    four = trainer_memory(TINY, "fp32", 1000, 1024, sequence_parallel=4)
    per_token = activation_bytes_per_token(TINY, "fp32")
    assert (one.activations, four.activations) == (1000 * per_token, 250 * per_token)
    assert (one.logits, four.logits) == (3 * 1000 * 256 * 4, 3 * 250 * 256 * 4)
    assert (four.weights, four.gradients, four.optimizer) == (one.weights, one.gradients, one.optimizer)
    # 1001 tokens over 4 ranks: the largest shard, 251
    assert trainer_memory(TINY, "fp32", 1001, 1024, sequence_parallel=4).activations == 251 * per_token


def test_per_rank_splits_the_state_and_adds_the_gathered_layers() -> None:
    """TINY: 256 x 64 embedding (tied) + 2 layers of 64 x (64 + 2 x 32) + 64 x 64 attention, 3 x 64 x 128
    MLP and two norms + the final norm: layer 36,992, model 90,432 parameters. Over 8 shard x sp ranks
    each holds an eighth of 4 + 4 + 8 bytes a parameter, and two whole layers in bf16 plus one layer's
    fp32 gradient: 36,992 x (2 x 2 + 4)."""
    assert (TINY.layer_parameters, TINY.parameters) == (36_992, 90_432)
    whole = trainer_memory(TINY, "bf16_autocast", 64, 64)
    rank = per_rank(whole, TINY, "bf16_autocast", 8)
    assert (rank.weights, rank.gradients, rank.optimizer) == (45_216, 45_216, 90_432)
    assert rank.gathered == 36_992 * 8
    assert (rank.activations, rank.logits, rank.autocast_copies) == (whole.activations, whole.logits,
                                                                     whole.autocast_copies)
    assert rank.peak == whole.peak - (whole.weights + whole.gradients + whole.optimizer) + 180_864 + 295_936
    assert per_rank(whole, TINY, "fp32", 8).gathered == 36_992 * 12  # fp32 layers: 2 x 4 + 4
    assert per_rank(whole, TINY, "bf16_autocast", 1) == whole  # one process: nothing gathered


def _recipe_long(overrides: list[str] | None = None):
    return resolve_config(load_flow("sft")[1], "sft", "recipe-long", (), overrides or [])


def test_recipe_long_plans_each_stage_per_rank_by_hand() -> None:
    """sft/recipe-long on 8 80-GiB GPUs, shard 2 x sequence_parallel 4, Qwen2.5-7B (7,615,616,512
    parameters, layers of 233,057,792), bf16 autocast. Per rank: an eighth of 16 bytes a parameter; two
    bf16 layers and one fp32 layer gradient gathered (8 bytes a layer parameter); one layer's bf16 copies
    (2); the LM head's 1024-token chunk (3 x 1024 x 152,064 x 4). Activations per token, bf16, selective:
    28 layers x 120,944 (4 h + 2 (2 q + 2 kv + 2 h + 2 I) + 4 heads = 14,336 + 106,496 + 112) + the layer
    being recomputed, 261,240 (30 h + 8 I + 4 kv + 4 heads + 8) + 29,708 (8 h + 8 head_dim + 12) =
    3,677,380; every-layer: 28 x 14,336 + 261,240 + 29,708 = 692,356. A rank holds a quarter of each row:
    4096, 8192 and 16,384 tokens."""
    found = list(estimates(_recipe_long(), target=GPU_80))
    assert [e.where for e in found] == ["sft.stages.0", "sft.stages.1", "sft.stages.2"]
    assert all(isinstance(e, Estimate) and e.fit.fits for e in found), [e.report() for e in found]
    n, layer = 7_615_616_512, 233_057_792
    state = 4 * n // 8 + 4 * n // 8 + 8 * n // 8
    fixed = state + 8 * layer + 2 * layer + 3 * 1024 * 152_064 * 4
    expected = [fixed + 4096 * 3_677_380, fixed + 8192 * 3_677_380, fixed + 16_384 * 692_356]
    assert [e.fit.phases["training"] for e in found] == expected
    assert [round(e.fit.phases["training"] / GIB, 1) for e in found] == [32.1, 46.2, 28.7]  # the preset's comment
    assert "per rank of 8 (replicate 1 x shard 2 x sequence_parallel 4)" in found[0].assumptions
    assert "activation checkpointing selective" in found[0].assumptions


def test_what_does_not_fit_at_64k_and_the_refusal_names_the_lighter_checkpointing() -> None:
    """At 64K with sequence_parallel 2 (32K tokens a rank) selective keeps 32,768 x 3,677,380 bytes, 112 GiB;
    without checkpointing neither SP degree fits."""
    (_, _, stage) = estimates(_recipe_long(["stages.2.activation_checkpointing=selective",
                                            "distributed.sequence_parallel=2"]), target=GPU_80)
    assert stage.trainer.activations == 32_768 * 3_677_380 and not stage.fit.fits
    assert "try a smaller sft.stages.2.micro_batch_tokens, sft.stages.2.activation_checkpointing: every-layer, " \
        "sft.stages.2.lora" in stage.problem()
    (_, _, none) = estimates(_recipe_long(["stages.2.activation_checkpointing=none"]), target=GPU_80)
    assert not none.fit.fits
    assert ("sft.stages.2.activation_checkpointing: selective, sft.stages.2.activation_checkpointing: every-layer"
            in none.problem())
    # the old boolean still reads as every-layer
    (_, _, old) = estimates(_recipe_long(["stages.2.activation_checkpointing=true"]), target=GPU_80)
    assert old.fit.phases == list(estimates(_recipe_long(), target=GPU_80))[2].fit.phases


def test_replicas_hold_copies_and_sequence_parallel_ranks_split_the_state() -> None:
    """Two nodes: replicate 2 x shard 2 x sp 4 holds per rank what one node's shard 2 x sp 4 does (the
    replicas hold copies); shard 4 x sp 4 halves the state again."""
    two_nodes = ["distributed.nnodes=2", "distributed.rendezvous_endpoint=node0:29400"]
    one = list(estimates(_recipe_long(), target=GPU_80))[0].trainer
    replicated = list(estimates(_recipe_long([*two_nodes, "distributed.replicate=2"]), target=GPU_80))[0].trainer
    sharded = list(estimates(_recipe_long(two_nodes), target=GPU_80))[0].trainer
    assert replicated == one
    assert (sharded.weights, sharded.optimizer) == (-(-4 * 7_615_616_512 // 16), 7_615_616_512 // 2)
    assert sharded.activations == one.activations


def test_doctor_prints_the_long_context_plan_for_a_gpu() -> None:
    result = CliRunner().invoke(main, ["doctor", "sft", "--preset", "recipe-long", "--gpu-gib", "80"])
    assert result.exit_code == 0, result.output
    assert "sft.stages.2: Qwen/Qwen2.5-7B-Instruct" in result.output
    assert "65536 tokens per micro-batch, bf16_autocast, activation checkpointing every-layer, per rank of 8" \
        in result.output
    assert "FSDP2 gathered layers" in result.output and result.output.count("fits: ") == 3
