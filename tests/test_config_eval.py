"""One home for eval settings (issue 28 item 5): the evaluate flow, SFT and RL evaluate through one
EvalConfig whose default sets come from the catalog's eval defaults; the math answer-format check
is written once; each flow's own defaults are values of that class, and the presets resolve to the
eval settings they had (written out by hand below)."""

import inspect
from pathlib import Path

import pytest

from passband.curation.catalog import TASKS
from passband.flows.config import ConfigError, resolve_config
from passband.flows.evaluate.config import EvalConfig, check_answer_format
from passband.flows.evaluate.flow import EvaluateConfig
from passband.flows.pipeline.flow import PipelineConfig
from passband.flows.rl.config import RLConfig
from passband.flows.sft import SFTConfig
from passband.training.engines import SamplingConfig

ROOT = Path(__file__).resolve().parents[1]


def test_every_flow_evaluates_with_the_one_class():
    assert issubclass(EvaluateConfig, EvalConfig)
    assert SFTConfig.model_fields["eval"].annotation == EvalConfig | None
    assert RLConfig.model_fields["eval"].annotation == EvalConfig | None
    assert isinstance(SFTConfig().eval, EvalConfig) and isinstance(RLConfig().eval, EvalConfig)


def test_the_default_sets_are_the_catalogs_eval_defaults():
    suites = EvalConfig().suites
    assert sorted(suites) == ["code", "ifeval", "math"]
    # curation/catalog/{math,code,ifeval}.py: 16 / 8 / 8 problems, difficulty 0 / 0 / easy, seed 9001
    assert {name: (s.suite, s.num_problems, s.difficulty, s.seed) for name, s in suites.items()} == {
        "math": ("math", 16, 0, 9001), "code": ("code", 8, 0, 9001), "ifeval": ("ifeval", 8, "easy", 9001)}
    assert all(s.num_problems == TASKS[name].eval_defaults.num_problems for name, s in suites.items())
    assert EvalConfig().sampling == SamplingConfig(n=4, temperature=1.0, max_tokens=256)  # n=4, 256 tokens each
    assert EvaluateConfig().suites == suites and RLConfig().eval.suites == suites


def test_each_flows_defaults_are_values_of_the_one_class():
    assert EvaluateConfig().sampling == SamplingConfig(n=4, temperature=1.0, max_tokens=256)
    assert RLConfig().eval.sampling == SamplingConfig(n=4, temperature=1.0, max_tokens=96)
    sft = SFTConfig().eval
    assert (sft.sampling, sft.verifiers.math.answer_format) == (SamplingConfig(n=4, temperature=0.6, max_tokens=96), "boxed")
    assert {name: (s.num_problems, s.seed, s.answer_format) for name, s in sft.suites.items()} == {"math": (32, 1000, "boxed")}


@pytest.mark.parametrize(("flow", "preset", "sets", "sampling"), [
    ("rl", "demo", {"math": 12, "code": 8, "ifeval": 8}, (4, 1.0, 128)),
    ("rl", "smoke", {"math": 4, "code": 4, "ifeval": 4}, (2, 1.0, 64)),
    ("rl", "gpu", {"math": 200, "code": 32, "ifeval": 100, "gsm8k": 250, "math500": 250, "ifeval_google": 200},
     (4, 1.0, 1024)),
    ("sft", "demo", {"math": 32}, (4, 0.6, 96)),
    ("sft", "gpu", {"math": 200}, (4, 0.6, 1024)),
    ("evaluate", "demo", {"math": 40, "code": 16, "ifeval": 16, "humaneval": 8}, (4, 1.0, 256)),
    ("evaluate", "smoke", {"math": 6, "code": 4, "ifeval": 4}, (2, 1.0, 96)),
])
def test_presets_keep_their_eval_settings(flow, preset, sets, sampling):
    config = resolve_config({"rl": RLConfig, "sft": SFTConfig, "evaluate": EvaluateConfig}[flow], flow, preset)
    evaluation = config if flow == "evaluate" else config.eval
    assert {name: source.num_problems for name, source in evaluation.suites.items()} == sets
    s = evaluation.sampling
    assert (s.n, s.temperature, s.max_tokens, s.top_p, s.seed) == (*sampling, 1.0, 0)


def test_rl_schedule_and_verifiers_map_over():
    demo, gpu = resolve_config(RLConfig, "rl", "demo"), resolve_config(RLConfig, "rl", "gpu")
    assert (demo.eval_every, demo.best_metric, gpu.eval_every) == (4, "mean/pass@1", 10)
    # RL scored its eval sets with reward.verifiers; each preset's eval verifiers are those
    for config in (demo, gpu, resolve_config(RLConfig, "rl", "smoke")):
        assert config.eval.verifiers == config.reward.verifiers
    assert gpu.eval.verifiers.math.answer_format == "boxed"
    assert resolve_config(SFTConfig, "sft", "gpu").engine.memory_fraction == 0.85  # was sft.eval.engine
    assert resolve_config(SFTConfig, "sft", "smoke").eval is None
    assert resolve_config(PipelineConfig, "pipeline", "smoke").sft.eval is None


def test_the_answer_format_check_is_written_once_and_names_the_setting():
    sources = [path for folder in ("curation", "flows", "infra", "tasks", "training")
               for path in (ROOT / folder).rglob("*.py")]
    writers = [path.relative_to(ROOT).as_posix() for path in sources
               if ".answer_format for " in path.read_text() and "asked" in path.read_text()]
    assert writers == ["flows/evaluate/config.py"]
    assert "check_answer_format(" in inspect.getsource(RLConfig)
    with pytest.raises(ConfigError, match=r"math suites ask for \['boxed'\] but verifiers\.math\.answer_format is 'plain'"):
        resolve_config(RLConfig, "rl", "smoke", None, ["eval.suites.math.answer_format=boxed"])
    with pytest.raises(ConfigError, match=r"but reward\.verifiers\.math\.answer_format is 'plain'"):
        resolve_config(RLConfig, "rl", "smoke", None, ["datasets.math.answer_format=boxed"])
    with pytest.raises(ValueError, match=r"where\.math\.answer_format is 'plain'"):
        check_answer_format(EvalConfig(verifiers={"math": {"answer_format": "boxed"}},
                                       suites={"math": {"suite": "math", "answer_format": "boxed"}}).suites.values(),
                            EvalConfig().verifiers, "where")


def test_rl_best_metric_names_an_eval_set():
    with pytest.raises(ConfigError, match=r"best_metric 'nope/pass@1' must be '<name>/pass@<k>'"):
        resolve_config(RLConfig, "rl", "smoke", None, ["best_metric=nope/pass@1"])
    with pytest.raises(ConfigError, match=r"needs 1 <= k <= eval.sampling.n=2"):
        resolve_config(RLConfig, "rl", "smoke", None, ["best_metric=math/pass@3"])
