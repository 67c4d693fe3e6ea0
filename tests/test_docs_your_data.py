"""docs/your-data.md, run: its example rows, its GSM8K walk-through, my.yaml and the GPU command.

The page's fenced blocks are read by their info string (```jsonl problems, ```jsonl gsm8k,
```jsonl chats, the ```yaml block that starts with `# my.yaml`, the ```bash block that runs
it on a GPU), written where my.yaml expects them, and loaded with the functions the flows call.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from passband.curation.catalog import TASKS
from passband.curation.grading.texts import EVALUATION_PHRASE, SCORE_PHRASE
from passband.curation.holdout import hold_out
from passband.curation.suites.loaders import load_rows
from passband.cli.main import main
from passband.flows.config import resolve_config
from passband.flows.pipeline.flow import PipelineConfig
from passband.training.sft.sources import read_chat_rows
from doc_blocks import fenced_blocks

PAGE = Path(__file__).resolve().parents[1] / "docs" / "your-data.md"


def block(info: str, first_line: str = "") -> str:
    (body,) = [body for kind, body in fenced_blocks(PAGE.read_text()) if kind == info and body.startswith(first_line)]
    return body


def gsm8k_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory holding my.yaml, data/gsm8k_train.jsonl (the page's two GSM8K lines, then
    238 more of the same shape: eval_size 200 needs more rows than it holds out) and data/my_chats.jsonl."""
    (tmp_path / "data").mkdir()
    more = "".join(f'{{"question": "What is {a} + {a + 3}?", "answer": "{a} + {a + 3} = <<{a}+{a + 3}={2 * a + 3}>>'
                   f'{2 * a + 3}.\\n#### {2 * a + 3}"}}\n' for a in range(238))
    (tmp_path / "data" / "gsm8k_train.jsonl").write_text(block("jsonl gsm8k") + more)
    (tmp_path / "data" / "my_chats.jsonl").write_text(block("jsonl chats"))
    (tmp_path / "my.yaml").write_text(block("yaml", "# my.yaml\n"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_example_rows_load_and_their_references_verify(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(block("jsonl problems"))
    loaded = load_rows(str(path))
    assert loaded.quarantined == []
    assert [row["task"] for row in loaded.rows] == ["math", "code", "code", "ifeval", "structured", "proof_grading"]
    right = ["17 + 25 = 42", "```python\ndef rev(s):\n    return s[::-1]\n```",
             "```python\na, b = map(int, input().split())\nprint(a + b)\n```",
             "soft rain on the roof\nthe street shines", '{"origin": "Lyon", "destination": "Milan"}',
             f"{EVALUATION_PHRASE}\nIssue in step 2: x = 5 is not justified.\n{SCORE_PHRASE} \\boxed{{0.5}}"]
    wrong = ["17 + 25 = 43", "```python\ndef rev(s):\n    return s\n```",
             "```python\na, b = map(int, input().split())\nprint(a - b)\n```",
             "Soft rain, on the roof", '{"origin": "Milan", "destination": "Lyon"}',
             f"{EVALUATION_PHRASE}\nNo issues found.\n{SCORE_PHRASE} \\boxed{{1}}"]
    for row, good, bad in zip(loaded.rows, right, wrong, strict=True):
        task = TASKS[row["task"]]
        results = task.verify([good, bad], [row["reference"]] * 2, task.Settings())
        assert [r.status for r in results] == ["pass", "fail"], (row["id"], results)


def test_my_yaml_resolves_and_loads_the_gsm8k_file_it_names(tmp_path: Path, monkeypatch) -> None:
    gsm8k_home(tmp_path, monkeypatch)
    printed = CliRunner().invoke(main, ["config", "pipeline", "--config", "my.yaml"])  # the page's first command
    assert printed.exit_code == 0, printed.output
    config = resolve_config(PipelineConfig, "pipeline", config_files=Path("my.yaml"))
    assert PipelineConfig.model_validate(yaml.safe_load(printed.output)) == config
    assert (sorted(config.curate.tasks), sorted(config.rl.datasets), config.evaluate.suites) == (["math"], ["math"], {})

    pool = config.curate.tasks["math"]
    loaded = pool.source.load()  # what curate's load_problems_task returns
    assert loaded.quarantined == [] and len(loaded.rows) == 240  # the whole file: fewer rows than num_problems
    first = loaded.rows[0]
    assert (first["id"], first["task"], first["subdomain"], first["source"]) == (
        "gsm8k_train.jsonl-1", "math", "general", "gsm8k_train.jsonl")
    assert first["prompt"].startswith("Natalia sold clips") and first["reference"].endswith("#### 72")
    train, evals = hold_out(loaded.rows, pool.eval_size, config.curate.holdout_seed)
    assert (len(train), len(evals)) == (40, 200)

    # the worked solution is the reference as is: math-verify reads its final number
    math, settings = TASKS["math"], config.curate.verifiers().math
    natalia, weng = loaded.rows[0]["reference"], loaded.rows[1]["reference"]
    results = math.verify(["She sold 72 clips.", "She sold 24 clips.", "She earned $10.", "She earned 0.2."],
                          [natalia, natalia, weng, weng], settings)
    assert [r.status for r in results] == ["pass", "fail", "pass", "fail"]


def test_my_yaml_sft_stage_reads_the_chat_file(tmp_path: Path, monkeypatch) -> None:
    gsm8k_home(tmp_path, monkeypatch)
    config = resolve_config(PipelineConfig, "pipeline", config_files=Path("my.yaml"))
    (stage,) = config.sft.stages
    local = [name for name in stage.datasets if not name.startswith("@")]
    assert local == ["data/my_chats.jsonl"]
    rows, quarantined = read_chat_rows(Path(local[0]))  # what the stage reads for a local file
    assert quarantined == []
    assert [row["completion"] for row in rows] == ["6 x 7 = 42. The answer is 42.", "No: 91 = 7 x 13.", "23 is prime."]
    assert rows[1]["prompt"] == [{"role": "system", "content": "You are a careful tutor."},
                                 {"role": "user", "content": "Is 91 prime?"}]
    assert rows[2]["prompt"] == "Name a prime number between 20 and 25."


def test_gpu_command_runs_my_yaml_with_gpu_engines(tmp_path: Path, monkeypatch) -> None:
    gsm8k_home(tmp_path, monkeypatch)
    (command,) = [body for kind, body in fenced_blocks(PAGE.read_text())
                  if kind == "bash" and "--set model=" in body]
    argv = shlex.split(command.replace("\\\n", " "))
    assert argv[:5] == ["passband", "run", "pipeline", "--config", "my.yaml"]
    overrides = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--set"]
    config = resolve_config(PipelineConfig, "pipeline", config_files=Path("my.yaml"), overrides=overrides)
    assert config.model == "Qwen/Qwen2.5-1.5B-Instruct"  # every stage starts from it when the pipeline runs
    engines = {"curate": config.curate.engine, "rl": config.rl.engine, "evaluate": config.evaluate.engine}
    assert {name: (e.memory_fraction, e.kv_cache_gib, e.enforce_eager) for name, e in engines.items()} == {
        "curate": (0.85, None, False), "rl": (0.4, None, False), "evaluate": (0.85, None, False)}
    assert config.rl.engine.in_process  # a partial mapping keeps what RL's engine default set
