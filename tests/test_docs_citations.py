"""Every file, symbol, config field and link the docs cite exists.

The docs are README.md, infra/README.md and docs/*.md. Rules, applied to code spans (`...`, which
may wrap across lines) and to fenced code blocks; plain prose is not read, except for links:

1. Paths. A token that starts with one of the repository's folders (flows/, tasks/, curation/,
   training/, infra/, docs/, tests/, scripts/) names a file or folder relative to the repository
   root that must exist. Trailing punctuation is dropped; `{a,b}` expands to both; `*`, `<name>`
   and ALL-CAPS segments (`FLOW`, `NAME`) are wildcards that must match at least one file
   (`flows/presets/FLOW/NAME.yaml`, `curation/catalog/<task>.py`).
2. Symbols. A code span `path.py: name, other, Class.member` cites names defined in that file:
   each comma-separated item's leading dotted name counts (call arguments and `-> result` are
   ignored, so `evaluate -> Evaluation` cites `evaluate`). `name` must be defined at the file's
   top level by def, class or assignment (an import does not count: the name lives elsewhere).
   For `Class.member`, when `Class` is a class of that file, `member` must be defined in its body;
   for an instance (`ENGINES.scope()`) only the instance's name is checked.
3. Config fields. A code span that is `Config.field` (or `Config.a.b`, optionally followed by
   ` = value`), where `Config` is the name of a config class the flows use (those of
   docs/config.md), cites a settable field: each step must be a field of the config reached so
   far. A call, `Config.method()`, must name an attribute of the class. Two classes of one name
   (none today; a test keeps it so) count as one: the field must be in either.
4. Links. A relative markdown link `[text](target#anchor)` must point at an existing file
   (relative to the linking file), and its anchor at an `<a id>` or a heading of that file.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import re
from functools import cache
from pathlib import Path

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "infra" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FOLDERS = ("flows", "tasks", "curation", "training", "infra", "docs", "tests", "scripts")
PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(FOLDERS)})/[\w./{{}},*<>-]*)")
SPAN = re.compile(r"`([^`\n]+(?:\n[^`\n]+)*)`")
SYMBOL_CITATION = re.compile(rf"^((?:{'|'.join(FOLDERS)})/[\w./-]+\.py):\s+(.+)$", re.DOTALL)
DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
CONFIG_CITATION = re.compile(r"^([A-Z]\w*)((?:\.[a-z_]\w*)+)(\(.*\))?$", re.DOTALL)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def split_fenced(text: str) -> tuple[str, str]:
    """(prose with fenced blocks blanked, fenced blocks with prose blanked); line numbers kept."""
    prose, fenced, inside = [], [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
            prose.append("")
            fenced.append("")
        else:
            (fenced if inside else prose).append(line)
            (prose if inside else fenced).append("")
    return "\n".join(prose), "\n".join(fenced)


def expand(token: str) -> list[str]:
    """`a/{b,c}.py` -> [`a/b.py`, `a/c.py`]."""
    parts = re.split(r"\{([^}]*)\}", token)
    options = [part.split(",") if i % 2 else [part] for i, part in enumerate(parts)]
    return ["".join(choice) for choice in itertools.product(*options)]


def as_glob(path: str) -> str:
    """Placeholders as wildcards: `<task>` and an ALL-CAPS name (`FLOW`, the `NAME` of NAME.yaml)."""
    return "/".join(re.sub(r"<[^>]*>|^[A-Z][A-Z_]*(?=\.|$)", "*", segment) for segment in path.split("/"))


def path_problem(token: str) -> str | None:
    token = token.rstrip(".,;:)")
    for path in expand(token):
        pattern = path if "*" in path or (ROOT / path).exists() else as_glob(path)
        if not (any(ROOT.glob(pattern)) if "*" in pattern else (ROOT / pattern).exists()):
            return f"no such file or folder: {path}"
    return None


@cache
def defined_names(path: Path) -> dict[str, set[str] | None]:
    """Top-level names defined in `path` -> the names defined in its body (classes) or None."""
    names: dict[str, set[str] | None] = {}

    def collect(statements: list[ast.stmt], into: dict) -> None:
        for node in statements:
            if isinstance(node, ast.ClassDef):
                body: dict = {}
                collect(node.body, body)
                into[node.name] = set(body)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                into[node.name] = None
            elif isinstance(node, ast.Assign):
                into.update({target.id: None for target in node.targets if isinstance(target, ast.Name)})
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                into[node.target.id] = None
            elif isinstance(node, ast.If | ast.Try | ast.With):
                collect([*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])], into)

    collect(ast.parse(path.read_text()).body, names)
    return names


def cited_symbols(rest: str) -> list[str]:
    """The leading dotted name of each comma-separated item, after dropping `(...)` and `-> ...`."""
    text = " ".join(rest.split())
    while re.search(r"\([^()]*\)", text):
        text = re.sub(r"\([^()]*\)", "", text)
    text = text.split("->")[0]
    return [match.group(0) for item in text.split(",") if (match := DOTTED.match(item.strip()))]


def symbol_problem(path: str, symbol: str) -> str | None:
    names = defined_names(ROOT / path)
    head, _, member = symbol.partition(".")
    if head not in names:
        return f"{path} defines no {head!r} (def, class or assignment)"
    body = names[head]
    member = member.split(".")[0]
    if member and body is not None and member not in body:
        return f"class {head} in {path} defines no {member!r}"
    return None


@cache
def config_classes() -> dict[str, list[type]]:
    """Config class name -> the classes of that name that docs/config.md documents."""
    from passband.curation.catalog import TASKS
    from passband.cli.config_reference import flow_configs, reachable

    by_name: dict[str, list[type]] = {}
    for cls in reachable([*flow_configs().values(), *(task.SuiteOptions for task in TASKS.values())]):
        by_name.setdefault(cls.__name__, []).append(cls)
    return by_name


def field_types(cls: type) -> dict[str, object]:
    if issubclass(cls, BaseModel):
        return {name: field.annotation for name, field in cls.model_fields.items()}
    return {field.name: field.type for field in dataclasses.fields(cls)}


def config_problem(span: str) -> str | None:
    from passband.cli.config_reference import nested_configs

    match = CONFIG_CITATION.match(re.split(r"\s*=\s*", span, maxsplit=1)[0])
    if match is None or match.group(1) not in config_classes():
        return None
    name, chain, call = match.group(1), match.group(2).lstrip(".").split("."), match.group(3)
    if call is not None:
        if len(chain) == 1 and any(hasattr(cls, chain[0]) for cls in config_classes()[name]):
            return None
        return f"{name} has no attribute {'.'.join(chain)!r}"
    candidates = config_classes()[name]
    for depth, field in enumerate(chain):
        owners = [cls for cls in candidates if field in field_types(cls)]
        if not owners:
            return f"{name}.{'.'.join(chain[:depth + 1])} is not a config field"
        candidates = [nested for cls in owners for nested in nested_configs(field_types(cls)[field])]
        if depth + 1 < len(chain) and not candidates:
            return f"{name}.{'.'.join(chain[:depth + 1])} holds no nested config"
    return None


def heading_slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = path.read_text()
    return ({*re.findall(r'<a id="([^"]+)"></a>', text)}
            | {heading_slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")})


def link_problem(doc: Path, target: str) -> str | None:
    if re.match(r"[a-z]+://|mailto:", target):
        return None
    file_part, _, anchor = target.partition("#")
    path = (doc.parent / file_part).resolve() if file_part else doc
    if not path.exists():
        return f"link to a missing file: {target}"
    if anchor and path.suffix == ".md" and anchor not in anchors(path):
        return f"link to a missing anchor: {target}"
    return None


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def citation_problems(doc: Path) -> list[str]:
    """`doc:line: citation: why` for every broken citation of one document."""
    text = doc.read_text()
    prose, fenced = split_fenced(text)
    where = doc.relative_to(ROOT)
    problems = []
    for source in (prose, fenced):
        chunks = [(m.start(1), m.group(1)) for m in SPAN.finditer(source)] if source is prose else [(0, fenced)]
        for start, chunk in chunks:
            for match in PATH.finditer(chunk):
                if (problem := path_problem(match.group(1))) is not None:
                    problems.append(f"{where}:{line_of(source, start + match.start())}: {match.group(1)}: {problem}")
            if source is not prose:
                continue
            if (cited := SYMBOL_CITATION.match(chunk.strip())) and (ROOT / cited.group(1)).is_file():
                for symbol in cited_symbols(cited.group(2)):
                    if (problem := symbol_problem(cited.group(1), symbol)) is not None:
                        problems.append(f"{where}:{line_of(source, start)}: `{chunk}`: {problem}")
            if (problem := config_problem(chunk.strip())) is not None:
                problems.append(f"{where}:{line_of(source, start)}: `{chunk}`: {problem}")
    for match in LINK.finditer(prose):
        if (problem := link_problem(doc, match.group(1))) is not None:
            problems.append(f"{where}:{line_of(prose, match.start())}: {problem}")
    return problems


def test_every_citation_in_the_docs_exists() -> None:
    problems = [problem for doc in DOCS for problem in citation_problems(doc)]
    assert problems == [], "stale citations in the docs:\n" + "\n".join(problems)


def test_the_rules_catch_what_they_should(tmp_path: Path, monkeypatch) -> None:
    """Each rule on a known-good and a known-bad citation of this repository."""
    assert path_problem("flows/presets/FLOW/NAME.yaml") is None
    assert path_problem("training/sft/{config,data}.py") is None
    assert path_problem("curation/catalog/<task>.py") is None
    assert path_problem("training/sft/{config,nope}.py") == "no such file or folder: training/sft/nope.py"
    assert cited_symbols("fit_entropy_ceiling(entropies, rewards)\n  -> (a, b, ceiling = b - a, r2)") == [
        "fit_entropy_ceiling"]
    assert cited_symbols("ENGINES.scope(), ENGINES.engine") == ["ENGINES.scope", "ENGINES.engine"]
    assert symbol_problem("training/rl/algebra/kl.py", "kl_reward_penalty") is None
    assert symbol_problem("training/rl/config.py", "RLAlgoConfig._check") is None
    assert symbol_problem("flows/rl/config.py", "TASKS") == (
        "flows/rl/config.py defines no 'TASKS' (def, class or assignment)")  # imported there, defined elsewhere
    assert symbol_problem("training/rl/config.py", "RLAlgoConfig.nope") == (
        "class RLAlgoConfig in training/rl/config.py defines no 'nope'")
    assert config_problem("RLAlgoConfig.clip_low") is None
    assert config_problem('RLAlgoConfig.level = "token"') is None
    assert config_problem("RewardConfig.verifiers.math.answer_format") is None
    assert config_problem("RLAlgoConfig.correction_bounds()") is None
    assert config_problem("SFTConfig.stages") is None and config_problem("SFTSelectionConfig.stage2_bands") is None
    assert config_problem("SFTConfig.stage2_bands") == "SFTConfig.stage2_bands is not a config field"
    assert config_problem("RLConfig.group_size") == "RLConfig.group_size is not a config field"  # a property
    assert config_problem("RewardConfig.math_answer_format") == "RewardConfig.math_answer_format is not a config field"
    doc = tmp_path / "doc.md"
    doc.write_text("# A heading\n\n[ok](#a-heading) [bad](#nope) [gone](missing.md)\n")
    assert link_problem(doc, "#a-heading") is None
    assert link_problem(doc, "#nope") == "link to a missing anchor: #nope"
    assert link_problem(doc, "missing.md") == "link to a missing file: missing.md"
