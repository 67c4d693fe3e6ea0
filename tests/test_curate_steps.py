"""The curate flow's data decisions, moved out of flows/ (hygiene of a pool, the pre-filter, RL bands,
pass-rate metrics, the hold-out split, the output schemas, teacher verdicts, trace dedup, synthetic
query filtering), on rows written here with the expected results worked out by hand."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from passband.curation.bands import (BandFilter, DifficultyBands, PrefilterConfig, label_rows, pass_rate_metrics,
                                    prefilter)
from passband.curation.curate_rows import (REMOVED_COLUMNS, RL_EXTRA_COLUMNS, SFT_COLUMNS, problems_table,
                                           removed_metrics, removed_record, removed_table, sft_table)
from passband.curation.holdout import generator_name, split_pool
from passband.curation.hygiene import HygieneConfig, clean_pool
from passband.curation.rl_selection import rl_bands
from passband.curation.sft_select import dedupe_traces, verified_attempts
from passband.curation.suites.source import ProblemSource
from passband.curation.synthetic import filter_queries
from passband.curation.trace_checks import with_verdicts

LONG = "alice buys several apples at the market then walks home carefully while counting coins"  # 14 words


def _row(id_: str, prompt: str, task: str = "math", **extra) -> dict:
    return {"id": id_, "task": task, "subdomain": "arith", "prompt": prompt, "reference": "4", "source": "t", **extra}


def test_clean_pool_removes_exact_then_near_duplicates_then_eval_overlap() -> None:
    rows = [_row("a", LONG), _row("b", LONG.upper()),  # b: the same text after normalization
            _row("c", LONG.replace("coins", "pennies")),  # c: 11 of a's 12 word trigrams, Jaccard 11/13 >= 0.8
            _row("d", "what is two plus two"), _row("e", "a question nobody asked before today")]
    eval_rows = [_row("x", "what is two plus two")]  # d asks the eval question
    kept, removed = clean_pool(rows, eval_rows, HygieneConfig(near_dup_ngram=3, decontam_ngram=3))
    assert [row["id"] for row in kept] == ["a", "e"]
    assert [(row["id"], row["removed_reason"].split(":")[0]) for row in removed] == [
        ("b", "exact_duplicate_of"), ("c", "near_duplicate_of"), ("d", "contaminated")]
    assert removed[0]["removed_reason"] == "exact_duplicate_of:a"


def test_prefilter_and_rl_bands() -> None:
    rows = [_row("a", "p", p_q=0.5), _row("b", "q", p_q=0.0), _row("c", "r")]
    kept, removed = prefilter(rows, PrefilterConfig(column="p_q", band="(0, 0.625]"))
    assert [row["id"] for row in kept] == ["a"]
    assert [row["removed_reason"] for row in removed] == ["outside_band:p_q=0 not in (0, 0.625]", "missing column p_q"]
    kept, _ = prefilter(rows, PrefilterConfig(column="p_q", band="(0, 0.625]", keep_missing=True))
    assert [row["id"] for row in kept] == ["a", "c"]
    # a configured band wins; none falls back to the catalog task's (ifeval: (0, 0.4])
    bands = rl_bands({"math": "[0, 1]", "ifeval": None})
    assert bands["math"] == BandFilter.parse("[0, 1]") and bands["ifeval"] == BandFilter.parse("(0, 0.4]")


def test_pass_rate_metrics() -> None:
    bands = DifficultyBands(edges=(0.0, 0.5, 1.0), labels=("unsolved", "hard", "easy", "solved"))
    math = label_rows([_row("a", "p", pass_rate=0.0), _row("b", "q", pass_rate=0.25), _row("c", "r", pass_rate=1.0)],
                      bands)
    metrics = pass_rate_metrics({"math": math, "code": []}, bins=2, labels=bands.labels)
    assert metrics == {
        "math/pass_rate_mean": (0.0 + 0.25 + 1.0) / 3, "code/pass_rate_mean": 0.0,
        "math/hist_bin00": 2, "math/hist_bin01": 1,  # [0, 0.5): 0 and 0.25; [0.5, 1]: 1.0; code has no rows
        "math/band/unsolved": 1, "math/band/hard": 1, "math/band/easy": 0, "math/band/solved": 1,
        "code/band/unsolved": 0, "code/band/hard": 0, "code/band/easy": 0, "code/band/solved": 0,
    }


def test_split_pool_names_the_generator_and_refuses_other_tasks() -> None:
    rows = [_row(str(i), f"q{i}") for i in range(5)] + [_row("5", "q5", generator="given")]
    train, held = split_pool("math", rows, 2, seed=0, generator="suite:math")
    assert len(train) == 4 and len(held) == 2 and not {r["id"] for r in train} & {r["id"] for r in held}
    assert {row["generator"] for row in train if row["id"] != "5"} == {"suite:math"}
    assert all("generator" not in row for row in held if row["id"] != "5")
    assert [row["generator"] for row in train + held if row["id"] == "5"] == ["given"]
    with pytest.raises(ValueError, match="math pool holds rows of another task, e.g. \\['c'\\]"):
        split_pool("math", [*rows, _row("c", "x", task="code")], 2, seed=0, generator="g")
    assert generator_name(ProblemSource(suite="math", seed=3, difficulty=1)) == "suite:math seed=3 difficulty=1"


def test_output_schemas() -> None:
    empty_rl = problems_table([], rl_columns=True)
    assert empty_rl.num_rows == 0 and empty_rl.schema.field("pass_rate").type == pa.float64()
    assert set(RL_EXTRA_COLUMNS) <= set(empty_rl.column_names)
    assert "pass_rate" not in problems_table([]).column_names  # an eval split has only the suite columns
    sft = sft_table([{**{column: None for column in SFT_COLUMNS}, "reference": {"answer": 4}, "npass": 2,
                      "perplexity": 1.5, "prompt": "p"}])
    assert sft.column_names == list(SFT_COLUMNS)
    assert sft.to_pylist()[0]["reference"] == json.dumps({"answer": 4})
    assert (sft.schema.field("npass").type, sft.schema.field("perplexity").type) == (pa.int64(), pa.float64())
    assert sft_table([]).schema == sft.schema
    removed = [removed_record({**_row("a", "p"), "removed_reason": "exact_duplicate_of:b"}, "hygiene"),
               removed_record({**_row("c", "q"), "removed_reason": "outside_band:pass_rate=1 not in (0, 0.8]"}, "band"),
               removed_record({**_row("d", "r"), "removed_reason": "exact_duplicate_of:a"}, "hygiene")]
    table = removed_table(removed)
    assert table.column_names == list(REMOVED_COLUMNS) and {f.type for f in table.schema} == {pa.string()}
    assert removed_metrics(removed) == {"removed/hygiene/exact_duplicate_of": 2, "removed/band/outside_band": 1,
                                        "removed/total": 3}


def _verdicts(**overrides) -> dict:
    return {"verdict_consistency": "pass", "verdict_execution": "not_applicable", "verdict_math": "pass",
            "verdict_structure": "pass", **overrides}


def test_teacher_attempts_keep_only_passed_and_verified() -> None:
    problems = [_row("a", "p"), _row("b", "q")]
    samples = [{"problem_id": "a", "sample_index": 0, "status": "pass", **_verdicts()},
               {"problem_id": "a", "sample_index": 1, "status": "fail", **_verdicts(verdict_math="fail")},
               {"problem_id": "b", "sample_index": 0, "status": "pass", **_verdicts(verdict_structure="fail")}]
    kept, removed = verified_attempts(problems, samples, {"a": 1, "b": 1}, num_samples=2)
    assert [(row["id"], row["sample_index"], row["npass"], row["num_samples"]) for row in kept] == [("a", 0, 1, 2)]
    assert [(row["id"], row["removed_reason"]) for row in removed] == [
        ("a", "status=fail"), ("b", "failed_checks:structure")]


def test_traces_dedupe_on_prompt_and_completion() -> None:
    rows = [{"id": "1", "prompt": "p", "completion": "4"}, {"id": "2", "prompt": "p", "completion": "4"},
            {"id": "3", "prompt": "p", "completion": "5"}]
    kept, removed = dedupe_traces(rows)
    assert kept == [rows[0], rows[2]]  # no helper column left behind
    assert [(row["id"], row["removed_reason"]) for row in removed] == [("2", "exact_duplicate_of:1")]


def test_synthetic_queries_repeat_nothing() -> None:
    pool = [_row("p1", "What is 2 + 2?")]
    queries = [_row("s1", "what is 2 + 2?"),  # a pool prompt after normalization
               _row("s2", "What is 3 + 5?"), _row("s3", "What is 3 + 5?"),  # s3 repeats s2
               _row("s4", "What is 7 + 1?"), _row("s5", "What is 9 + 9?")]
    eval_rows = [_row("e1", "What is 9 + 9?")]
    kept, removed = filter_queries(queries, pool, eval_rows, HygieneConfig())
    assert [row["id"] for row in kept] == ["s2", "s4"]
    assert [(row["id"], row["removed_reason"].split(":")[0]) for row in removed] == [
        ("s3", "exact_duplicate_of"), ("s1", "repeats_pool_prompt"), ("s5", "contaminated")]


def test_each_sample_is_checked_against_its_own_problem() -> None:
    problems = [_row("m", "What is 2 + 2?"), _row("c", "Write f.", task="code")]
    samples = [{"problem_id": "c", "completion": "def f(): pass", "status": "fail", "finish_reason": "stop"},
               {"problem_id": "m", "completion": "2 + 2 = 4. The answer is 4", "status": "pass", "finish_reason": "stop"}]
    rows = with_verdicts(problems, samples, "last_number", (), 1)
    assert [row["problem_id"] for row in rows] == ["c", "m"]  # sample order, sample fields kept
    # the task verifier's status decides execution for code and correctness for math, nothing else
    assert (rows[0]["verdict_execution"], rows[0]["verdict_math"]) == ("fail", "not_applicable")
    assert (rows[1]["verdict_execution"], rows[1]["verdict_math"]) == ("not_applicable", "pass")
