"""The table of user mistakes (issue 52): each setup that used to pass `passband config` and fail
forty minutes into a run, or silently do something else, now gives its exit code and one line
naming the setting, file or row, never a traceback. A new setting that can go wrong gets its row.

Each row of CASES is (files, argv, expected exit, substrings of the output): `files` maps paths under
the working folder to their bytes, `argv` follows `passband`. `passband config` runs the same
resolution and preflight as `passband run` (infra/cli/main.py: resolve), so a row that fails here
fails a run before its first second.

`verify` and `runs` mistakes are the rows of CLI_CASES (setup, argv, expected exit, a substring of
stderr): `setup(tmp)` writes the input files under `tmp` (the command's working folder) and returns
extra environment variables. They run the installed `passband` in a real process, as a user would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from passband.cli.main import main

ROWS = [{"question": f"What is {i} + {i}? Answer with just the number.", "answer": str(2 * i)} for i in range(10)]
CHAT = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}


def jsonl(*rows: dict | bytes) -> bytes:
    return b"".join((row if isinstance(row, bytes) else json.dumps(row).encode()) + b"\n" for row in rows)


# docs/your-data.md's my.yaml on a 10-row file, as a new user writes it (no `code: null`: a map
# written in a config file is the whole map)
MY_YAML = """\
model: smollm2-135m-instruct
curate:
  tasks:
    math:
      source: {path: data/gsm.jsonl, task: math, column_map: {question: prompt, answer: reference}, num_problems: 8}
      eval_size: 2
sft:
  stages:
    - {name: solutions, datasets: {"@curate.sft_stage1": 1.0, data/my_chats.jsonl: 1.0}, max_length: 512,
       num_epochs: 1, lr: 1.0e-5, warmup_steps: 0, batch_tokens: 1024, micro_batch_tokens: 512}
  eval: null
rl:
  datasets: {math: "@recurate.rl_math"}
  task_weights: {math: 1.0}
  eval: null
evaluate:
  suites: {}
  datasets: {math: "@curate.eval_math"}
