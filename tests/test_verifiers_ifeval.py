"""IFEval-style checkers: hand-made positive and negative cases per instruction type, relation
boundaries, strict vs loose, and the batch verifier's scores, statuses and errors."""

import pytest

from passband.curation.verifiers import ifeval_checks as c
from passband.curation.verifiers.ifeval import (
    check_instructions,
    loose_variants,
    reference_error,
    validate_instruction,
    verify_ifeval,
)


def test_at_least_22_instruction_types():
    assert len(c.CHECKERS) >= 22


# ---- helpers -----------------------------------------------------------------------------


def test_compare_boundaries():
    assert c.compare(2, "less than", 3) and not c.compare(3, "less than", 3)
    assert c.compare(3, "at least", 3) and not c.compare(2, "at least", 3)
    with pytest.raises(ValueError, match="at most"):
        c.compare(1, "at most", 3)


def test_count_words_counts_word_character_runs():
    assert c.count_words("Hello, world!  It's 2024.") == 5  # Hello world It s 2024
    assert c.count_words("") == 0


@pytest.mark.parametrize(
    "text, expected",
    [
        ("One. Two! Three?", 3),
        ("No final punctuation here", 1),
        ("Dr. Smith met Mr. Jones. They talked.", 2),
        ("Pi is 3.14 roughly. Yes.", 2),
        ("J. R. R. Tolkien wrote books. He died.", 2),
        ('She said "hi." Then left.', 2),
        ("Wait... what?! Really.", 3),
        ("Heading\n\n- item one\n- item two", 1),  # as punkt: no punctuation, no end
        ("Bye now. P.S. see you soon.", 2),  # "P.S." is not a sentence end
        ("...", 0),
        ("", 0),
        ("e.g. this is one sentence.", 1),
    ],
)
def test_split_sentences(text, expected):
    assert len(c.split_sentences(text)) == expected


# ---- keywords ----------------------------------------------------------------------------


def test_keyword_existence():
    assert c.keyword_existence("The River is long.", keywords=["river", "long"])
    assert not c.keyword_existence("The river is wide.", keywords=["river", "long"])
    # IFEval matches substrings: "cat" is found in "category".
    assert c.keyword_existence("A category.", keywords=["cat"])
    # Literal match: regex characters in a keyword are not special.
    assert c.keyword_existence("I write C++ daily", keywords=["c++"])
    assert not c.keyword_existence("I write C daily", keywords=["c++"])


def test_keyword_frequency_boundaries():
    text = "sun, Sun and SUN. sunny"  # 4 substring occurrences
    assert c.keyword_frequency(text, keyword="sun", frequency=4, relation="at least")
    assert not c.keyword_frequency(text, keyword="sun", frequency=5, relation="at least")
    assert c.keyword_frequency(text, keyword="sun", frequency=5, relation="less than")
    assert not c.keyword_frequency(text, keyword="sun", frequency=4, relation="less than")


def test_forbidden_words_whole_word():
    assert c.forbidden_words("A category of things", forbidden_words=["cat"])
    assert not c.forbidden_words("The Cat sat.", forbidden_words=["dog", "cat"])


def test_letter_frequency():
    text = "Banana bread"  # a: 4 (B-a-n-a-n-a b-r-e-a-d), b: 2
    assert c.letter_frequency(text, letter="a", let_frequency=4, let_relation="at least")
    assert not c.letter_frequency(text, letter="a", let_frequency=5, let_relation="at least")
    assert c.letter_frequency(text, letter="B", let_frequency=3, let_relation="less than")
    assert not c.letter_frequency(text, letter="b", let_frequency=2, let_relation="less than")


# ---- change_case -------------------------------------------------------------------------


def test_english_capital_and_lowercase():
    assert c.english_capital("HELLO, WORLD 42!")
    assert not c.english_capital("HELLO, World")
    assert not c.english_capital("123 !!")  # no cased character at all
    assert c.english_lowercase("hello, world 42!")
    assert not c.english_lowercase("hello, World")


def test_capital_word_frequency():
    text = "NASA and the ESA launched an X-RAY probe. I cheered."  # NASA ESA X-RAY I = 4
    assert c.capital_word_frequency(text, capital_frequency=4, capital_relation="at least")
    assert not c.capital_word_frequency(text, capital_frequency=5, capital_relation="at least")
    assert c.capital_word_frequency(text, capital_frequency=5, capital_relation="less than")
    assert not c.capital_word_frequency(text, capital_frequency=4, capital_relation="less than")


# ---- detectable_format -------------------------------------------------------------------


def test_json_format():
    assert c.json_format('{"a": [1, 2]}')
    assert c.json_format('```json\n{"a": 1}\n```')
    assert c.json_format("  [1, 2]  ")
    assert not c.json_format('Here you go: {"a": 1}')
    assert not c.json_format("{'a': 1}")


