"""Stage data: band filter and mix proportions by hand; unusable rows quarantined with a reason."""

import pytest

from tiny_chat_model import IM_END, tiny_tokenizer
from passband.training.sft.data import encode_rows, mix_stage_rows


def _rows(prefix, n, band="medium"):
    return [{"id": f"{prefix}{i}", "prompt": f"q{i}", "completion": f"a{i}", "band": band} for i in range(n)]


def test_mix_takes_shares_without_upsampling():
    datasets = {"math": _rows("m", 10), "code": _rows("c", 3) + _rows("e", 4, band="easy")}
    # After the band filter: math 10, code 3. Shares 2/3, 1/3 -> N = min(10/(2/3), 3/(1/3)) = 9 -> 6 + 3.
    mixed, left_out = mix_stage_rows(datasets, {"math": 2.0, "code": 1.0}, ["medium", "hard"], seed=0)
    assert sorted(r["dataset"] for r in mixed) == ["code"] * 3 + ["math"] * 6
    assert len({r["id"] for r in mixed}) == 9
    reasons = sorted(r["removed_reason"] for r in left_out)
    assert reasons == ["band='easy' not in ['medium', 'hard']"] * 4 + ["beyond the mix share of 'math'"] * 4
    again, _ = mix_stage_rows(datasets, {"math": 2.0, "code": 1.0}, ["medium", "hard"], seed=0)
    assert [r["id"] for r in again] == [r["id"] for r in mixed]


def test_mix_refuses_unknown_dataset():
    with pytest.raises(ValueError, match=r"\['ifeval'\]"):
        mix_stage_rows({"math": _rows("m", 2)}, {"math": 1.0, "ifeval": 1.0}, [], seed=0)


def test_encode_rows_quarantines_missing_and_too_long():
    tokenizer = tiny_tokenizer()
    rows = [
        {"prompt": "hi", "completion": "ok"},  # 35 tokens (see test_sft_chat)
        {"prompt": "hi", "completion": ""},
        {"prompt": "hi", "completion": "okay"},  # 37 tokens
    ]
    examples, quarantined = encode_rows(tokenizer, rows, max_length=36)
    assert len(examples) == 1 and examples[0].input_ids[-3:] == [ord("o"), ord("k"), IM_END]
    assert [q["removed_reason"] for q in quarantined] == ["missing completion", "too_long: 37 tokens > max_length=36"]
