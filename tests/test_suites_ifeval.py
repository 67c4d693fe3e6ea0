"""The instruction-following suite: schema, determinism, valid and satisfiable references,
constraint pools that keep apart what clashes, and prompts that state each constraint."""

import itertools
import json

import pytest

from passband.curation.suites.ifeval_constraints import (
    EASY_IDS,
    END_PHRASES,
    HARD_IDS,
    START_PHRASES,
    TASKS,
    TOPICS,
    WORDS,
)
from passband.curation.suites.ifeval_suite import generate_ifeval
from passband.curation.suites.rows import validate_row
from passband.curation.verifiers.ifeval import check_instructions, validate_instruction
from passband.curation.verifiers.ifeval_checks import CHECKERS


def test_rows_follow_the_schema_and_reference_valid_instructions():
    for difficulty in ("easy", "hard", "mixed"):
        rows = generate_ifeval(200, seed=3, difficulty=difficulty)
        for index, row in enumerate(rows):
            assert validate_row(row, index) is None
            assert row["task"] == "ifeval" and row["source"] == "passband-procedural"
            instructions = row["reference"]["instructions"]
            assert 1 <= len(instructions) <= 3
            assert len({i["id"] for i in instructions}) == len(instructions)
            for instruction in instructions:
                validate_instruction(instruction)  # raises on an unknown id or bad kwargs
        assert len({row["prompt"] for row in rows}) == len(rows)
        assert len({row["id"] for row in rows}) == len(rows)


def test_pools_cover_every_checker_and_easy_is_the_measured_kinds():
    assert set(EASY_IDS) | set(HARD_IDS) == set(CHECKERS)
    assert not set(EASY_IDS) & set(HARD_IDS)
    assert "keywords:existence" in EASY_IDS and "change_case:english_capital" in HARD_IDS
    rows = generate_ifeval(100, seed=0, difficulty="easy")
    used = {i["id"] for row in rows for i in row["reference"]["instructions"]}
    assert used == set(EASY_IDS)


def test_deterministic_for_a_seed_and_prefix_stable():
    first = generate_ifeval(30, seed=7, difficulty="mixed")
    assert first == generate_ifeval(30, seed=7, difficulty="mixed")
    assert first[:10] == generate_ifeval(10, seed=7, difficulty="mixed")
    assert first[0]["id"] == "ifeval-mixed-c3-s7-0"
    other = generate_ifeval(30, seed=8, difficulty="mixed")
    assert [r["prompt"] for r in first] != [r["prompt"] for r in other]


def test_subdomain_is_the_first_instructions_category():
    expected = {"keywords": "keywords", "length_constraints": "length", "punctuation":
                "punctuation", "startend": "startend", "detectable_format": "format",
                "change_case": "case", "detectable_content": "content",
                "combination": "combination"}
    for row in generate_ifeval(100, seed=1, difficulty="mixed"):
        category = row["reference"]["instructions"][0]["id"].split(":")[0]
        assert row["subdomain"] == expected[category]


def test_clashing_constraints_never_share_a_row():
    groups = [
        {"change_case:english_capital", "change_case:english_lowercase",
         "change_case:capital_word_frequency"},
        {"length_constraints:number_words", "length_constraints:number_sentences"},
    ]
    for row in generate_ifeval(500, seed=2, difficulty="mixed"):
        ids = {i["id"] for i in row["reference"]["instructions"]}
        for group in groups:
            assert len(ids & group) <= 1, ids
        if "detectable_format:json_format" in ids:
            assert all(i.startswith("keywords:") for i in ids - {"detectable_format:json_format"})


def test_prompt_states_each_constraints_values():
    for row in generate_ifeval(100, seed=4, difficulty="mixed"):
        for instruction in row["reference"]["instructions"]:
            for value in instruction["kwargs"].values():
                shown = value if isinstance(value, list) else [value]
                for item in shown:
                    if item not in ("less than", "at least"):  # stated as "fewer than" etc.
                        assert str(item) in row["prompt"], (instruction, row["prompt"])


def test_word_pool_is_disjoint_from_topics_tasks_and_phrases():
    fixed_text = " ".join((*TOPICS, *TASKS, *END_PHRASES, *START_PHRASES)).lower()
    assert [word for word in WORDS if word in fixed_text] == []