def test_number_bullet_lists_exact():
    three = "Intro\n* one\n* two\n- three\n**Bold line** is not a bullet"
    assert c.number_bullet_lists(three, num_bullets=3)
    assert not c.number_bullet_lists(three, num_bullets=2)
    assert not c.number_bullet_lists(three, num_bullets=4)
    assert c.number_bullet_lists("no list here", num_bullets=0)


def test_number_highlighted_sections():
    text = "Some *first* and **second** text, and an empty ** pair."
    assert c.number_highlighted_sections(text, num_highlights=2)
    assert not c.number_highlighted_sections(text, num_highlights=3)
    assert not c.number_highlighted_sections("plain", num_highlights=1)


def test_multiple_sections():
    text = "Section 1\nIntro.\nSection 2\nBody.\nSection 3\nEnd."
    assert c.multiple_sections(text, section_spliter="Section", num_sections=3)
    assert not c.multiple_sections(text, section_spliter="Section", num_sections=4)
    # The marker is case-sensitive, as in IFEval.
    assert not c.multiple_sections(text, section_spliter="SECTION", num_sections=1)


def test_title():
    assert c.title("<<The Sea>>\nIt is big.")
    assert not c.title("<< >> no title")
    assert not c.title("<<broken\ntitle>>")
    assert not c.title("The Sea")


def test_constrained_response():
    assert c.constrained_response("I thought about it. My answer is maybe.")
    assert not c.constrained_response("My answer is perhaps.")


# ---- startend, punctuation, content ------------------------------------------------------


def test_end_checker():
    assert c.end_checker('Sure thing. "Is there anything else I can help with?"  ',
                         end_phrase="Is there anything else I can help with?")
    assert c.end_checker("bye. THE END", end_phrase="The end")
    assert not c.end_checker("The end. Bye", end_phrase="The end")


def test_start_checker():
    assert c.start_checker('  "sure, here it is', start_phrase="Sure")
    assert not c.start_checker("Well, sure", start_phrase="Sure")


def test_quotation():
    assert c.quotation('  "wrapped in quotes"\n')
    assert not c.quotation('"half wrapped')
    assert not c.quotation('"')  # a single quote mark wraps nothing


def test_no_comma():
    assert c.no_comma("No commas here.")
    assert not c.no_comma("One, two.")


def test_number_placeholders():
    assert c.number_placeholders("Send to [name] at [address].", num_placeholders=2)
    assert not c.number_placeholders("Send to [name].", num_placeholders=2)


def test_postscript():
    assert c.postscript("Hello.\n\nP.S. see you", postscript_marker="P.S.")
    assert c.postscript("Hello.\np. s. lowercase and spaced", postscript_marker="P.S.")
    assert c.postscript("Hello.\nP.P.S more", postscript_marker="P.P.S")
    assert not c.postscript("Hello. PS see you", postscript_marker="P.S.")


# ---- length_constraints ------------------------------------------------------------------


def test_number_words_boundaries():
    five = "one two three four five"
    assert c.number_words(five, num_words=5, relation="at least")
    assert not c.number_words(five, num_words=6, relation="at least")
    assert c.number_words(five, num_words=6, relation="less than")
    assert not c.number_words(five, num_words=5, relation="less than")


def test_number_sentences_boundaries():
    three = "It rains. It pours! Why?"
    assert c.number_sentences(three, num_sentences=3, relation="at least")
    assert not c.number_sentences(three, num_sentences=4, relation="at least")
    assert c.number_sentences(three, num_sentences=4, relation="less than")
    assert not c.number_sentences(three, num_sentences=3, relation="less than")


def test_number_paragraphs():
    assert c.number_paragraphs("One.\n***\nTwo.\n***\nThree.", num_paragraphs=3)
    assert c.number_paragraphs("***\nOne.\n***\nTwo.\n***", num_paragraphs=2)  # ends ignored
    assert not c.number_paragraphs("One.\n***\nTwo.", num_paragraphs=3)
    assert not c.number_paragraphs("One.\n***\n***\nTwo.", num_paragraphs=2)  # empty middle


def test_nth_paragraph_first_word():
    text = "First para.\n\n\"Moreover, second.\n\nThird one."
    kwargs = {"num_paragraphs": 3, "nth_paragraph": 2}
    assert c.nth_paragraph_first_word(text, first_word="moreover", **kwargs)
    assert not c.nth_paragraph_first_word(text, first_word="first", **kwargs)
    assert not c.nth_paragraph_first_word(text, first_word="moreover", num_paragraphs=2,
                                          nth_paragraph=2)
    assert not c.nth_paragraph_first_word("Only one.", first_word="only", num_paragraphs=2,
                                          nth_paragraph=2)


# ---- combination -------------------------------------------------------------------------


def test_repeat_prompt():
    prompt = "Write a haiku about rain."
    assert c.repeat_prompt("write a haiku about rain. Drops fall...", prompt_to_repeat=prompt)
    assert not c.repeat_prompt("Here: write a haiku about rain.", prompt_to_repeat=prompt)


