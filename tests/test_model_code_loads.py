"""Every place passband loads a model, a config or a tokenizer passes `trust_remote_code` (issue 71): a model
that ships its own code loads only with it, so one call without it is a stage that fails late on such a model
(MLflow's base load, evaluation's tokenizer, trace perplexity, the tool traces' tokenizer and rollout KL did).

The guard reads the package's source: every call of `from_pretrained`, `load_tokenizer`, `load_causal_lm` and
`empty_causal_lm` must pass the flag (a keyword, or the positional slot the function gives it), or stand in
EXEMPT with the reason it loads no model code. A new load without it fails here with its file and line."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = ("flows", "tasks", "training", "curation", "infra/cli", "infra/stack")
"""The folders pyproject.toml maps into `passband` (tool.setuptools.package-dir)."""

TRUST_SLOT = {"load_tokenizer": 1, "load_causal_lm": 2, "empty_causal_lm": 1}
"""passband's loaders: the positional index of their `trust_remote_code` argument."""
LOADS = {"from_pretrained", *TRUST_SLOT}

EXEMPT = {
    ("training/model_source.py", "gguf_to_safetensors", "AutoTokenizer.from_pretrained"):
        "the shipped SmolLM2 GGUF: a Llama, no code of its own",
    ("training/model_source.py", "gguf_to_safetensors", "AutoModelForCausalLM.from_pretrained"): "the same GGUF",
    ("training/runtime/meta_init.py", "empty_causal_lm", "GenerationConfig.from_pretrained"):
        "generation_config.json: sampling defaults, no code",
    ("tasks/reporting/registry.py", "_log_adapter_model", "PeftModel.from_pretrained"):
        "puts an adapter on the base loaded above with the flag; it builds no model",
    ("training/judge/reward_model.py", "_tokenizer", "AutoTokenizer.from_pretrained"):
        "a reward model (curation's RewardModelConfig) has no opt-in of its own: transformers refuses one with code",
    ("training/judge/reward_model.py", "_transformers_model", "AutoModelForSequenceClassification.from_pretrained"):
        "the same reward model",
}
"""(file, enclosing function, the function called) -> why that load needs no flag."""


def _loads() -> list[tuple[str, str, int, ast.Call]]:
    """(file, enclosing function, line, call) of every load call in the package."""
    found = []
    for folder in PACKAGE_DIRS:
        for path in sorted((REPO / folder).rglob("*.py")):
            tree = ast.parse(path.read_text())
            for function in ast.walk(tree):
                if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(function):
                    if isinstance(node, ast.Call):
                        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                        if name in LOADS:
                            found.append((str(path.relative_to(REPO)), function.name, node.lineno, node))
    # a call inside a nested function is found under both functions: keep the innermost
    innermost: dict[tuple[str, int, int], tuple[str, str, int, ast.Call]] = {}
    for where in found:
        innermost[(where[0], where[2], where[3].col_offset)] = where
    return list(innermost.values())


def _passes_flag(call: ast.Call) -> bool:
    name = call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id
    if any(keyword.arg == "trust_remote_code" for keyword in call.keywords):
        return True
    return name in TRUST_SLOT and len(call.args) > TRUST_SLOT[name]


def test_every_model_config_and_tokenizer_load_passes_trust_remote_code() -> None:
    loads = _loads()
    assert len(loads) > 20  # the walk found the package's loads (36 when this was written)
    missing = [f"{file}:{line} in {function}" for file, function, line, call in loads
               if not _passes_flag(call) and (file, function, ast.unparse(call.func)) not in EXEMPT]
    assert missing == [], "these loads do not pass trust_remote_code (EngineConfig.trust_remote_code):\n" + \
        "\n".join(missing)


def test_every_exemption_still_names_a_load() -> None:
    """An exemption whose load moved or went away is removed, so the list does not hide a new one."""
    places = {(file, function, ast.unparse(call.func)) for file, function, _, call in _loads() if not _passes_flag(call)}
    assert sorted(set(EXEMPT) - places) == []


def test_the_guard_catches_a_load_without_the_flag() -> None:
    bare = ast.parse("AutoTokenizer.from_pretrained(path)\nload_causal_lm(path, 'float32')").body
    passed = ast.parse("AutoConfig.from_pretrained(path, trust_remote_code=t)\nload_tokenizer(path, t)").body
    assert [_passes_flag(line.value) for line in bare] == [False, False]
    assert [_passes_flag(line.value) for line in passed] == [True, True]