def _any_response(instructions: list[dict]) -> str:
    """A response built to meet any combination the suite draws (three at most)."""
    k = {i["id"]: i["kwargs"] for i in instructions}
    body = ["we talk about it"]
    body += k.get("keywords:existence", {}).get("keywords", [])
    frequency = k.get("keywords:frequency")
    if frequency and frequency["relation"] == "at least":
        body += [frequency["keyword"]] * frequency["frequency"]
    if "keywords:letter_frequency" in k:
        body.append(k["keywords:letter_frequency"]["letter"] * 8)
    capitals = k.get("change_case:capital_word_frequency")
    if capitals and capitals["capital_relation"] == "at least":
        body += ["NASA"] * capitals["capital_frequency"]
    body += [f"*part{n}*" for n in range(k.get(
        "detectable_format:number_highlighted_sections", {}).get("num_highlights", 0))]
    body += [f"[slot{n}]" for n in range(k.get(
        "detectable_content:number_placeholders", {}).get("num_placeholders", 0))]
    if "detectable_format:title" in k:
        body.append("<<my title>>")
    if "detectable_format:constrained_response" in k:
        body.append("My answer is yes.")
    text = " ".join(body)
    sentences = k.get("length_constraints:number_sentences")
    if sentences and sentences["relation"] == "at least":
        text += " " + " ".join(f"Line {n} is here." for n in range(sentences["num_sentences"]))
    words = k.get("length_constraints:number_words")
    if words and words["relation"] == "at least":
        text += " more" * words["num_words"]
    if "detectable_format:json_format" in k:
        text = json.dumps({"answer": text})
    if "detectable_format:number_bullet_lists" in k:
        text += "".join(f"\n* item {n}" for n in range(k[
            "detectable_format:number_bullet_lists"]["num_bullets"]))
    if "detectable_format:multiple_sections" in k:
        marker = k["detectable_format:multiple_sections"]["section_spliter"]
        text = " ".join(f"{marker} {n} {text}" for n in range(
            1, k["detectable_format:multiple_sections"]["num_sections"] + 1))
    if "length_constraints:number_paragraphs" in k:
        count = k["length_constraints:number_paragraphs"]["num_paragraphs"]
        text = "\n***\n".join([text] + ["another part"] * (count - 1))
    if "length_constraints:nth_paragraph_first_word" in k:
        spec = k["length_constraints:nth_paragraph_first_word"]
        paragraphs = [text] + ["another part"] * (spec["num_paragraphs"] - 1)
        nth = spec["nth_paragraph"] - 1
        paragraphs[nth] = f"{spec['first_word']} {paragraphs[nth]}"
        text = "\n\n".join(paragraphs)
    if "combination:two_responses" in k:
        text += "\n******\nanother answer"
    if "combination:repeat_prompt" in k:
        text = k["combination:repeat_prompt"]["prompt_to_repeat"] + " " + text
    if "detectable_content:postscript" in k:
        text += " " + k["detectable_content:postscript"]["postscript_marker"] + " note"
    if "startend:start_checker" in k:
        text = k["startend:start_checker"]["start_phrase"] + " " + text
    if "startend:end_checker" in k:
        text += " " + k["startend:end_checker"]["end_phrase"]
    if "change_case:english_capital" in k:
        text = text.upper()
    if "change_case:english_lowercase" in k:
        text = text.lower()
    if "startend:quotation" in k:
        text = f'"{text}"'
    return text


@pytest.mark.parametrize("difficulty", ["easy", "hard", "mixed"])
def test_every_generated_reference_is_satisfiable(difficulty):
    for row in generate_ifeval(300, seed=5, difficulty=difficulty):
        instructions = row["reference"]["instructions"]
        response = _any_response(instructions)
        assert check_instructions(response, instructions) == [True] * len(instructions), (
            row["prompt"], response)


def test_a_hard_reference_by_hand():
    # Placeholders + repeat the prompt + all capitals, answered by hand.
    instructions = [
        {"id": "detectable_content:number_placeholders", "kwargs": {"num_placeholders": 2}},
        {"id": "combination:repeat_prompt",
         "kwargs": {"prompt_to_repeat": "Write a short blog post about trains."}},
        {"id": "change_case:english_capital", "kwargs": {}},
    ]
    good = "WRITE A SHORT BLOG POST ABOUT TRAINS. [NAME] RODE THE TRAIN TO [CITY]."
    assert check_instructions(good, instructions) == [True, True, True]
    assert check_instructions(good.lower(), instructions) == [True, True, False]


@pytest.mark.parametrize("kwargs, message", [
    ({"num_problems": -1, "seed": 0}, "num_problems"),
    ({"num_problems": 1, "seed": 0, "difficulty": "medium"}, "difficulty"),
    ({"num_problems": 1, "seed": 0, "max_constraints": 0}, "max_constraints"),
    ({"num_problems": 1, "seed": 0, "max_constraints": 7, "difficulty": "easy"},
     "max_constraints"),
])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        generate_ifeval(**kwargs)


def test_constraint_count_follows_max_constraints():
    counts = {len(r["reference"]["instructions"])
              for r in generate_ifeval(100, seed=6, max_constraints=1, difficulty="hard")}
    assert counts == {1}
    counts = [len(r["reference"]["instructions"])
              for r in generate_ifeval(300, seed=6, max_constraints=3, difficulty="easy")]
    assert {1, 2, 3} == set(counts)
    # Uniform in 1..3: each count holds 20%..47% of 300 rows (expected 33%; a loose band).
    for count, group in itertools.groupby(sorted(counts)):
        assert 60 <= len(list(group)) <= 140, count
