"""Public benchmarks (curation/suites/benchmarks.py) offline: each loads a few rows written in its hub
dataset's own column schema, through the path a `suite: <name>` source takes, with only
`datasets.load_dataset` replaced by a reader of a `save_to_disk` fixture folder. The prompts and
references are written out by hand, and each task's verifier passes a right completion and fails a
wrong one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from passband.curation.catalog import TASKS
from passband.curation.suites.benchmarks import BENCHMARKS
from passband.curation.suites.source import ProblemSource
from passband.curation.verifiers.ifeval_checks import CHECKERS
from passband.flows.evaluate.config import EvalConfig

BOXED = " Put the final answer in \\boxed{}."


@pytest.fixture
def hub(tmp_path: Path, monkeypatch) -> Any:
    """hub(rows) serves `rows` as the one dataset on the "hub" and returns the calls it answered."""
    import datasets

    calls: list[tuple[str, str | None, str]] = []
    served: dict[str, Path] = {}

    def serve(rows: list[dict[str, Any]], features: datasets.Features | None = None) -> list:
        folder = tmp_path / f"fixture-{len(served)}"
        datasets.Dataset.from_list(rows, features=features).save_to_disk(str(folder))
        served["folder"] = folder
        return calls

    def load_dataset(path: str, name: str | None = None, split: str | None = None) -> datasets.Dataset:
        calls.append((path, name, split))
        return datasets.load_from_disk(str(served["folder"]))

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.chdir(tmp_path)
    return serve


def _scores(task: str, rows: list[dict[str, Any]], completions: list[str], **settings: Any) -> list[tuple]:
    results = TASKS[task].verify(completions, [row["reference"] for row in rows], TASKS[task].Settings(**settings))
    return [(result.status, result.score) for result in results]


GSM8K_ROWS = [
    {"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
                 "How many clips did Natalia sell altogether in April and May?",
     "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips "
               "altogether in April and May.\n#### 72"},
    {"question": "Tom saves $40 a week for 40 weeks. How much has he saved?",
     "answer": "He saved 40*40 = <<40*40=1600>>1600 dollars.\n#### 1,600"},
]


def test_gsm8k_reads_the_final_number_after_the_hashes(hub) -> None:
    calls = hub(GSM8K_ROWS)
    rows = ProblemSource(suite="gsm8k").load().rows
    assert calls == [("openai/gsm8k", "main", "test")]
    assert [row["prompt"] for row in rows] == [GSM8K_ROWS[0]["question"] + BOXED, GSM8K_ROWS[1]["question"] + BOXED]
    assert [(row["id"], row["task"], row["reference"], row["source"]) for row in rows] == [
        ("openai/gsm8k-1", "math", "72", "openai/gsm8k"), ("openai/gsm8k-2", "math", "1600", "openai/gsm8k")]
    assert rows[0]["solution"] == GSM8K_ROWS[0]["answer"]  # the worked solution travels along
    assert _scores("math", rows, ["48 + 24 = 72, so \\boxed{72}", "So \\boxed{24}."], answer_format="boxed") == [
        ("pass", 1.0), ("fail", 0.0)]
    assert _scores("math", rows[1:], ["\\boxed{1600}"], answer_format="boxed") == [("pass", 1.0)]
    plain = ProblemSource(suite="gsm8k", answer_format="plain", num_problems=1).load().rows
    assert [row["prompt"] for row in plain] == [GSM8K_ROWS[0]["question"] + " Answer with just the number."]
    assert _scores("math", plain * 2, ["She sold 72 clips.", "She sold 24 clips in May"]) == [
        ("pass", 1.0), ("fail", 0.0)]


MATH500_ROWS = [
    {"problem": "If $f(x) = \\frac{3x-2}{x-2}$, what is the value of $f(-2) +f(-1)+f(0)$? Express your answer as a "
                "common fraction.", "solution": "... $= \\boxed{\\frac{14}{3}}$.", "answer": "\\frac{14}{3}",
     "subject": "Algebra", "level": 3, "unique_id": "test/algebra/2584.json"},
    {"problem": "Convert the point $(0,3)$ in rectangular coordinates to polar coordinates.",
     "solution": "... $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}.$", "answer": "\\left( 3, \\frac{\\pi}{2} \\right)",
     "subject": "Precalculus", "level": 2, "unique_id": "test/precalculus/807.json"},
]
AIME24_ROWS = [{"id": 60, "problem": "Every morning Aya goes for a $9$-kilometer-long walk ... Find the number of "
                                     "minutes the walk takes her, including the $t$ minutes spent in the coffee shop.",
                "solution": "... $\\boxed{204}$", "answer": "204", "url": "https://artofproblemsolving.com/wiki/"
                "index.php/2024_AIME_I_Problems/Problem_1", "year": "2024"}]
AIME25_ROWS = [{"problem": "Find the sum of all integer bases $b>9$ for which $17_b$ is a divisor of $97_b$.",
                "answer": "70", "id": "0"}]


@pytest.mark.parametrize(("name", "fixture", "call", "expected", "right", "wrong"), [
    ("math500", MATH500_ROWS, ("HuggingFaceH4/MATH-500", None, "test"),
     [("test/algebra/2584.json", "Algebra", "\\frac{14}{3}"),
      ("test/precalculus/807.json", "Precalculus", "\\left( 3, \\frac{\\pi}{2} \\right)")],
     ["The sum is \\boxed{\\dfrac{14}{3}}.", "$\\boxed{(3, \\frac{\\pi}{2})}$"],
     ["\\boxed{\\frac{3}{14}}", "\\boxed{(3, \\pi)}"]),
    ("aime24", AIME24_ROWS, ("HuggingFaceH4/aime_2024", None, "train"), [("60", "general", "204")],
     ["So the walk takes \\boxed{204} minutes."], ["\\boxed{240}"]),
    ("aime25", AIME25_ROWS, ("math-ai/aime25", None, "test"), [("0", "general", "70")],
     ["b = 21 and b = 49, so \\boxed{70}"], ["\\boxed{49}"]),
])
def test_math_benchmarks_ask_for_a_boxed_answer(hub, name, fixture, call, expected, right, wrong) -> None:
    calls = hub(fixture)
    source = ProblemSource(suite=name)
    assert (source.num_problems, source.answer_format) == ("all", "boxed")
    rows = source.load().rows
    assert calls == [call]
    assert [row["prompt"] for row in rows] == [raw["problem"] + BOXED for raw in fixture]
    assert [(row["id"], row["subdomain"], row["reference"]) for row in rows] == expected
    assert _scores("math", rows * 2, right + wrong, answer_format="boxed") == (
        [("pass", 1.0)] * len(rows) + [("fail", 0.0)] * len(rows))


def test_math500_refuses_plain_answers_and_the_verifier_must_agree() -> None:
    with pytest.raises(ValidationError, match="suite math500 asks for answer_format boxed, not 'plain'"):
        ProblemSource(suite="math500", answer_format="plain")
    with pytest.raises(ValidationError, match=r"math suites ask for \['boxed'\] but verifiers.math.answer_format "
                                              r"is 'plain'"):
        EvalConfig(suites={"gsm8k": ProblemSource(suite="gsm8k")})
    EvalConfig(suites={"gsm8k": ProblemSource(suite="gsm8k")}, verifiers={"math": {"answer_format": "boxed"}})


# google/IFEval's 25 instruction ids (instruction_following_eval/instructions_registry.py).
GOOGLE_IFEVAL_IDS = {
    "keywords:existence", "keywords:frequency", "keywords:forbidden_words", "keywords:letter_frequency",
    "language:response_language", "length_constraints:number_sentences", "length_constraints:number_paragraphs",
    "length_constraints:number_words", "length_constraints:nth_paragraph_first_word",
    "detectable_content:number_placeholders", "detectable_content:postscript",
    "detectable_format:number_bullet_lists", "detectable_format:constrained_response",
    "detectable_format:number_highlighted_sections", "detectable_format:multiple_sections",
    "detectable_format:json_format", "detectable_format:title", "combination:two_responses",
    "combination:repeat_prompt", "startend:end_checker", "change_case:capital_word_frequency",
    "change_case:english_capital", "change_case:english_lowercase", "punctuation:no_comma", "startend:quotation"}
# The hub stores every kwarg of every instruction in one struct, None where unused.
IFEVAL_KWARGS = ("num_highlights", "relation", "num_words", "num_placeholders", "prompt_to_repeat", "num_bullets",
                 "section_spliter", "num_sections", "capital_relation", "capital_frequency", "keywords",
                 "num_paragraphs", "language", "let_relation", "letter", "let_frequency", "end_phrase",
                 "forbidden_words", "keyword", "frequency", "num_sentences", "postscript_marker", "first_word",
                 "nth_paragraph")


def _ifeval_row(key: int, prompt: str, instructions: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    return {"key": key, "prompt": prompt, "instruction_id_list": [i for i, _ in instructions],
            "kwargs": [{name: kwargs.get(name) for name in IFEVAL_KWARGS} for _, kwargs in instructions]}


def test_every_google_ifeval_id_but_the_language_one_has_a_checker() -> None:
    assert len(GOOGLE_IFEVAL_IDS) == 25
    assert GOOGLE_IFEVAL_IDS - set(CHECKERS) == {"language:response_language"}


def test_ifeval_google_checks_the_instructions_and_quarantines_the_language_rows(hub) -> None:
    import datasets

    string, integer, strings = datasets.Value("string"), datasets.Value("int64"), datasets.Sequence(datasets.Value("string"))
    kwarg_types = {name: strings if name in ("keywords", "forbidden_words") else
                   integer if name.startswith(("num_", "let_freq", "capital_freq", "freq", "nth_")) else string
                   for name in IFEVAL_KWARGS}
    features = datasets.Features({"key": integer, "prompt": string, "instruction_id_list": strings,
                                  "kwargs": [kwarg_types]})
    calls = hub([
        _ifeval_row(1001, "Write a note about rain in all lowercase letters, with no commas.",
                    [("change_case:english_lowercase", {}), ("punctuation:no_comma", {})]),
        _ifeval_row(1002, "Write a haiku in Kannada, no other language is allowed.",
                    [("language:response_language", {"language": "kn"})]),
        _ifeval_row(1003, "Write a title in double angular brackets, and mention Tokyo.",
                    [("detectable_format:title", {}), ("keywords:existence", {"keywords": ["tokyo"]})]),
    ], features)
    result = ProblemSource(suite="ifeval_google").load()
    assert calls == [("google/IFEval", None, "train")]
    assert [(row["id"], row["task"], row["prompt"][:14]) for row in result.rows] == [
        ("1001", "ifeval", "Write a note a"), ("1003", "ifeval", "Write a title ")]
    assert [row["reference"] for row in result.rows] == [
        {"instructions": [{"id": "change_case:english_lowercase", "kwargs": {}},
                          {"id": "punctuation:no_comma", "kwargs": {}}]},
        {"instructions": [{"id": "detectable_format:title", "kwargs": {}},
                          {"id": "keywords:existence", "kwargs": {"keywords": ["tokyo"]}}]}]
    assert [(q["row_number"], q["reason"]) for q in result.quarantined] == [
        (2, "row 2: instructions[0]: instruction id 'language:response_language' is not checked here: IFEval "
            "checks it with langdetect, a language detector passband does not ship")]
    first, third = result.rows
    assert _scores("ifeval", [first, first, third, third], [
        "rain taps softly on the roof", "Rain taps, softly", "<<Rain>> over Tokyo", "Rain over Tokyo"]) == [
        ("pass", 1.0), ("fail", 0.0), ("pass", 1.0), ("fail", 0.5)]


MBPP_ROWS = [
    {"source_file": "Benchmark Questions Verification V2.ipynb", "task_id": 11,
     "prompt": "Write a python function to remove first and last occurrence of a given character from the string.",
     "code": "def remove_Occ(s,ch): \r\n    s = s.replace(ch, '', 1)\r\n    i = s.rfind(ch)\r\n"
             "    return s if i < 0 else s[:i] + s[i + 1:]",
     "test_imports": [], "test_list": ['assert remove_Occ("hello","l") == "heo"', 'assert remove_Occ("abcda","a") == "bcd"',
                                       'assert remove_Occ("PHP","P") == "H"']},
    {"source_file": "Mike's Copy of Benchmark Questions Verification V2.ipynb", "task_id": 740,
     "prompt": "Write a function to find the volume of a cone.",
     "code": "import math\ndef volume_cone(r,h):\n  return (1.0/3) * math.pi * r * r * h",
     "test_imports": ["import math"], "test_list": ["assert math.isclose(volume_cone(5,12), 314.15926535897927, "
                                                    "rel_tol=0.001)"]},
]


def test_mbpp_runs_the_asserts_after_the_function(hub) -> None:
    calls = hub(MBPP_ROWS)
    rows = ProblemSource(suite="mbpp").load().rows
    assert calls == [("google-research-datasets/mbpp", "sanitized", "test")]
    assert rows[0]["prompt"] == (
        "You are an expert Python programmer, and here is your task: Write a python function to remove first and "
        "last occurrence of a given character from the string. Your code should pass these tests:\n\n"
        'assert remove_Occ("hello","l") == "heo"\nassert remove_Occ("abcda","a") == "bcd"\n'
        'assert remove_Occ("PHP","P") == "H"\n\nPut the function in a ```python code block.')
    assert [(row["id"], row["task"], row["reference"]) for row in rows] == [
        ("11", "code", {"tests": 'assert remove_Occ("hello","l") == "heo"\nassert remove_Occ("abcda","a") == "bcd"\n'
                                 'assert remove_Occ("PHP","P") == "H"\n', "entry_point": "remove_Occ"}),
        ("740", "code", {"tests": "import math\nassert math.isclose(volume_cone(5,12), 314.15926535897927, "
                                  "rel_tol=0.001)\n", "entry_point": "volume_cone"})]
    right = [f"```python\n{row['solution']}\n```" for row in rows]
    wrong = ["```python\ndef remove_Occ(s, ch):\n    return s\n```",
             "```python\ndef volume_cone(r, h):\n    return r * r * h\n```"]
    assert _scores("code", rows * 2, right + wrong) == [("pass", 1.0)] * 2 + [("fail", 0.0)] * 2


def test_gpu_presets_name_the_public_benchmarks() -> None:
    from passband.cli.main import load_flow
    from passband.flows.config import resolve_config
    from passband.flows.rl.config import RLConfig

    evaluate = resolve_config(load_flow("evaluate")[1], "evaluate", "gpu")
    assert {name: source.suite for name, source in evaluate.suites.items()
            if source.suite in (*BENCHMARKS, "humaneval")} == {
        "gsm8k": "gsm8k", "math500": "math500", "aime24": "aime24", "aime25": "aime25",
        "ifeval_google": "ifeval_google", "mbpp": "mbpp", "humaneval": "humaneval"}
    rl_eval = resolve_config(RLConfig, "rl", "gpu").eval
    assert {name: (source.suite, source.num_problems) for name, source in rl_eval.suites.items()
            if source.suite in BENCHMARKS} == {
        "gsm8k": ("gsm8k", 250), "math500": ("math500", 250), "ifeval_google": ("ifeval_google", 200)}
    final = resolve_config(load_flow("pipeline")[1], "pipeline", "gpu").evaluate
    assert {name: (source.suite, source.num_problems) for name, source in final.suites.items()} == {
        "gsm8k": ("gsm8k", "all"), "math500": ("math500", "all"), "aime24": ("aime24", "all"),
        "aime25": ("aime25", "all"), "ifeval_google": ("ifeval_google", "all"), "mbpp": ("mbpp", "all"),
        "humaneval": ("humaneval", 164)}
    assert final.verifiers.math.answer_format == "boxed"


def test_the_docs_table_is_the_mapping() -> None:
    """docs/your-data.md "Public benchmarks": one table row per benchmark, as BENCHMARKS holds it."""
    page = (Path(__file__).parents[1] / "docs" / "your-data.md").read_text()
    section = page.split("## Public benchmarks", 1)[1].split("\n## ", 1)[0]
    cells = [[cell.strip().strip("`") for cell in line.split("|")[1:7]]
             for line in section.splitlines() if line.startswith("| `")]
    assert {row[0]: tuple(row[1:]) for row in cells if row[0] != "humaneval"} == {
        name: (b.hub, b.config or "", b.split, str(b.size), b.task) for name, b in BENCHMARKS.items()}