"""
BASE_FILES = {"data/gsm.jsonl": jsonl(*ROWS), "data/my_chats.jsonl": jsonl(CHAT), "my.yaml": MY_YAML.encode()}
PIPELINE = ["config", "pipeline", "--config", "my.yaml"]
MATH_SOURCE = "curate.tasks.math.source"


def with_source(path: str, content: bytes | None = None, column_map: str | None = None) -> dict[str, bytes]:
    """The base files with the math source pointing at `path` (holding `content`), or another column map."""
    text = MY_YAML.replace("path: data/gsm.jsonl", f"path: {path}")
    if column_map is not None:
        text = text.replace("column_map: {question: prompt, answer: reference}", f"column_map: {column_map}")
    return {**BASE_FILES, "my.yaml": text.encode(), **({path: content} if content is not None else {})}


def ifeval_rows(instruction: dict, with_good_row: bool) -> bytes:
    """A row whose reference holds `instruction`, then (with_good_row) a valid one."""
    good = {"id": "ok", "task": "ifeval", "subdomain": "s", "source": "mine", "prompt": "Write in lowercase.",
            "reference": {"instructions": [{"id": "change_case:english_lowercase", "kwargs": {}}]}}
    return jsonl({**good, "id": "bad", "reference": {"instructions": [instruction]}}, *[good] * with_good_row)


IFEVAL_YAML = "tasks:\n  ifeval: {source: {path: data/if.jsonl, task: ifeval}, eval_size: 0}\n"

CASES = [
    # -- data sources, opened and sniffed
    pytest.param(with_source("data/gsm.jsonl", column_map="{questoin: prompt, answer: reference}"), PIPELINE, 2,
                 [f"{MATH_SOURCE}: data/gsm.jsonl: column_map names 'questoin'", "(answer, question)"],
                 id="column-map-source-typo"),
    pytest.param(with_source("data/gsm.jsonl", column_map="{question: promt, answer: reference}"), PIPELINE, 2,
                 ["data/gsm.jsonl: none of its first 10 rows is usable; row 1: missing field 'prompt'"],
                 id="column-map-target-typo"),
    pytest.param(with_source("data/gsm.jsonl", column_map="{question: prompt, answer: prompt}"), PIPELINE, 2,
                 ["row 1: two columns map to one name"], id="column-map-two-onto-one"),
    pytest.param(with_source("data/empty.jsonl", b""), PIPELINE, 2, [f"{MATH_SOURCE}: data/empty.jsonl holds no rows"],
                 id="empty-file"),
    pytest.param(with_source("data/junk.jsonl", bytes(range(256)) * 8), PIPELINE, 2,
                 ["data/junk.jsonl: none of its first", "row 1: bad JSON"], id="binary-junk-file"),
    pytest.param(with_source("data/latin.jsonl", "caf\u00e9\n".encode("latin-1") * 3), PIPELINE, 2,
                 ["data/latin.jsonl: none of its first 3 rows is usable; row 1: not valid UTF-8 at byte 3"],
                 id="non-utf8-data-file"),
    pytest.param(with_source("data/junk.parquet", b"PAR1 not really"), PIPELINE, 2,
                 ["data/junk.parquet: not a Parquet file"], id="junk-parquet-file"),
    pytest.param(with_source("data/onebad.jsonl", jsonl(*ROWS[:2], b'{"question": "broken', *ROWS[2:])), PIPELINE, 0,
                 ["note: curate.tasks.math.source: data/onebad.jsonl: 1 of its first 11 rows will be quarantined; "
                  "the first: row 3: bad JSON"], id="one-malformed-line-is-told"),
    pytest.param({**with_source("data/empty_folder"), "data/empty_folder/.keep": b""}, PIPELINE, 2,
                 ["data/empty_folder is a folder without a saved dataset"], id="empty-folder"),
    pytest.param(with_source("data/my_maths"), PIPELINE, 2,
                 ["no such file or folder: data/my_maths", "for a hub dataset write path: hub:data/my_maths"],
                 id="typo-local-folder-is-not-a-hub-name"),
    pytest.param({"data/if.jsonl": ifeval_rows({"id": "no:such_instruction", "kwargs": {}}, with_good_row=False),
                  "c.yaml": IFEVAL_YAML.encode()}, ["config", "curate", "--config", "c.yaml"], 2,
                 ["tasks.ifeval.source: data/if.jsonl: none of its first 1 rows is usable; row 1:",
                  "unknown instruction id 'no:such_instruction'"],
                 id="ifeval-unknown-instruction"),
    pytest.param({"data/if.jsonl": ifeval_rows({"id": "length_constraints:number_words", "kwargs": {"num_wordz": 3}}, with_good_row=True),
                  "c.yaml": IFEVAL_YAML.encode()}, ["config", "curate", "--config", "c.yaml"], 0,
                 ["note: tasks.ifeval.source: data/if.jsonl: 1 of its first 2 rows will be quarantined", "num_wordz"],
                 id="ifeval-wrong-kwargs"),
    pytest.param({**BASE_FILES, "data/my_chats.jsonl": b"\n\n"}, PIPELINE, 2,
                 ["sft.stages.0.datasets: data/my_chats.jsonl holds no rows"], id="empty-sft-chat-file"),
    pytest.param({**BASE_FILES, "data/my_chats.jsonl": jsonl({"text": "no chat"})}, PIPELINE, 2,
                 ["data/my_chats.jsonl: none of its first 1 rows is a chat row", "row 1: needs prompt"],
                 id="sft-chat-file-without-chat-rows"),
    # -- cross-stage references and SFT dataset names, resolved before any stage runs
    pytest.param(BASE_FILES, [*PIPELINE, "--set", "rl.datasets.math=@recurat.rl_math"], 2,
                 ["rl.datasets.math: @recurat.rl_math names no stage (stages: curate, sft, recurate, rl)"],
                 id="reference-stage-typo"),
    pytest.param(BASE_FILES, ["config", "pipeline", "--preset", "demo", "--set", "curate.tasks.code=null"], 2,
                 ["rl.datasets.code: @recurate.rl_code: recurate will not produce 'rl_code'",
                  "evaluate.datasets.code: @curate.eval_code"], id="reference-to-a-task-curate-no-longer-makes"),
    pytest.param(BASE_FILES, [*PIPELINE, "--set", "evaluate.datasets.math=@recurate.eval_math"], 2,
                 ["evaluate.datasets.math: @recurate.eval_math: recurate has not run when evaluate reads it "
                  "(it may name outputs of curate)"], id="reference-read-before-its-stage-ran"),
    pytest.param({**BASE_FILES, "my.yaml": MY_YAML.replace("data/my_chats.jsonl", "data/my_chatz.jsonl").encode()},
                 PIPELINE, 2, ["sft: stages.0.datasets: data/my_chatz.jsonl: no such file"], id="missing-sft-chat-file"),
    pytest.param(BASE_FILES, ["config", "pipeline", "--preset", "demo", "--set", "sft.stages.0.datasets.worked_mathh=1.0"],
                 2, ["stages.0.datasets: 'worked_mathh' is none of: a key of generated (worked_d0, worked_d1)"],
                 id="sft-generated-name-typo"),
    # -- config means what it says
    *[pytest.param(BASE_FILES, [*PIPELINE, "--set", f"{setting}=Qwen/Qwen2.5-1.5B-Instruct"], 2,
                   [f"{setting} is 'Qwen/Qwen2.5-1.5B-Instruct', but a pipeline sets it from its top-level `model`",
                    "set `model: Qwen/Qwen2.5-1.5B-Instruct` instead"], id=f"pipeline-{setting}")
      for setting in ("curate.model", "sft.model", "rl.model", "evaluate.model", "evaluate.baseline")],
    pytest.param(BASE_FILES, ["config", "pipeline", "--preset", "demo", "--set", "best_metric=pass@16"], 2,
                 ["best_metric 'pass@16' is not in the final table, which holds pass@1 to pass@3",
                  "evaluate.sampling.n: from preset demo"], id="best-metric-k-above-n"),
    pytest.param(BASE_FILES, [*PIPELINE, "--set", "best_metric=accuracy"], 2,
                 ["best_metric 'accuracy' is not in the final table"], id="best-metric-unknown"),
    pytest.param({**BASE_FILES, "bin.yaml": bytes(range(128, 256))}, ["config", "pipeline", "--config", "bin.yaml"], 2,
                 ["bin.yaml: not a YAML text file (not UTF-8 at byte 0)"], id="binary-config-file"),
    pytest.param({**BASE_FILES, "latin.yaml": "model: caf\u00e9\n".encode("latin-1")},
                 ["config", "pipeline", "--config", "latin.yaml"], 2, ["latin.yaml: not a YAML text file"],
                 id="non-utf8-config-file"),
    pytest.param({**BASE_FILES, "dup.yaml": b"training_seed: 1\nbest_metric: pass@1\ntraining_seed: 2\n"},
                 ["config", "pipeline", "--config", "dup.yaml"], 2,
                 ["dup.yaml: key 'training_seed' written twice, at lines 1 and 3"], id="duplicate-key"),
    pytest.param({**BASE_FILES, "dup.yaml": b"rl:\n  num_iterations: 3\nmodel: m\nrl:\n  seed: 4\n"},
                 ["config", "pipeline", "--config", "dup.yaml"], 2, ["key 'rl' written twice, at lines 1 and 4"],
                 id="duplicate-block"),
    pytest.param({**BASE_FILES, "two.yaml": b"rl: {num_iterations: 3}\n"}, [*PIPELINE, "--config", "two.yaml"], 0,
                 ["num_iterations: 3", "path: data/gsm.jsonl"], id="two-config-files-merge-in-order"),
    pytest.param({**BASE_FILES, "my.yaml": MY_YAML.replace("  task_weights: {math: 1.0}\n", "").encode()},
                 ["config", "pipeline", "--preset", "demo", "--config", "my.yaml"], 2,
                 ["rl: task_weights must be positive and name tasks in datasets (bad: ['code', 'ifeval'])",
                  "[rl.datasets: from my.yaml; rl.task_weights: from preset demo]",
                  "evaluate: k_curve.sets names ['code'], which are in neither datasets nor suites",
                  "evaluate.k_curve.sets: from preset demo"], id="preset-conflict-in-user-terms"),
    pytest.param(BASE_FILES, ["config", "evaluate", "--set", "suites={}"], 2,
                 ["give at least one eval set in datasets or suites: this flow evaluates them"],
                 id="evaluate-without-sets-no-eval-null-hint"),
    pytest.param(BASE_FILES, ["config", "sft", "--set", "stages.0.lr=1e-4"], 0, ["lr: 0.0001"], id="set-list-index"),
    pytest.param(BASE_FILES, ["config", "sft", "--set", "stages.1.lr=1e-4"], 2,
                 ["stages.1: stages has 1 entries (indices 0 to 0)"], id="set-list-index-out-of-range"),
    # -- a trainer that cannot fit its device (flows/memory_check.py): a 7B model in full fp32
    # fine-tuning, 64 sequences of 8192 tokens per micro-batch without activation checkpointing, needs
    # tens of TiB whatever the machine; refused before anything loads (the model is not even local)
    pytest.param(BASE_FILES, ["run", "rl", "--set", "model=Qwen/Qwen2.5-7B-Instruct", "--set", "algo.device=cpu",
                              "--set", "algo.precision=fp32", "--set", "algo.activation_checkpointing=false",
                              "--set", "algo.micro_batch_size=64", "--set", "engine.max_model_len=8192"], 2,
                 ["preflight: rl: Qwen/Qwen2.5-7B-Instruct needs about", "GiB at its peak (training) of the cpu device's",
                  "64 sequences x 8192 tokens per micro-batch, fp32, eager attention, activation checkpointing none",
                  "try a smaller rl.algo.micro_batch_size, rl.algo.activation_checkpointing: selective, "
                  "rl.algo.activation_checkpointing: every-layer, rl.algo.attention: sdpa, rl.algo.lora or a device "
                  "with more memory"],
                 id="rl-trainer-cannot-fit-its-device"),
    pytest.param(BASE_FILES, ["run", "pipeline", "--set", "model=Qwen/Qwen2.5-7B-Instruct",
                              "--set", "sft.stages.0.device=cpu", "--set", "sft.stages.0.precision=fp32",
                              "--set", "sft.stages.0.micro_batch_tokens=1048576",
                              "--set", "sft.stages.0.batch_tokens=1048576"], 2,
                 ["preflight: sft.stages.0: Qwen/Qwen2.5-7B-Instruct needs about", "1048576 tokens per micro-batch"],
                 id="sft-stage-cannot-fit-its-device"),
    # `passband config` prints it: the config may be meant for a bigger machine (`doctor` sizes it)
    pytest.param(BASE_FILES, ["config", "rl", "--set", "model=Qwen/Qwen2.5-7B-Instruct", "--set", "algo.device=cpu",
                              "--set", "algo.micro_batch_size=64", "--set", "engine.max_model_len=8192"], 0,
                 ["model: Qwen/Qwen2.5-7B-Instruct"], id="config-prints-a-setup-too-big-for-here"),
]


@pytest.mark.parametrize(("files", "argv", "exit_code", "expected"), CASES)
def test_a_mistake_fails_in_one_line_before_the_run(files: dict[str, bytes], argv: list[str], exit_code: int,
                                                    expected: list[str], tmp_path: Path, monkeypatch) -> None:
    for name, content in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(content)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == exit_code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception  # no traceback
    for text in expected:
        assert text in result.output, result.output
    if exit_code:
        errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and "Traceback" not in result.output, result.output


def test_the_docs_example_trains_on_what_it_names(tmp_path: Path, monkeypatch) -> None:
    """The map rule: my.yaml's `tasks: {math: ...}` and `datasets: {math: ...}` are the whole maps, so
    the run curates, trains and evaluates math alone without `code: null` lines."""
    for name, content in BASE_FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(content)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, PIPELINE)
    assert result.exit_code == 0, result.output
    config = yaml.safe_load(result.stdout)
    assert [name for name, pool in config["curate"]["tasks"].items() if pool] == ["math"]
    assert [name for name, ref in config["rl"]["datasets"].items() if ref] == ["math"]
    assert config["curate"]["model"] == config["sft"]["model"] == config["rl"]["model"] == "smollm2-135m-instruct"
    # --set on one entry still merges: the other entries stay
    merged = CliRunner().invoke(main, ["config", "rl", "--set", "datasets.math.num_problems=10"])
    assert sorted(name for name, ref in yaml.safe_load(merged.stdout)["datasets"].items() if ref) == \
        ["code", "ifeval", "math"]


# -- `passband verify` and `passband runs`

BIN = Path(sys.executable).parent / "passband"
# Against the code before issue 52, `runs` on a closed port retried for about 4 minutes: a row
# that takes longer than this fails instead of hanging the suite.
TIMEOUT_S = 90

IFEVAL_GOOD = {"id": "good", "completion": "one two three",
               "reference": {"instructions": [{"id": "length_constraints:number_words",
                                               "kwargs": {"num_words": 5, "relation": "less than"}}]}}
# One valid row and one with a reference the task cannot use, per task: the valid row is scored,
# the other quarantined.
GOOD_AND_BAD = {
    "math": ({"id": "good", "completion": "6 x 7 = 42", "reference": "42"},
             {"id": "bad", "completion": "42", "reference": {"answer": 42}}),
    "code": ({"id": "good", "completion": "```python\ndef f():\n    return 1\n```",
              "reference": {"tests": "assert f() == 1", "entry_point": "f"}},
             {"id": "bad", "completion": "x", "reference": {"tests": 5}}),
    "ifeval": (IFEVAL_GOOD,
               {"id": "bad", "completion": "x", "reference": {"instructions": [
                   {"id": "length_constraints:number_words", "kwargs": {"num_wordz": 3}}]}}),
    "structured": ({"id": "good", "completion": '{"a": 1}', "reference": {"fields": {"a": 1}}},
                   {"id": "bad", "completion": "{}", "reference": {"fields": []}}),
    "proof_grading": ({"id": "good", "completion": "Here is my evaluation of the solution:\nNo issues found.\n"
                       "Based on my evaluation, the final overall score should be: \\boxed{1}", "reference": {"score": 1}},
                      {"id": "bad", "completion": "x", "reference": {"score": 2}}),
}


def input_file(content: bytes) -> Callable[[Path], dict[str, str]]:
    """Setup: write `content` to in.jsonl; no extra environment."""
    def setup(tmp: Path) -> dict[str, str]:
        (tmp / "in.jsonl").write_bytes(content)
        return {}
    return setup


def mlflow_db(content: bytes) -> Callable[[Path], dict[str, str]]:
    """Setup: the default store's mlflow.db holds `content`."""
    def setup(tmp: Path) -> dict[str, str]:
        (tmp / "home").mkdir()
        (tmp / "home" / "mlflow.db").write_bytes(content)
        return {}
    return setup


