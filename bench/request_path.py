"""The path of one completion request through the code (prints JSON).

    .venv/bin/python bench/request_path.py [--model default] [--file examples/hottest_day.py]

Completes the file at the end of its last line with the engine (the demo's request), once to
warm the caches and once traced (`sys.setprofile`), and reports which of the project's modules
the second request entered: a module is *entered* at a call from a function of another module;
a call edge is (calling function, called function). Per module it gives the distinct edges that
enter it from elsewhere (a measure of how often a reader following the request comes back to
it); `re_entries` sums, over the modules, the distinct entering edges beyond the first.
`imports_run` lists the import statements the traced request ran (imports inside functions on
its path), `longest_modules` the longest modules it entered. `--edges` also lists each module's
entering edges.
"""

from __future__ import annotations

import argparse
import builtins
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PACKAGES = ("lsp_server", "mask_store", "grammar_tools")


def _module(frame) -> str | None:
    name = frame.f_globals.get("__name__", "")
    return name if name.split(".")[0] in PACKAGES else None


def _longest(modules, n: int = 5) -> dict[str, int]:
    """The `n` longest of the entered modules, in lines."""
    lines = {}
    for m in modules:
        path = ROOT / (m.replace(".", "/") + ".py")
        lines[m] = len((path if path.exists() else path.with_suffix("") / "__init__.py").read_text().splitlines())
    return dict(sorted(lines.items(), key=lambda kv: -kv[1])[:n])


def trace(fn, list_edges: bool = False) -> dict:
    """Run `fn()` under a profile hook; the project's cross-module call edges it made."""
    edges: set[tuple[str, str, str, str]] = set()

    def hook(frame, event, arg):
        if event != "call":
            return
        callee = _module(frame)
        caller = frame.f_back
        # calls from a library (a comprehension, functools) count from the project's frame below
        while caller is not None and _module(caller) is None:
            caller = caller.f_back
        if callee is None or caller is None:
            return
        src = _module(caller)
        if src != callee:
            edges.add((src, caller.f_code.co_qualname, callee, frame.f_code.co_qualname))

    imports: set[str] = set()
    real_import = builtins.__import__

    def import_spy(name, globals=None, locals=None, fromlist=(), level=0):
        # an import statement run while the request is served (one inside a function)
        module = (globals or {}).get("__name__", "")
        if module.split(".")[0] in PACKAGES:
            imports.add(f"{module}.{sys._getframe(1).f_code.co_qualname}: {name}")
        return real_import(name, globals, locals, fromlist, level)

    builtins.__import__ = import_spy
    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
        builtins.__import__ = real_import
    entering: dict[str, set] = defaultdict(set)
    for src, f, dst, g in edges:
        entering[dst].add((src, f, g))
    per_module = {m: len(e) for m, e in sorted(entering.items(), key=lambda kv: -len(kv[1]))}
    out = {
        "modules_entered": len(entering),
        "cross_module_edges": len(edges),
        "re_entries": sum(n - 1 for n in per_module.values()),
        "imports_run": sorted(imports),
        "longest_modules": _longest(entering),
        "entries_by_module": per_module,
    }
    if list_edges:
        out["edges_by_module"] = {m: sorted(f"{src}.{f} -> {g}" for src, f, g in entering[m])
                                  for m in per_module}
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--file", default=str(ROOT / "examples" / "hottest_day.py"))
    ap.add_argument("--edges", action="store_true", help="also list each module's entering edges")
    args = ap.parse_args(argv)

    from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
    from lsp_server.options import EngineOptions

    text = Path(args.file).read_text()
    cursor = len(text.rstrip("\n"))
    engine = CompletionEngine.load(EngineOptions(model=args.model, temperature=0.0))
    engine.complete(CompletionRequest(text, cursor=cursor, document="file:///warm.py", short_first=False))
    request = CompletionRequest(text, cursor=cursor, document="file:///traced.py", short_first=False)
    result = {}
    out = trace(lambda: result.update(r=engine.complete(request)), list_edges=args.edges)
    out = {"benchmark": "request_path", "file": str(args.file), "completion": result["r"].text,
           "stop_reason": str(result["r"].stop_reason), **out}
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
