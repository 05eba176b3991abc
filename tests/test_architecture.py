"""The tree's shape: imports flow one way (lsp_server -> mask_store -> grammar_tools; inside
grammar_tools analyses -> parsing -> lexing -> its top-level modules; inside lsp_server the
command line -> server -> team -> decoding -> model -> the shared modules) and no module imports
itself back through others, function-level imports included."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("grammar_tools", "mask_store", "lsp_server")
LAYER = {name: i for i, name in enumerate(PACKAGES)}  # a package may import those before it
# grammar_tools' parts, in the same sense: its top-level modules (the grammar and the cache,
# which all parts read), then the subpackages
GRAMMAR_BASE = ("cache", "grammar")
GRAMMAR_LAYERS = ("lexing", "parsing", "analyses")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports anywhere in its source (TYPE_CHECKING blocks too)."""
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - node.level + 1]
                mod = ".".join(anchor + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" for a in node.names] + [mod]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, set(mods)) for name, path in mods.items()}


def test_imports_flow_from_the_server_to_the_grammar():
    bad = [(a, b) for a, deps in _graph().items() for b in deps
           if LAYER[b.split(".")[0]] > LAYER[a.split(".")[0]]]
    assert not bad, f"imports against the layering: {bad}"


# lsp_server's layers, lowest first: a module may import its own layer and those before it. The
# shared modules (options, positions, allocator, threads) are read by every
# layer; the team client drives the decoding with a remote model and is loaded by the server's
# engine host; the command line starts the server or the engine
LSP_LAYERS = ("shared", "model", "decoding", "team", "server", "cli")
LSP_CLI = ("cli", "cli_complete")


def _lsp_layer(module: str) -> int:
    """`module`'s place in `LSP_LAYERS` (lsp_server's modules only)."""
    part = module.split(".")[1] if module.count(".") else ""
    if part in LSP_CLI:
        return LSP_LAYERS.index("cli")
    return LSP_LAYERS.index(part) if part in LSP_LAYERS else LSP_LAYERS.index("shared")


def test_lsp_server_imports_flow_from_the_server_to_the_model():
    """server -> decoding -> model: the model imports neither decoding nor the server, decoding
    does not import the server; the shared modules import none of the layers."""
    graph = _graph()
    assert _lsp_layer("lsp_server.options") < _lsp_layer("lsp_server.model.runtime")
    assert _lsp_layer("lsp_server.decoding.engine") < _lsp_layer("lsp_server.server.suggester")
    assert _lsp_layer("lsp_server.cli_complete") == _lsp_layer("lsp_server.cli") == len(LSP_LAYERS) - 1
    bad = [(a, b) for a, deps in graph.items() if a.startswith("lsp_server") for b in deps
           if b.startswith("lsp_server.") and _lsp_layer(b) > _lsp_layer(a)]
    assert not bad, f"imports against lsp_server's layering: {bad}"


def test_identifier_modes_are_the_options_values():
    """`options.IDENTIFIER_MODES` lists the `identifiers` option's values without importing
    decoding (which sits above it); the enum decoding uses holds the same."""
    from lsp_server.decoding.identifiers.modes import IdentifierMode
    from lsp_server.options import IDENTIFIER_MODES

    assert tuple(m.value for m in IdentifierMode) == IDENTIFIER_MODES


def _grammar_layer(module: str) -> int:
    """0 for grammar_tools' top-level modules, then 1, 2, ... for its subpackages in order."""
    parts = module.split(".")
    return GRAMMAR_LAYERS.index(parts[1]) + 1 if len(parts) > 1 and parts[1] in GRAMMAR_LAYERS else 0


def test_grammar_tools_parts_import_one_way():
    bad = [(a, b) for a, deps in _graph().items() if a.startswith("grammar_tools") for b in deps
           if b.startswith("grammar_tools") and _grammar_layer(b) > _grammar_layer(a)]
    assert not bad, f"imports against grammar_tools' layering: {bad}"


def test_grammar_tools_modules_live_in_their_parts():
    """Only the shared base stays at the top; every other module is in a part (a new module
    goes where its imports put it: /work/wt/brief/move_grammar_tools.py's LAYOUT)."""
    top = ROOT / "grammar_tools"
    assert sorted(p.stem for p in top.glob("*.py") if p.stem != "__init__") == sorted(GRAMMAR_BASE)
    assert sorted(p.parent.name for p in top.glob("*/__init__.py")) == sorted(GRAMMAR_LAYERS)


def test_no_import_cycles():
    graph = _graph()
    # a module's own package __init__ is imported with it; only real modules form cycles
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_graph_resolves_relative_imports():
    """Relative, function-level and cross-package imports are all edges of the graph (on the
    previous tree the cycle test found decoding <-> speculation through a local import)."""
    graph = _graph()
    assert "lsp_server.decoding.sampling" in graph["lsp_server.decoding.loop"]
    assert "lsp_server.model.kv_cache" in graph["lsp_server.decoding.loop"]
    # imports inside functions count: the jedi process's (`from .identifiers.jedi_memory import ...`)
    assert "lsp_server.decoding.identifiers.jedi_memory" in graph["lsp_server.decoding.jedi_process"]
    assert "mask_store.matcher" in graph["lsp_server.decoding.loop"]
    # across grammar_tools' parts, relative (`..lexing.lexer_automaton`, `.. import cache`)
    assert "grammar_tools.lexing.lexer_automaton" in graph["grammar_tools.parsing.incremental"]
    assert "grammar_tools.cache" in graph["grammar_tools.lexing.lexer_automaton"]
    assert "grammar_tools.parsing.guards" in graph["grammar_tools.analyses.exploration"]
