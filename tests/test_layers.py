"""The package structure DESIGN.md draws, checked on the code's own imports.

Layers, from the ground up; a module imports only from its own layer or those below,
and no set of modules imports each other in a circle (imports inside functions count:
they are the same dependency, paid later):

    inside/    trusted scripts that run in a sandbox: the standard library, litellm, themselves
               (and math_verify for answer checks)
    services/  config, errors, files, gateway, ledger, the provider (litellm behind a protocol), sandbox,
               workspace
    domains/   data, labels, metrics, scoring, the harness
    search/    the search's strategies, one file each (parent selection, promotion, best choice), their
               registry and the statistics they use
    archive/   the store and its readers: nodes, records, evaluations, run folders, selection
    optimizer/ the loop, staged evaluation, estimate, initial agents
    apps/      what reads runs and makes something for a person: the dashboard, report.html and plots,
               analysis, ensembles, export
    entry points: run_optimization.py, setup_proofgrader_repo.py, hyperagents.py

The evolvable agent code (agent/, task_agent/, meta_agent/, select_next_parent.py) runs in
sandboxes and imports none of the trusted core.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from services.config import PROJECT_ROOT, Config
from services.errors import UserError
from services.strategy_names import strategy_names

LAYERS = {"inside": 0, "services": 1, "domains": 2, "search": 3, "archive": 4, "optimizer": 5, "apps": 6,
          "run_optimization": 7, "setup_proofgrader_repo": 7, "hyperagents": 7}
AGENT_CODE = ("agent", "task_agent", "meta_agent", "select_next_parent", "ensemble")
TRUSTED = tuple(LAYERS)
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_CLASS_LINES = 200


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PROJECT_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[str, Path]:
    found = {}
    for top in (*TRUSTED, *AGENT_CODE):
        folder = PROJECT_ROOT / top
        paths = sorted(folder.rglob("*.py")) if folder.is_dir() else [PROJECT_ROOT / f"{top}.py"]
        found.update({_module_name(p): p for p in paths if "data" not in p.relative_to(PROJECT_ROOT).parts})
    return found


SOURCES = _sources()


def _type_only(tree: ast.Module) -> set[int]:
    """The ids of the import nodes under an `if TYPE_CHECKING:`: read by the type checker, never run."""
    blocks = [n for n in ast.walk(tree) if isinstance(n, ast.If) and
              ((isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING")
               or (isinstance(n.test, ast.Attribute) and n.test.attr == "TYPE_CHECKING"))]
    return {id(n) for block in blocks for stmt in block.body for n in ast.walk(stmt)
            if isinstance(n, (ast.Import, ast.ImportFrom))}


def _imports(path: Path, typing: bool = True) -> list[tuple[str, int]]:
    """(module, line) of every import in the file, at any depth; `from a import b` is a.b when
    a.b is a module of the project, else a. `typing=False` leaves out imports only the type
    checker reads (under `if TYPE_CHECKING:`): they make no cycle at run time, but they still
    may only run down the layers."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    skip = set() if typing else _type_only(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.append((sub if sub in SOURCES else node.module, node.lineno))
    return found


def _project_module(name: str) -> str | None:
    """The project module an imported name stands for (its nearest enclosing one), or None."""
    while name and name not in SOURCES:
        name = name.rpartition(".")[0]
    return name or None


def _layer(module: str) -> int | None:
    return LAYERS.get(module.split(".")[0])


GRAPH = {m: sorted({t for name, _ in _imports(p, typing=False) if (t := _project_module(name)) and t != m})
         for m, p in SOURCES.items()}


def test_no_module_imports_a_layer_above_its_own():
    upward = []
    for module, path in SOURCES.items():
        own = _layer(module)
        if own is None:
            continue
        for name, line in _imports(path):
            target = _project_module(name)
            theirs = _layer(target) if target else None
            if theirs is not None and theirs > own:
                upward.append(f"{path.relative_to(PROJECT_ROOT)}:{line} imports {target}")
    assert not upward, "imports that run up a layer:\n" + "\n".join(upward)


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                on_stack.discard(w)
                component.append(w)
            on_stack.discard(v)
            if component:
                found.append(sorted([v, *component]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_modules_import_each_other_in_a_circle():
    assert _cycles(GRAPH) == []


def test_the_cycle_finder_finds_a_circle():
    assert _cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]


# Besides the standard library and litellm: math_verify, with which answers.py compares answers as
# the metrics do; task_agent, meta_agent, select_next_parent and ensemble, the workspace's agent code that
# the scripts exist to load.
ALSO_INSIDE = {"litellm", "math_verify", "task_agent", "meta_agent", "select_next_parent", "ensemble", "inside"}


def _allowed_inside(name: str, siblings: set[str]) -> bool:
    top = name.split(".")[0]
    return top in sys.stdlib_module_names or top in ALSO_INSIDE or top in siblings


def test_inside_imports_only_the_standard_library_litellm_and_itself():
    siblings = {p.stem for p in (PROJECT_ROOT / "inside").glob("*.py")}
    assert {"worker", "relay", "warm_up", "run_meta", "try_agent", "answers"} <= siblings
    wrong = [f"inside/{SOURCES[m].name}:{line} imports {name}"
             for m in SOURCES if m.split(".")[0] == "inside"
             for name, line in _imports(SOURCES[m]) if not _allowed_inside(name, siblings)]
    assert not wrong, "\n".join(wrong)


def test_agent_code_imports_none_of_the_trusted_core():
    wrong = [f"{SOURCES[m].relative_to(PROJECT_ROOT)}:{line} imports {name}"
             for m in SOURCES if m.split(".")[0] in AGENT_CODE
             for name, line in _imports(SOURCES[m]) if name.split(".")[0] in TRUSTED]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("module", sorted(m for m in SOURCES if _layer(m) is not None))
def test_modules_and_functions_stay_short(module):
    path = SOURCES[module]
    text = path.read_text()
    assert text.count("\n") <= MAX_MODULE_LINES, f"{path.name}: {text.count(chr(10))} lines"
    long = [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)" for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and node.end_lineno is not None and node.end_lineno - node.lineno + 1 > (
                MAX_FUNCTION_LINES if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                else MAX_CLASS_LINES)]
    assert not long, f"{path.name}: " + ", ".join(long)


