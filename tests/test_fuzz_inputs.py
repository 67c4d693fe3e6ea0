"""Bad input at the edges: `passband verify` files and user datasets through the loaders.

Seeded random files (a bounded number of lines, hypothesis is not a dependency) mix good rows
with every kind of bad line; each bad line must be quarantined with its line number and a
reason, each good row verified, and nothing may crash.
"""

import json
import random

import pytest

from passband.curation.suites.loaders import MAX_RAW_CHARS, load_rows
from passband.cli.verify_cmd import EXIT_QUARANTINED, exit_status, verify_file

NUM_LINES = 150


def _good_verify_row(rng: random.Random, number: int) -> bytes:
    answer = rng.randint(-999, 999)
    row = {"id": number, "completion": f"so \\boxed{{{answer}}}", "reference": str(answer)}
    separator = rng.choice([", ", ",\r ", ",\t"])  # \r and \t are JSON whitespace, not line ends
    return json.dumps(row, ensure_ascii=rng.random() < 0.5, separators=(separator, ": ")).encode()


def _bad_line(rng: random.Random, good: bytes, keys: tuple[str, ...]) -> tuple[bytes, str]:
    """A broken line made from a good one, and the start of the reason it must be quarantined for."""
    row = json.loads(good)
    kind = rng.randrange(8)
    if kind == 0:
        return good[:rng.randrange(1, len(good) - 1)], "bad JSON"
    if kind == 1:  # an invalid byte inside a string value
        cut = good.index(b'"', 2) - 1
        return good[:cut] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80"]) + good[cut:], "not valid UTF-8"
    if kind == 2:
        del row[rng.choice(keys)]
        return json.dumps(row).encode(), "missing"
    if kind == 3:
        return json.dumps(rng.choice([7, "text", [row], None, 1.5])).encode(), ""
    if kind == 4:
        depth = rng.choice([10_000, 200_000])
        return b"[" * depth + b"]" * depth, "bad JSON"
    if kind == 5:  # a huge line that is not a row
        return b'{"id": 1, "completion": "' + b"x" * (2 << 20) + b'"', "bad JSON"
    if kind == 6:
        row[keys[-1]] = rng.choice([[1, 2], {"x": 1}, None, True, ""])
        return json.dumps(row).encode(), ""
    row[keys[1]] = rng.choice([3, None, ["a"], {"b": 1}])
    return json.dumps(row).encode(), ""


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_verify_file_quarantines_every_bad_line(tmp_path, seed):
    rng = random.Random(seed)
    lines, bad, good = [], {}, {}
    for number in range(1, NUM_LINES + 1):
        line = _good_verify_row(rng, number)
        if rng.random() < 0.05:
            line = b"  \t"  # blank: skipped, neither verified nor quarantined
        elif rng.random() < 0.5:
            line, reason = _bad_line(rng, line, ("id", "completion", "reference"))
            bad[number] = reason
        else:
            good[number] = line
        lines.append(line)
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    output = tmp_path / "out.jsonl"

    counts = verify_file("math", source, output)

    verified = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert [row["id"] for row in verified] == list(good)
    assert all(row["status"] == "pass" for row in verified), verified
    quarantined = [json.loads(line) for line in
                   (tmp_path / "out.quarantine.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [entry["line"] for entry in quarantined] == list(bad)
    for entry in quarantined:
        assert entry["reason"].startswith(bad[entry["line"]]) and entry["reason"], entry["reason"]
        assert len(entry["raw"]) <= 10_000 and entry["raw_chars"] >= len(entry["raw"])
    assert counts == {"pass": len(good), "quarantined": len(bad)}
    assert exit_status(counts) == EXIT_QUARANTINED


def test_verify_file_hand_written_edges(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"\n".join([
        b'{"id": "a", "completion": "\\\\boxed{2}", "reference": 2}',       # 1 numeric reference
        b'{"id": "b", "completion": "\\\\boxed{2}", "reference": NaN}',     # 2 NaN: a number, wrong
        b'\xef\xbb\xbf{"id": "c", "completion": "x", "reference": "1"}',  # 3 BOM (Windows editors): read
        b'{"id": "d", "completion": "\\u0000\\\\boxed{1}", "reference": "1"}',  # 4 NUL in text
        b'{"id": "e", "completion": "x", "reference": "1"} trailing',      # 5 extra data
        b'{"id": "f", "completion": "\\ud800", "reference": "1"}',         # 6 lone surrogate
        b'{"id": "g", "id": "h", "completion": "\\\\boxed{1}", "reference": "1"}',  # 7 dup key
    ]) + b"\n")
    output = tmp_path / "out.jsonl"
    counts = verify_file("math", source, output)
    verified = {row["id"]: row["status"] for row in map(json.loads, output.read_text().splitlines())}
    assert verified == {"a": "pass", "b": "fail", "c": "unparsable", "d": "pass",
                        "f": "unparsable", "h": "pass"}
    quarantined = [json.loads(line) for line in (tmp_path / "out.quarantine.jsonl").read_text().splitlines()]
    assert [(q["line"], q["reason"].split(":")[0]) for q in quarantined] == [(5, "bad JSON")]
    assert exit_status(counts) == EXIT_QUARANTINED


def test_clean_file_exits_zero(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"id": 1, "completion": "\\boxed{1}", "reference": "1"}) + "\n")
    counts = verify_file("math", source, tmp_path / "out.jsonl")
    assert counts == {"pass": 1} and exit_status(counts) == 0


@pytest.mark.parametrize("seed", [0, 1])
def test_loader_quarantines_every_bad_line(tmp_path, seed):
    rng = random.Random(seed)
    lines, bad, good = [], {}, []
    for number in range(1, NUM_LINES + 1):
        answer = rng.randint(0, 99)
        line = json.dumps({"question": f"{answer} + 0?", "answer": str(answer),
                           "id": f"q{number}"}).encode()
        if rng.random() < 0.5:
            line, reason = _bad_line(rng, line, ("id", "question", "answer"))
            # a missing id is filled in (<source>-<row>), so only that mutation is not bad
            if reason == "missing" and b'"id"' not in line:
                good.append(number)
            else:
                bad[number] = reason
        else:
            good.append(number)
        lines.append(line)
    path = tmp_path / "user.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")

    result = load_rows(str(path), task="math", column_map={"question": "prompt", "answer": "reference"})

    assert [entry["row_number"] for entry in result.quarantined] == list(bad)
    for entry in result.quarantined:
        number = entry["row_number"]
        assert entry["reason"].startswith(f"row {number}: {bad[number]}"), entry["reason"]
        assert not isinstance(entry["raw"], str) or len(entry["raw"]) <= MAX_RAW_CHARS
    assert len(result.rows) == len(good)
    assert all(row["task"] == "math" and row["prompt"] and row["reference"] for row in result.rows)