def mlflow_server(uri: str) -> Callable[[Path], dict[str, str]]:
    return lambda tmp: {"PASSBAND_MLFLOW_URI": uri}


def ifeval_reference(instruction: dict) -> bytes:
    return jsonl(IFEVAL_GOOD, {"id": "bad", "completion": "x", "reference": {"instructions": [instruction]}})


# Lines 2-5: bad JSON, a missing key, a non-UTF-8 line, binary junk.
MIXED = jsonl(IFEVAL_GOOD, b'{"id": "x", "completion": ', {"id": "y", "completion": "z"},
              b'{"id": "caf\xe9", "completion": "x", "reference": {}}', b"\x00\xff\xfe\x89PNG")
VERIFY = ["verify", "-o", "out.jsonl", "in.jsonl", "--task"]
QUARANTINED_ONE = "pass=1 quarantined=1; line numbers and reasons in out.quarantine.jsonl"

CLI_CASES = [
    pytest.param(input_file(ifeval_reference({"id": "length_constraints:number_words", "kwargs": {"num_wordz": 3}})),
                 [*VERIFY, "ifeval"], 3, QUARANTINED_ONE, id="verify-ifeval-unknown-kwarg"),
    pytest.param(input_file(ifeval_reference({"id": "no:such", "kwargs": {}})),
                 [*VERIFY, "ifeval"], 3, QUARANTINED_ONE, id="verify-ifeval-unknown-id"),
    pytest.param(input_file(ifeval_reference({"id": "length_constraints:number_words",
                                              "kwargs": {"num_words": "3", "relation": "less than"}})),
                 [*VERIFY, "ifeval"], 3, QUARANTINED_ONE, id="verify-ifeval-kwarg-of-the-wrong-type"),
    *(pytest.param(input_file(jsonl(*rows)), [*VERIFY, task], 3, QUARANTINED_ONE, id=f"verify-{task}-bad-reference")
      for task, rows in GOOD_AND_BAD.items() if task != "ifeval"),
    pytest.param(input_file(MIXED), [*VERIFY, "ifeval"], 3, "pass=1 quarantined=4; line numbers and reasons in out.quarantine.jsonl",
                 id="verify-bad-json-missing-keys-non-utf8-junk"),
    pytest.param(input_file(b""), [*VERIFY, "math"], 4, "Error: in.jsonl: no rows to verify", id="verify-empty-file"),
    pytest.param(input_file(b"\n  \n\t\n"), [*VERIFY, "ifeval"], 4, "Error: in.jsonl: no rows to verify",
                 id="verify-blank-lines-only"),
    pytest.param(input_file(bytes(range(256)) * 8), [*VERIFY, "math"], 3,
                 "no row could be verified (is it JSONL in UTF-8?); line numbers and reasons in out.quarantine.jsonl",
                 id="verify-binary-junk-file"),
    pytest.param(input_file(json.dumps({"id": "a", "completion": "42", "reference": "42"}).encode("utf-16")),
                 [*VERIFY, "math"], 3, "no row could be verified (is it JSONL in UTF-8?)", id="verify-utf16-file"),
    pytest.param(mlflow_db(b"SQLite format 2\x00" + bytes(range(256)) * 16), ["runs"], 1,
                 "file is not a database; if the file is damaged, move it aside", id="runs-corrupt-mlflow-db"),
    pytest.param(mlflow_server("http://127.0.0.1:9"), ["runs"], 1,
                 "Error: cannot read MLflow runs from http://127.0.0.1:9: [Errno 111] Connection refused; "
                 "is the server up?", id="runs-unreachable-mlflow"),
]


