"""transformers `generate` as a rollout engine: the fallback when vLLM is absent, and a reference.

Log-probs are computed from the raw logits `generate` returns: log_softmax(logits / temperature),
the same processed distribution vLLM reports with `logprobs_mode="processed_logprobs"` (top-p
renormalization is not applied here; keep top_p = 1 when comparing engines).
"""

from __future__ import annotations

from pathlib import Path

import torch

from passband.training.engines.protocol import Sample, SamplingSettings


class HFEngine:
    """Batched sampling with a transformers causal LM, one prompt at a time x n samples."""

    name = "hf"

    def __init__(self, model_dir: Path, dtype: str = "float32", seed: int = 0, batch_size: int = 16):
        from passband.training.model_source import load_causal_lm, load_tokenizer

        self.model = load_causal_lm(Path(model_dir), dtype).eval()
        self.tokenizer = load_tokenizer(Path(model_dir))
        self.seed = seed
        self.batch_size = batch_size
        """Prompts per `generate` call (each expanded to n samples)."""

    @torch.no_grad()
    def generate(self, prompts: list[str], settings: SamplingSettings) -> list[list[Sample]]:
        torch.manual_seed(settings.seed)
        tok = self.tokenizer
        tok.padding_side = "left"  # decoder-only: new tokens follow the last prompt token
        eos_ids = set() if settings.ignore_eos else {tok.eos_token_id}
        batches: list[list[Sample]] = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = prompts[start : start + self.batch_size]
            enc = tok(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
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
        self.model.load_state_dict(state, strict=False)
        self.model.tie_weights()

    def close(self) -> None:
        del self.model