def test_config_and_the_command_line_offer_exactly_the_strategies_the_search_has():
    import pkgutil

    import run_optimization
    from search.registry import strategy
    from services.config import LoopConfig, validate

    files = sorted(m.name for m in pkgutil.iter_modules([str(PROJECT_ROOT / "search" / "parent_selection")]))
    assert strategy_names("parent_selection")[:len(files)] == tuple(files) and "score_child_prop" in files
    action = next(a for a in run_optimization.build_parser()._actions if a.dest == "parent_selection")
    assert tuple(action.choices) == strategy_names("parent_selection")
    for name in files:
        assert strategy("parent_selection", name).weights is not None  # each file is a strategy that loads
        validate(Config(loop=LoopConfig(parent_selection=name)))


@pytest.mark.parametrize(("kind", "field", "known"), [("promotion", "promotion", "sica"),
                                                     ("best_choice", "best_choice", "paired"),
                                                     ("novelty", "novelty_measure", "dice")])
def test_config_offers_exactly_the_promotion_rules_best_choices_and_novelty_measures_the_search_has(kind, field,
                                                                                                    known):
    import pkgutil

    from search.registry import PROTOCOLS, strategy
    from services.config import LoopConfig, validate

    files = sorted(m.name for m in pkgutil.iter_modules([str(PROJECT_ROOT / "search" / kind)]))
    assert strategy_names(kind)[:len(files)] == tuple(files) and known in files
    for name in files:
        assert isinstance(strategy(kind, name), PROTOCOLS[kind][0])  # each file is a strategy that loads
        validate(Config(loop=LoopConfig(**{field: name})))
        if kind == "promotion":
            validate(Config(loop=LoopConfig(stages=[[10, 0, name]])))
    with pytest.raises(UserError, match=f"loop.{field} must be one of {', '.join(strategy_names(kind))}"):
        validate(Config(loop=LoopConfig(**{field: "luck"})))


# Inside domains/: the framework (the modules of domains/ itself, domains/base.py first, and the
# harness) is what each bundled domain's package builds on. The framework's foundation and the
# harness name no bundled domain (the registry, the AnswerBench domains and the harness's command
# line do, above them), and no bundled domain imports another; type-only imports count too.
BUNDLED = sorted(f"domains.{p.name}" for p in (PROJECT_ROOT / "domains").iterdir()
                 if (p / "__init__.py").is_file() and p.name != "harness")
FOUNDATION = ("domains.base", "domains.harness")
ASSEMBLERS = ("domains.harness.__main__",)  # the harness's command line looks domains up by name


def _bundled(module: str) -> str | None:
    return next((b for b in BUNDLED if module == b or module.startswith(b + ".")), None)


def test_inside_domains_imports_run_from_the_bundled_domains_down_to_the_framework():
    assert {"domains.imo", "domains.aime2025"} <= set(BUNDLED)
    wrong = []
    for module, path in SOURCES.items():
        own = _bundled(module)
        below = module.startswith(FOUNDATION) and module not in ASSEMBLERS
        if not (own or below):
            continue
        for name, line in _imports(path):
            theirs = _bundled(_project_module(name) or "")
            if theirs and theirs != own:
                wrong.append(f"{path.relative_to(PROJECT_ROOT)}:{line} imports {name}")
    assert not wrong, "imports that run up inside domains/:\n" + "\n".join(wrong)


def test_a_type_only_import_makes_no_cycle_but_still_counts_for_layers(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nimport a\nif TYPE_CHECKING:\n    import b\n")
    assert [m for m, _ in _imports(source)] == ["typing", "a", "b"]
    assert [m for m, _ in _imports(source, typing=False)] == ["typing", "a"]


def test_config_accepts_exactly_the_sandbox_backends_and_cache_modes_there_are():
    from services.config import CACHE_MODES, SANDBOX_BACKENDS
    from services.gateway.caching import REPLAYS
    from services.sandbox.backends import LOCAL_BACKENDS

    assert ("auto", *LOCAL_BACKENDS) == SANDBOX_BACKENDS
    assert tuple(REPLAYS) == CACHE_MODES
    assert [REPLAYS[m]({"temperature": 0}) for m in CACHE_MODES] == [True, True, False]
    assert [REPLAYS[m]({"temperature": 0.7}) for m in CACHE_MODES] == [False, True, False]
