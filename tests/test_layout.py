"""The import structure of ``completer/`` and ``lsp/`` (issue 33): no import cycles, nothing imports "upward", and no
test imports ``bench``.

Every ``import`` counts, wherever it is (a module's top, inside a function, under ``if TYPE_CHECKING``): a lazy import
is still a dependency, it only moves the failure from start-up to the first call. Importing ``a.b.c`` runs the
``__init__`` of ``a`` and ``a.b`` too, so it is an edge to each of those packages (except the importer's own
ancestors, which are already running), and a package's ``__init__`` is a module like any other: its imports count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("completer", "lsp")

# Low to high: a module may import its own layer and the layers below it, never one above. Within a layer, the
# cycle check keeps the arrows one way. The first matching prefix decides a module's layer.
LAYERS: list[tuple[str, ...]] = [
    ("completer.text", "completer.stats", "completer.arguments", "completer.shipped"),   # small helpers, shipped paths
    ("completer.prompt",),                                  # FIM templates and their special tokens
    ("completer.context",),                                 # tree-sitter context: what goes into the prompt
    ("completer.healing", "completer.postprocess"),         # prompt-side and text-side fixes
    ("completer.models",),                                  # load and run a model: llama, gguf, quant, kernels
    ("completer.speculative",),                             # proposers and verification over a model
    ("completer.engine",),                                  # the Engine protocol and its backends
    ("completer.pipeline",),                                # keystroke -> prompt -> engine -> ghost text
    ("completer.training",),                                # corpus, tokenizer, train, drafters, GGUF writing
    ("completer.tune",),                                    # measures the engines, saves the speculation choice
    ("lsp",),                                               # the language server and its client
    ("completer.cli", "completer.__main__"),                # the command line (python -m completer): the top
]


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_sources(root: Path = ROOT) -> dict[str, tuple[str, bool]]:
    """{module name: (source, is a package's __init__)} of every module of completer/ and lsp/."""
    out = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            out[module_name(path, root)] = (path.read_text(encoding="utf-8"), path.name == "__init__.py")
    return out


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def imported(name: str, source: str, is_package: bool, known: set[str]) -> set[str]:
    """The project modules that importing ``name`` (``source``) can import, at its top or later."""
    package = name if is_package else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            targets.add(stem)
            targets.update(f"{stem}.{alias.name}" for alias in node.names)   # `from pkg import module`
    edges = set()
    mine = set(_ancestors(name))
    for t in targets:
        while t and t not in known:                # `from a.b import function`: the module is a.b
            t = t.rpartition(".")[0]
        if not t or t == name:
            continue
        edges.add(t)
        edges.update(a for a in _ancestors(t) if a not in mine and a in known)
    return edges


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    known = set(sources)
    return {name: imported(name, src, is_pkg, known) for name, (src, is_pkg) in sources.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer_of(name: str) -> int:
    for i, prefixes in enumerate(LAYERS):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return i
    if name == "completer":
        return -1                                  # the (empty) top package
    raise AssertionError(f"{name} is in no layer of tests/test_layout.py: add it where it belongs")


def upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)})"
                  for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a))


def imports_of_bench(source: str) -> list[int]:
    """Line numbers of the imports of ``bench`` (or a module under it) in ``source``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            names = [str(node.args[0].value)]
        if any(n == "bench" or n.startswith("bench.") for n in names):
            lines.append(node.lineno)
    return lines


# -- the project as it is --------------------------------------------------------------------------------------------

GRAPH = import_graph(project_sources())


def test_no_import_cycles():
    assert cycles(GRAPH) == []


def test_no_upward_imports():
    assert upward(GRAPH) == []


def test_completer_never_imports_lsp_or_bench():
    for name, (source, _) in project_sources().items():
        assert not imports_of_bench(source), f"{name} imports bench"
        if name.startswith("completer"):
            assert not any(t == "lsp" or t.startswith("lsp.") for t in GRAPH[name]), f"{name} imports lsp"


def test_no_test_imports_bench():
    """Tests of the product test the product; a benchmark is run as a program (``python -m bench.X``) when a test
    checks it."""
    data = ROOT / "tests" / "data"                   # documents the tests complete, not Python the tests run
    offenders = {str(p.relative_to(ROOT)): imports_of_bench(p.read_text(encoding="utf-8"))
                 for p in sorted((ROOT / "tests").rglob("*.py")) if data not in p.parents}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_every_module_has_a_layer():
    for name in GRAPH:
        layer_of(name)


# -- the checks themselves fail on what they are meant to catch -------------------------------------------------------

def _graph(**modules: str) -> dict[str, set[str]]:
    """A made-up project: keyword names with "__" for "." (a trailing "__" marks a package's __init__)."""
    sources = {}
    for key, src in modules.items():
        is_pkg = key.endswith("__")
        sources[key.rstrip("_").replace("__", ".")] = (src, is_pkg)
    return import_graph(sources)


def test_a_cycle_through_a_function_level_import_is_found():
    g = _graph(completer__models__llama="def load():\n    from .gguf import read\n",
               completer__models__gguf="from .llama import Model\n")
    assert cycles(g) == [["completer.models.gguf", "completer.models.llama"]]


def test_a_cycle_through_a_packages_init_is_found():
    g = _graph(completer__engine__="def create():\n    from .torch.engine import E\n",
               completer__engine__torch__="",
               completer__engine__torch__engine="from ..base import Chunk\n",
               completer__engine__base="from completer.engine import create\n")
    assert ["completer.engine", "completer.engine.base", "completer.engine.torch.engine"] in cycles(g)


def test_an_upward_import_is_found():
    g = _graph(completer__models__llama="from completer.engine.torch import kernels\n",
               completer__engine__torch__kernels="")
    assert upward(g) == ["completer.models.llama (layer 4) imports completer.engine.torch.kernels (layer 6)"]
    assert upward(_graph(lsp__security="from completer.cli import positive_int\n", completer__cli=""))
    assert upward(_graph(completer__prompt="from completer.models import HOUSE_DIR\n", completer__models__=""))


@pytest.mark.parametrize("source", ["from bench.lspclient import Client\n", "import bench.trace as tr\n",
                                    "def f():\n    from bench import replay\n",
                                    "import importlib\nimportlib.import_module('bench.report')\n"])
def test_an_import_of_bench_is_found(source):
    assert imports_of_bench(source)
    assert not imports_of_bench("import subprocess\nsubprocess.run(['python', '-m', 'bench.report'])\n")
