"""TRL's GRPOTrainer on the trainer check's shape: the side-by-side row of
`scripts/gpu_check_trainers.py --trl` (issue 50 item 6).

TRL is not one of our dependencies (its pins need not agree with ours), so it arrives on its own:
here `make install` puts its wheel alone in `.venv/trl` (the test puts that on PYTHONPATH); on a GPU
image, the wheels `scripts/gpu_check_wheels.sh` downloads, installed with `pip install --no-deps
--target DIR` and DIR on PYTHONPATH.

Same work as our RL row: the same random-weight model (build_model, the same seed), P prompts of
`prompt_len` tokens x 8 completions of exactly `response_len` tokens (min_new_tokens = max), half of
every group rewarded, no KL, one optimizer step per batch (micro-batches of 8, accumulated P times).
TRL's generation is transformers' `generate` (its default without vLLM), timed apart by wrapping
`GRPOTrainer._generate` (a private method of the pinned 1.16.0), so its update time is the step's
wall time less the generation's, the part our row times on its fixed batch. Otherwise TRL's own
defaults (SDPA attention, gradient checkpointing; bf16 autocast when our row runs in it).
"""

from __future__ import annotations

import tempfile
import time

GROUP = 8  # completions per prompt, as our row's rollout batch


def word_tokenizer(vocab_size: int):
    """A tokenizer for a random-weight model (none can travel to the GPU image): token i is the word
    `t<i>`, so a prompt of n words is n tokens. `t1` pads and `t2` ends a completion."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="t0", pad_token="t1", eos_token="t2")


def half_right(completions, **_) -> list[float]:
    """Every other completion rewarded: TRL lays a prompt's GROUP completions side by side, so every
    group has a reward spread (as our row's `float(i % 2)`)."""
    return [float(index % 2) for index in range(len(completions))]


def trl_check(model, device, precision: str, prompt_len: int, response_len: int, num_prompts: int,
              steps: int, vocab: int) -> dict[str, float | str]:
    """`steps` GRPOTrainer steps after one warm-up: seconds per step, generation and update apart."""
    import torch
    import trl
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from gpu_check_common import reset_peak, synchronize  # the scripts' shared pieces (this folder is on sys.path)

    generate_seconds: list[float] = []

    class TimedGRPO(GRPOTrainer):
        def _generate(self, prompts):
            synchronize(device)
            start = time.perf_counter()
            result = super()._generate(prompts)
            synchronize(device)
            generate_seconds.append(time.perf_counter() - start)
            return result

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.seconds: list[float] = []
            self.logs: list[dict] = []

        def on_step_begin(self, *_, **__):
            synchronize(device)
            self.start = time.perf_counter()

        def on_step_end(self, *_, **__):
            synchronize(device)
            self.seconds.append(time.perf_counter() - self.start)

        def on_log(self, _args, _state, _control, logs=None, **__):
            self.logs.append(dict(logs or {}))

    generator = torch.Generator().manual_seed(2)
    prompts = [" ".join(f"t{i}" for i in torch.randint(3, vocab, (prompt_len,), generator=generator).tolist())
               for _ in range(num_prompts)]
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as output_dir:
        config = GRPOConfig(
            output_dir=output_dir, use_cpu=device.type == "cpu", bf16=precision == "bf16_autocast",
            report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True, seed=0,
            max_steps=steps + 1, learning_rate=1e-6, lr_scheduler_type="constant",
            per_device_train_batch_size=GROUP, gradient_accumulation_steps=num_prompts, num_generations=GROUP,
            max_completion_length=response_len, generation_kwargs={"min_new_tokens": response_len},
            temperature=1.0, top_p=1.0, beta=0.0, num_iterations=1,
        )
        trainer = TimedGRPO(model=model, reward_funcs=half_right, args=config, processing_class=word_tokenizer(vocab),
                            train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]), callbacks=[timer])
        reset_peak(device)  # after the trainer put the model on the device: its weights count, as in our rows
        trainer.train()
    from passband.training.runtime.device import peak_memory_mb

    step_s = sum(timer.seconds[1:]) / steps
    generate_s = sum(generate_seconds[1:]) / steps
    update_s = step_s - generate_s
    lengths = [log["completions/mean_length"] for log in timer.logs if "completions/mean_length" in log]
    return {"trl_version": trl.__version__, "trl_step_s": step_s, "trl_generate_s": generate_s, "trl_update_s": update_s,
            "trl_tokens_per_s": num_prompts * GROUP * (prompt_len + response_len) / update_s,
            "trl_completion_mean_length": sum(lengths) / len(lengths), "trl_peak_memory_mb": peak_memory_mb(device)}
