"""Structure checks: sections, final answer, truncation, repetition loops, length bounds, and
the combined report that records every check with its reason."""

import pytest

from passband.curation.verifiers.structure import (
    CHECK_NAMES,
    StructureSpec,
    check_final_answer,
    check_length,
    check_no_repetition,
    check_not_truncated,
    check_sections,
    check_structure,
    duplicate_ngram_fraction,
    longest_loop,
)

GOOD = "<think>\n2 plus 3 makes 5.\n</think>\nThe answer is \\boxed{5}."


def test_sections_present_in_order_and_non_empty():
    pairs = (("<think>", "</think>"), ("<answer>", "</answer>"))
    assert check_sections("<think>a</think><answer>b</answer>", pairs)[0]
    assert check_sections("<think>a</think>", ())[0]
    ok, reason = check_sections("<answer>b</answer><think>a</think>", pairs)
    assert not ok and "'<answer>'" in reason  # answer before think: out of order
    ok, reason = check_sections("<think>a", pairs)
    assert not ok and "never closed" in reason
    ok, reason = check_sections("<think>  \n</think><answer>b</answer>", pairs)
    assert not ok and "empty" in reason
    assert not check_sections("no tags at all", pairs)[0]


def test_final_answer_modes():
    ok, reason = check_final_answer("so \\boxed{\\frac{1}{2}}", "boxed")
    assert ok and reason == "boxed: '\\\\frac{1}{2}'"
    assert not check_final_answer("so \\boxed{}", "boxed")[0]
    assert not check_final_answer("so \\boxed{12", "boxed")[0]  # truncated inside the box
    assert not check_final_answer("the answer is 12", "boxed")[0]
    assert check_final_answer("Answer: 12", "regex", r"Answer:\s*(\S+)")[0]
    assert not check_final_answer("Answer:   ", "regex", r"Answer:\s*(\S*)")[0]
    assert check_final_answer("<answer>7</answer>", "answer_tag")[0]
    assert check_final_answer("anything", "none") == (True, "not configured")
    with pytest.raises(ValueError, match="boxes"):
        check_final_answer("x", "boxes")


def test_not_truncated():
    assert check_not_truncated("done", "stop")[0]
    ok, reason = check_not_truncated("half a sen", "length")
    assert not ok and "length" in reason
    assert check_not_truncated("x </answer>\n", "stop", "</answer>")[0]
    assert not check_not_truncated("</answer> then more", "stop", "</answer>")[0]


def test_longest_loop_counts_back_to_back_copies():
    words = "a b c a b c a b c x".split()
    assert longest_loop(words, 8) == (3, 3)
    assert longest_loop("the the the the".split(), 4) == (1, 4)
    assert longest_loop("no repeats in this line".split(), 4) == (0, 1)
    # Block longer than the search window: not seen as a loop.
    assert longest_loop("a b c a b c".split(), 2) == (0, 1)


def test_duplicate_ngram_fraction():
    # 2-grams of "a b a b a": ab ba ab ba -> 2 of 4 repeat an earlier one.
    assert duplicate_ngram_fraction("a b a b a".split(), 2) == 0.5
    assert duplicate_ngram_fraction("one two".split(), 3) == 0.0


def test_no_repetition_loop_and_fraction():
    sentence = "Then we add the two numbers together. "
    # 4 copies in a row = 3 extra repeats: allowed at max_repeats=3, rejected at 2.
    assert check_no_repetition(sentence * 4, 4, 1.0, 32, 3)[0]
    ok, reason = check_no_repetition(sentence * 4, 4, 1.0, 32, 2)
    assert not ok and "7-word block repeats 4 times" in reason
    # A long period (> max_loop_words) is caught by the duplicate n-gram fraction instead.
    long_block = " ".join(f"w{i}" for i in range(40)) + " "
    ok, reason = check_no_repetition(long_block * 3, 4, 0.5, 32, 3)
    assert not ok and "duplicates" in reason
    natural = "First we read the problem. Next we add three and four to get seven."
    assert check_no_repetition(natural, 4, 0.5, 32, 3)[0]


def test_length_bounds():
    assert check_length("  abc  ", None, min_chars=3, max_chars=3)[0]
    assert not check_length("ab", None, min_chars=3)[0]
    assert not check_length("abcd", None, max_chars=3)[0]
    assert check_length("x", 10, min_tokens=10, max_tokens=10)[0]
    assert not check_length("x", 9, min_tokens=10)[0]
    assert not check_length("x", 11, max_tokens=10)[0]
    with pytest.raises(ValueError, match="num_tokens"):
        check_length("x", None, max_tokens=10)


def test_check_structure_records_every_check():
    report = check_structure(GOOD, "stop", StructureSpec())
    assert report.ok and set(report.checks) == set(CHECK_NAMES) == set(report.reasons)
    assert report.failed() == []


def test_check_structure_failures_and_answer_outside_think():
    inside_only = "<think>\nIt is \\boxed{5}\n</think>\nDone."
    report = check_structure(inside_only, "length", StructureSpec())
    assert report.failed() == ["final_answer", "not_truncated"]
    relaxed = StructureSpec(answer_after_sections=False)
    assert check_structure(inside_only, "stop", relaxed).ok


def test_check_structure_disabled_checks_say_so():
    spec = StructureSpec(sections=(), answer_mode="none")
    report = check_structure("plain text", None, spec)
    assert report.ok
    assert report.reasons["sections"] == report.reasons["final_answer"] == "not configured"


def test_spec_rejects_bad_settings():
    with pytest.raises(ValueError, match="answer_mode"):
        StructureSpec(answer_mode="boxes")
    with pytest.raises(ValueError, match="answer_regex"):
        StructureSpec(answer_mode="regex")
    with pytest.raises(ValueError, match=">= 1"):
        StructureSpec(ngram_size=0)
