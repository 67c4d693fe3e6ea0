"""The shared chat template: rendered prompts, SFT token ids and loss masks checked by hand."""

import pytest

from tiny_chat_model import IM_END, IM_START, tiny_tokenizer
from passband.training.chat import encode_prompt, encode_sft_example, render_prompt, to_messages


def _bytes(text: str) -> list[int]:
    return list(text.encode())


# The rendered prompt for user "hi" with the template's default system message "S".
PROMPT_HI = [IM_START, *_bytes("system\nS"), IM_END, *_bytes("\n"), IM_START, *_bytes("user\nhi"), IM_END,
             *_bytes("\n"), IM_START, *_bytes("assistant\n")]


def test_render_prompt_is_chatml_with_generation_prompt():
    tokenizer = tiny_tokenizer()
    assert render_prompt(tokenizer, "hi") == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert render_prompt(tokenizer, "hi", system="Be brief.") == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_encode_sft_example_mask_covers_response_and_end_of_turn_only():
    tokenizer = tiny_tokenizer()
    input_ids, loss_mask = encode_sft_example(tokenizer, "hi", "ok", max_length=64)
    assert len(PROMPT_HI) == 32  # 1+6+1+1+1+1 + 1+4+1+2+1+1 + 1+9+1, counted from the template
    assert input_ids == PROMPT_HI + [ord("o"), ord("k"), IM_END]
    assert loss_mask == [0] * 32 + [1, 1, 1]


def test_prompt_tokens_equal_what_the_rollout_engine_is_given():
    tokenizer = tiny_tokenizer()
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "2+3=?"}]
    input_ids, loss_mask = encode_sft_example(tokenizer, messages, " 5\nDone.", max_length=256)
    num_prompt = loss_mask.index(1)
    rollout_ids = tokenizer(render_prompt(tokenizer, messages), add_special_tokens=False)["input_ids"]
    assert input_ids[:num_prompt] == rollout_ids == encode_prompt(tokenizer, messages)
    assert all(loss_mask[num_prompt:]) and not any(loss_mask[:num_prompt])
    assert tokenizer.decode(input_ids[num_prompt:-1]) == " 5\nDone."
    assert input_ids[-1] == IM_END


def test_too_long_example_is_refused_not_truncated():
    tokenizer = tiny_tokenizer()
    with pytest.raises(ValueError, match="35 tokens, more than max_length=34"):
        encode_sft_example(tokenizer, "hi", "ok", max_length=34)
    assert len(encode_sft_example(tokenizer, "hi", "ok", max_length=35)[0]) == 35


def test_system_twice_is_refused():
    with pytest.raises(ValueError, match="already starts with a system message"):
        to_messages([{"role": "system", "content": "a"}, {"role": "user", "content": "b"}], system="c")