def test_two_responses():
    assert c.two_responses("Cats are nice.\n******\nDogs are loyal.")
    assert not c.two_responses("Same.\n******\nSame.")
    assert not c.two_responses("A\n******\nB\n******\nC")
    assert not c.two_responses("A\n******\n******\nB")  # empty middle response


# ---- strict vs loose, validation, batch verifier ----------------------------------------


def test_loose_variants_are_ifevals_eight():
    variants = loose_variants("Intro line\n*body*\noutro")
    assert variants[0] == "Intro line\n*body*\noutro"
    assert "*body*\noutro" in variants and "Intro line\n*body*" in variants
    assert "body" in variants and len(variants) == 8


def test_loose_accepts_what_strict_rejects():
    # A chatty first line breaks "starts with" strictly; loose drops the first line.
    text = "Sure! Here is my answer:\nHello there friend."
    instructions = [{"id": "startend:start_checker", "kwargs": {"start_phrase": "Hello"}}]
    assert check_instructions(text, instructions, "strict") == [False]
    assert check_instructions(text, instructions, "loose") == [True]
    # Markdown asterisks around a quoted answer break quotation strictly; loose strips them.
    quoted = '*"Quoted"*'
    assert check_instructions(quoted, [{"id": "startend:quotation"}], "strict") == [False]
    assert check_instructions(quoted, [{"id": "startend:quotation"}], "loose") == [True]


def test_empty_text_fails_every_instruction():
    instructions = [{"id": "punctuation:no_comma"}, {"id": "keywords:forbidden_words",
                                                     "kwargs": {"forbidden_words": ["x"]}}]
    assert check_instructions("   ", instructions, "loose") == [False, False]


def test_validate_instruction_errors():
    with pytest.raises(ValueError, match="keywords:nonsense"):
        validate_instruction({"id": "keywords:nonsense", "kwargs": {}})
    with pytest.raises(ValueError, match="bad kwargs"):
        validate_instruction({"id": "keywords:existence", "kwargs": {"keyword": ["a"]}})
    with pytest.raises(ValueError, match="bad kwargs"):
        validate_instruction({"id": "length_constraints:number_words", "kwargs": {}})
    with pytest.raises(ValueError, match="relation"):
        validate_instruction({"id": "length_constraints:number_words",
                              "kwargs": {"num_words": 3, "relation": "more than"}})
    # None-valued kwargs (the Hugging Face copy of IFEval) are dropped, not rejected.
    validate_instruction({"id": "punctuation:no_comma", "kwargs": {"num_words": None}})


def test_check_instructions_rejects_bad_mode():
    with pytest.raises(ValueError, match="mode"):
        check_instructions("x", [{"id": "punctuation:no_comma"}], "lenient")


def test_verify_ifeval_scores_and_detail():
    reference = {"instructions": [
        {"id": "keywords:existence", "kwargs": {"keywords": ["ocean"]}},
        {"id": "punctuation:no_comma", "kwargs": {}},
        {"id": "length_constraints:number_sentences",
         "kwargs": {"num_sentences": 2, "relation": "less than"}},
    ]}
    completions = ["The ocean is deep.", "The ocean, vast. It is deep.", "Mountains, tall. Yes."]
    results = verify_ifeval(completions, [reference] * 3)
    assert [r.status for r in results] == ["pass", "fail", "fail"]
    assert [r.score for r in results] == [1.0, pytest.approx(1 / 3), 0.0]
    assert results[1].detail == ("keywords:existence=1,punctuation:no_comma=0,"
                                 "length_constraints:number_sentences=0")


def test_verify_ifeval_empty_completion_is_fail_not_unparsable():
    reference = {"instructions": [{"id": "punctuation:no_comma"}]}
    (result,) = verify_ifeval([""], [reference])
    assert (result.status, result.score) == ("fail", 0.0)


def test_verify_ifeval_errors_name_the_row_and_id():
    good = {"instructions": [{"id": "punctuation:no_comma"}]}
    bad = {"instructions": [{"id": "detectable_format:haiku", "kwargs": {}}]}
    with pytest.raises(ValueError, match=r"row 1: .*detectable_format:haiku"):
        verify_ifeval(["a", "b"], [good, bad])
    with pytest.raises(ValueError, match="row 0: reference needs"):
        verify_ifeval(["a"], [{"instructions": []}])
    with pytest.raises(ValueError, match="2 completions but 1 references"):
        verify_ifeval(["a", "b"], [good])


def test_reference_error_names_the_problem_without_raising():
    assert reference_error({"instructions": [{"id": "punctuation:no_comma"}]}) is None
    assert "non-empty list" in reference_error({"instructions": []})
    assert "non-empty list" in reference_error("keywords:existence")
    assert "startend:middle" in reference_error({"instructions": [{"id": "startend:middle"}]})
