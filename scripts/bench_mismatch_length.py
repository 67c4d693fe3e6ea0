"""What each rejecting correction drops of on-policy rollouts as responses grow, a bf16 engine
against an fp32 trainer, on a box without a bf16 engine worth running (issue 53: the `gpu` preset's
correction at 1024-token responses).

    .venv/bin/python scripts/bench_mismatch_length.py [--prompts 8] [--group 4] [--tokens 1024]
                                                      [--lengths 128 256 512 1024]

On an AVX2-only CPU vLLM's bf16 is emulated (5x slower) and `dtype: auto` samples in fp32, where
the engine's and the trainer's log-probs agree to ~1e-10 and nothing is rejected: the mismatch the
`gpu` preset meets (a bf16 engine, an fp32 or autocast trainer) does not arise. This measures its
proxy on the shipped SmolLM2-135M-Instruct and the RL demo's math, code and ifeval prompts. The
"engine" is the model in transformers with bf16 numerics (its weights rounded to bf16 and every
linear layer's, norm's and embedding's output rounded to bf16, accumulating in fp32 as a GPU's bf16
GEMMs do; an fp32 forward otherwise, so it runs at fp32 speed where bf16 arithmetic is emulated): it
samples prompts x group responses of exactly --tokens tokens (T = 1, no top-k/top-p, EOS not
stopping them) in one left-padded batch with a KV cache, and records each sampled token's log-prob
from that pass, as vLLM reports its own. The "trainer" scores every response in fp32, one full
forward each. `training.rl.algebra.mismatch.rejection_fractions` says what seq-MIS, token-MIS (C = 2) and
geo-MIS (1.001) would reject at each length, taking each response's first L tokens (a prefix of a
sample is the sample a shorter max_tokens draws). Prints vllm_kl (mismatch_kl), the fractions and
the mean of log rho over sequences per length.

The samples must come from the engine's side. Drawn from the fp32 model instead (this script's first
version), the mean of log(pi_trainer / pi_engine) is +KL(trainer || engine) per token, a drift that
over 1024 tokens pushes the product above C on its own (seq-MIS rejected 54% that way); drawn from
the engine it is -KL(engine || trainer), and only the spread reaches C.

What it is not: vLLM's bf16 kernels (a fused attention and sampler) round in other places than
these hooks, and a 1.5B model differs from a 135M one, so read the growth with length
and the modes' order, not the exact rates a GPU run will log (`mismatch_would_reject/*` every update).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def with_bf16_numerics(model):
    """`model` (fp32) with bf16 weights and bf16 outputs of every linear layer, norm and embedding,
    computed in fp32 between the roundings."""
    import torch

    def rounded(module, inputs, output):
        return output.to(torch.bfloat16).to(torch.float32)

    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(parameter.to(torch.bfloat16).to(torch.float32))
    for module in model.modules():
        if isinstance(module, torch.nn.Linear | torch.nn.Embedding) or type(module).__name__.endswith("RMSNorm"):
            module.register_forward_hook(rounded)
    return model


def token_logprobs(model, prompt_ids: list[int], response_ids: list[int]):
    """log p(response token | everything before it) under `model`, fp32 log-softmax of its logits."""
    import torch

    ids = torch.tensor([prompt_ids + response_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1:-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(response_ids)[:, None])[:, 0]


def sample_with_logprobs(model, tokenizer, prompts: list[str], tokens: int):
    """Each prompt's token ids, the sampled responses' log-probs under `model` as it sampled them, and the
    responses' token ids: one left-padded batch with a KV cache, T = 1 over the full distribution, exactly
    `tokens` tokens (EOS does not stop a response, as vLLM's ignore_eos). A loop of its own rather than
    `generate`, which would keep every step's logits (24 x 1024 x 49152 floats: 4.8 GB)."""
    import torch
    from tqdm import tqdm

    encoded = [tokenizer(prompt, add_special_tokens=False)["input_ids"] for prompt in prompts]
    width = max(len(ids) for ids in encoded)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = torch.tensor([[pad] * (width - len(row)) + row for row in encoded])
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in encoded])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    generator = torch.Generator().manual_seed(0)
    past, logps, sampled = None, [], []
    with torch.no_grad():
        for _ in tqdm(range(tokens), desc="sampling with bf16 numerics", unit="token"):
            out = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=past,
                        use_cache=True)
            past = out.past_key_values
            step_logp = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
            ids = torch.multinomial(step_logp.exp(), 1, generator=generator)
            logps.append(step_logp.gather(-1, ids)[:, 0])
            sampled.append(ids[:, 0])
            mask = torch.cat([mask, torch.ones_like(ids)], dim=-1)
            positions = positions[:, -1:] + 1
    return encoded, torch.stack(logps, dim=1), torch.stack(sampled, dim=1).tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024])
    args = parser.parse_args()

    import torch
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM

    from passband.curation.suites.code_suite import generate_code
    from passband.curation.suites.ifeval_suite import generate_ifeval
    from passband.curation.suites.math_suite import generate_math
    from passband.training.chat import render_prompt
    from passband.training.model_source import gguf_to_safetensors, load_tokenizer, smollm2_gguf_path
    from passband.training.rl.algebra.mismatch import mismatch_kl, rejection_fractions

    model_dir = gguf_to_safetensors(smollm2_gguf_path(), Path(tempfile.mkdtemp(prefix="bench-model-")))
    tokenizer = load_tokenizer(model_dir)
    per_task = -(-args.prompts // 3)
    rows = [*generate_math(per_task, seed=1, difficulty=0), *generate_code(per_task, seed=1),
            *generate_ifeval(per_task, seed=1, difficulty="easy")][:args.prompts]
    prompts = [render_prompt(tokenizer, row["prompt"], None) for row in rows for _ in range(args.group)]

    start = time.perf_counter()
    engine = with_bf16_numerics(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                                     attn_implementation="sdpa").eval())
    prompt_ids, engine_logp, response_ids = sample_with_logprobs(engine, tokenizer, prompts, args.tokens)
    del engine
    sampled_s = time.perf_counter() - start

    start = time.perf_counter()
    trainer_model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                         attn_implementation="eager").eval()
    pairs = tqdm(list(zip(prompt_ids, response_ids)), desc="scoring in fp32", unit="response")
    trainer = torch.stack([token_logprobs(trainer_model, p, r) for p, r in pairs])
    scored_s = time.perf_counter() - start
    bounds = {"seq_mis": (2.0, None), "token_mis": (2.0, None), "geo_mis": (1.001, None)}

    print(f"\n{len(prompts)} responses ({len(rows)} prompts x {args.group}) of {args.tokens} tokens; sampled with "
          f"bf16 numerics in {sampled_s:.0f} s, scored by the fp32 trainer in {scored_s:.0f} s\n")
    print("| response tokens | vllm_kl (bf16 vs fp32) | mean log rho (seq) | seq-MIS rejects (seqs) "
          "| geo-MIS rejects (seqs) | token-MIS: seqs with a rejected token | token-MIS: tokens rejected "
          "| max abs token log-ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for length in args.lengths:
        t, e = trainer[:, :length], engine_logp[:, :length]
        mask = torch.ones_like(t)
        fractions = rejection_fractions(t, e, mask, bounds)
        print(f"| {length} | {mismatch_kl(t, e, mask):.2e} | {float((t - e).sum(-1).mean()):+.3f} "
              f"| {fractions['seq_mis']:.3f} | {fractions['geo_mis']:.3f} | {fractions['token_mis']:.3f} "
              f"| {fractions['token_mis_tokens']:.4f} | {float((t - e).abs().max()):.3f} |")


if __name__ == "__main__":
    main()
