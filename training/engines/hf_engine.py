"""transformers `generate` as a rollout engine: the fallback when vLLM is absent, and a reference.

Log-probs are computed from the raw logits `generate` returns: log_softmax(logits / temperature),
the same processed distribution vLLM reports with `logprobs_mode="processed_logprobs"` (top-p
renormalization is not applied here; keep top_p = 1 when comparing engines).

Seeding: each call samples from torch's CPU generator reseeded with `sampling.seed` inside
`fork_rng`, so a call repeats in any process whatever ran before, and the caller's (the
trainer's) random stream is left untouched. The samples still depend on the batch (prompts and
`batch_size`: padding and the row a sample lands in change the draws) and on the hardware
(matmul kernels differ between CPUs/GPUs, so bf16 logits can differ in the last bit). With
`prompt_keys` every prompt is generated on its own, from a seed derived from its key: slower, but
a prompt's samples then no longer depend on the rest of the call.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import torch

from passband.training.engines.config import EngineConfig, SamplingConfig
from passband.training.engines.protocol import Sample
from passband.training.engines.seeds import request_seed


def _cast_body(model: torch.nn.Module, dtype: str, lm_head_fp32: bool) -> None:
    """Cast an fp32 model to `dtype`, keeping (an untied copy of) the LM head in fp32 when asked."""
    head = model.get_output_embeddings()
    fp32_weight = head.weight.detach().clone() if lm_head_fp32 else None
    model.to(getattr(torch, dtype))
    if lm_head_fp32:
        # a tied head shares its tensor with the bf16 input embedding: give it its own fp32 copy
        head.weight = torch.nn.Parameter(fp32_weight, requires_grad=False)


class HFEngine:
    """Batched sampling with a transformers causal LM, `batch_size` prompts x n samples a step."""

    name = "hf"

    def __init__(self, model_dir: Path, config: EngineConfig = EngineConfig(kind="hf"), batch_size: int = 16,
                 device: torch.device | None = None):
        from passband.training.model_source import load_causal_lm, load_tokenizer

        self.config = config
        # the GPU when torch sees one, the same test `resolved_dtype` makes when it picks bf16 for it:
        # bf16 on the CPU of a GPU machine would be the slowest of both
        self.device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
        """Where the model samples; the prompts are encoded on the host and moved there once per batch."""
        self.model = load_causal_lm(Path(model_dir), "float32", config.trust_remote_code).eval().to(self.device)
        _cast_body(self.model, config.resolved_dtype(), config.lm_head_fp32)
        # the head's input (the last hidden state) arrives in the body's dtype; an fp32 head
        # computes in fp32 only if its input is cast too
        self.model.get_output_embeddings().register_forward_pre_hook(
            lambda module, args: (args[0].to(module.weight.dtype),)
        )
        self.tokenizer = load_tokenizer(Path(model_dir), config.trust_remote_code)
        self.batch_size = batch_size
        """Prompts per `model.generate` call (each expanded to n samples)."""

    @torch.no_grad()
    def generate(
        self, prompts: list[str] | list[list[int]], sampling: SamplingConfig, prompt_keys: list[str] | None = None
    ) -> list[list[Sample]]:
        if prompt_keys is None:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(sampling.seed)
                return self._generate(prompts, sampling)
        if len(prompt_keys) != len(prompts):
            raise ValueError(f"generate got {len(prompt_keys)} prompt_keys for {len(prompts)} prompts")
        batches = []
        for index, (prompt, key) in enumerate(zip(prompts, prompt_keys)):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(request_seed(sampling.seed, key))
                (group,) = self._generate([prompt], sampling)
            batches.append([replace(sample, prompt_index=index) for sample in group])
        return batches

    def _generate(self, prompts: list[str] | list[list[int]], settings: SamplingConfig) -> list[list[Sample]]:
        tok = self.tokenizer
        tok.padding_side = "left"  # decoder-only: new tokens follow the last prompt token
        eos_ids = set() if settings.ignore_eos else {tok.eos_token_id}
        batches: list[list[Sample]] = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = prompts[start : start + self.batch_size]
            if isinstance(chunk[0], str):
                enc = tok(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
            else:  # token-id prompts (a multi-turn episode's context) are continued as they are
                enc = tok.pad({"input_ids": chunk}, return_tensors="pt")
            enc = enc.to(self.device)
            out = self.model.generate(
                **enc,
                do_sample=settings.temperature > 0,
                temperature=settings.temperature if settings.temperature > 0 else None,
                top_p=settings.top_p,
                top_k=0,
                max_new_tokens=settings.max_tokens,
                min_new_tokens=settings.max_tokens if settings.ignore_eos else None,
                num_return_sequences=settings.n,
                stop_strings=list(settings.stop) or None,
                tokenizer=tok if settings.stop else None,
                output_logits=True,
                return_dict_in_generate=True,
                pad_token_id=tok.pad_token_id,
            )
            new_tokens = out.sequences[:, enc["input_ids"].shape[1] :]  # [b*n, steps]
            logits = torch.stack(out.logits, dim=1).float()  # [b*n, steps, V]
            temperature = settings.temperature if settings.temperature > 0 else 1.0
            step_logp = torch.log_softmax(logits / temperature, dim=-1)
            token_logp = step_logp.gather(2, new_tokens[..., None]).squeeze(-1)
            for row in range(new_tokens.shape[0]):
                prompt_index = start + row // settings.n
                ids = new_tokens[row].tolist()
                # generate pads finished rows with pad (= eos here); keep up to and including EOS
                length = next((i + 1 for i, t in enumerate(ids) if t in eos_ids), len(ids))
                ids = ids[:length]
                finished = bool(ids) and ids[-1] in eos_ids
                text = tok.decode(ids, skip_special_tokens=True)
                hit_stop = any(s in text for s in settings.stop)
                prompt_ids = enc["input_ids"][row // settings.n][enc["attention_mask"][row // settings.n].bool()]
                sample = Sample(
                    prompt_index=prompt_index,
                    sample_index=row % settings.n,
                    token_ids=ids,
                    text=text,
                    logprobs=token_logp[row, :length].tolist(),
                    finish_reason="stop" if finished or hit_stop else "length",
                    prompt_token_ids=prompt_ids.tolist(),
                )
                if row % settings.n == 0:
                    batches.append([])
                batches[-1].append(sample)
        return batches

    def load_weights(self, checkpoint_dir: Path) -> None:
        from safetensors.torch import load_file

        state = {}
        for path in sorted(Path(checkpoint_dir).glob("*.safetensors")):
            state.update(load_file(str(path)))
        self.load_state(state.items())

    def load_state(self, tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        state = dict(tensors)
        # back to fp32 first so that the new values are stored exactly before the cast
        self.model.float()
        self.model.load_state_dict(state, strict=False)
        self.model.tie_weights()
        _cast_body(self.model, self.config.resolved_dtype(), self.config.lm_head_fp32)

    def release_weights(self) -> None:
        """Nothing: a reference engine, not sized for memory."""

    def sleep(self) -> None:
        """Nothing to release: the model runs in the caller's process and threads."""

    def wake(self) -> None:
        """Nothing to restore (see sleep)."""

    def close(self) -> None:
        del self.model