def run_passband(tmp: Path, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    # The developer's own stack settings must not leak into the case.
    base = {name: value for name, value in os.environ.items() if not name.startswith(("PASSBAND_", "MLFLOW_"))}
    return subprocess.run([str(BIN), *argv], cwd=tmp, capture_output=True, text=True, timeout=TIMEOUT_S,
                          env={**base, "PASSBAND_HOME": str(tmp / "home"), **env})


@pytest.mark.parametrize(("setup", "argv", "expected_exit", "substring"), CLI_CASES)
def test_a_mistake_gives_one_line_and_its_exit_code(tmp_path: Path, setup: Callable[[Path], dict[str, str]],
                                                    argv: list[str], expected_exit: int, substring: str) -> None:
    result = run_passband(tmp_path, argv, setup(tmp_path))
    assert "Traceback" not in result.stdout + result.stderr, result.stderr[-3000:]
    assert result.returncode == expected_exit, result.stderr[-3000:]
    assert len(result.stderr.splitlines()) == 1 and substring in result.stderr, result.stderr


@pytest.mark.parametrize("task", GOOD_AND_BAD)
def test_verify_scores_the_valid_rows_and_quarantines_the_bad_reference(tmp_path: Path, task: str) -> None:
    good, bad = GOOD_AND_BAD[task]
    (tmp_path / "in.jsonl").write_bytes(jsonl(good, bad))
    result = run_passband(tmp_path, [*VERIFY, task], {})
    assert result.returncode == 3, result.stderr[-3000:]
    scored = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [(row["id"], row["status"]) for row in scored] == [("good", "pass")]
    (entry,) = [json.loads(line) for line in (tmp_path / "out.quarantine.jsonl").read_text().splitlines()]
    assert entry["line"] == 2 and json.loads(entry["raw"]) == bad and entry["reason"]


def test_verify_quarantines_each_bad_line_with_its_number_and_reason(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_bytes(MIXED)
    result = run_passband(tmp_path, [*VERIFY, "ifeval"], {})
    assert result.returncode == 3, result.stderr[-3000:]
    assert [json.loads(line)["id"] for line in (tmp_path / "out.jsonl").read_text().splitlines()] == ["good"]
    quarantined = [json.loads(line) for line in (tmp_path / "out.quarantine.jsonl").read_text().splitlines()]
    assert [(q["line"], q["reason"].split(":")[0]) for q in quarantined] == [
        (2, "bad JSON"), (3, "missing keys"), (4, "not valid UTF-8"), (5, "not valid UTF-8")]


def test_verify_on_an_empty_file_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_bytes(b"")
    assert run_passband(tmp_path, [*VERIFY, "math"], {}).returncode == 4
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.jsonl"]
