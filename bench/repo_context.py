"""Completions with the repository's context (decoding/repo_context, docs/context.md) against
without it, on real packages opened as a workspace.

A package is unpacked as the workspace (third-party: the pinned wheels of bench/_util.py,
downloaded into the user cache on first use; stdlib-like: stdlib packages whose modules import
each other relatively, copied into a temporary folder). The file completed is cut as
bench/completion_quality.py cuts (the rest of the line dropped, the lines after kept); the
modules of the package it imports are its open tabs. Two kinds of cut points, as many of each:
- `cross`: the line's real continuation uses a name defined in another module of the package
  (imported with `from .m import name`, or `m.attr` after `from . import m`): the cut is just
  before that name;
- `member`: the real continuation is a member of a class or module of another module of the
  package (`Header.parse` after `from .util import Header`, `util.parse_header` after `from .
  import util`; the member defined there, in the class's body, as a `self.` attribute its methods
  set, or in its bases of that module): the cut is just after the dot. The name before the dot is
  in the file's imports already; what it holds is not, so this is where the other module's text
  is needed;
- `ordinary`: random line starts and mid-line points of the same files.
`other-module` in the report is `cross` and `member` together: every cut point whose real
continuation uses a name defined in another module of the package.
Each cut point is completed twice by the same engine, as two new documents (the first request's
prompt is computed, as after opening a file; `--window first`, the default: a first request's
short window, which holds no block, so both modes are alike by construction; `--window full`: the
full window, as a request finds it once the work ahead has computed it): without a context block
(`off`), and with the block `RepoContexts` makes for it (`on`: made before the request, as the
server makes it ahead; its time is reported apart). `--alone` adds a mode before them: no block,
and the document completed as an unsaved one (`untitled:`), so the names analysis reads the file
alone and knows no other module of the package (what the names guide knew before it followed
the workspace's imports): `alone` against `on` is the whole of the repository's context. Reported per code set, kind and mode: exact match and edit similarity of the
first line against the real rest of the line, whether the answer's first name is the real
one's (`name_right`: at `cross` and `member` cut points the other module's name itself, whatever
the rest of the line says), the share of empty answers, undefined names and
unknown attributes per 100 offered items (a name the completion reads that nothing in the spliced
file binds and that is no builtin; `m.attr` for a module `m` of the package that does not define
`attr`, `C.attr` for a class `C` of another module that has no member `attr`), offered items that compile (CPython's compile()), first-request latency p50/p90.

    .venv/bin/python bench/repo_context.py --cuts 20 [--code thirdparty|stdlib] [--alone] [--out cuts.jsonl]
    .venv/bin/python bench/repo_context.py --cuts 40 --modes alone,on --model FILE.gguf   # a slower model: two modes

`--server`: what the user sees instead, through the real server over stdio (bench/lsp_latency.py's
client), one server per mode (`contextShare` 0, then `--share`), the code set's package roots as
its workspace folders. Per cut point, as an editor would: the file's tabs opened, the file opened,
the cursor reported, `--lead` s later one character of the real continuation typed and reported,
`--pause` s later the first request; then 1-2 characters more and a warm request. Reported per
mode: first and warm latency (ms, and in units of llama.cpp's decode ms per token on the same GGUF
measured alone in the same run), the first answers' exact match and similarity, offered items
that compile, the first requests whose document had a context block made before them, and
where the time went (`at_the_keystroke`: the prompt tokens each completion computed and the
tokens it decoded, with their ms: a ratio from a longer answer is not one from the block).

    .venv/bin/python bench/repo_context.py --server --cuts 10 --code thirdparty
"""

from __future__ import annotations

import argparse
import ast
import builtins
import io
import json
import keyword
import random
import re
import shutil
import sys
import sysconfig
import tempfile
import time
import tokenize
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lsp_server.threads import use_fair_threads  # noqa: E402

use_fair_threads()

import numpy as np  # noqa: E402
from _util import THIRD_PARTY, cache_root, thirdparty_files  # noqa: E402
from completion_quality import edit_similarity  # noqa: E402

from grammar_tools.parsing.cpython_check import compiles  # noqa: E402

STDLIB = Path(sysconfig.get_paths()["stdlib"])
# seconds a cut point waits for its names analysis and its block: the quality modes compare
# answers with both made, so a loaded machine (jedi on a 3,000-line module beside a test run took
# over a minute) waits rather than fails
ANALYSIS_WAIT = 600.0
STDLIB_PACKAGES = ("asyncio", "json", "multiprocessing", "importlib/metadata", "concurrent/futures", "email")
_KNOWN = frozenset(dir(builtins)) | frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | {"self", "cls", "__class__"}


def workspaces(code: str, tmp: Path) -> list[tuple[Path, Path]]:
    """(root, package folder) of each package of the code set."""
    if code == "thirdparty":
        thirdparty_files()  # downloaded and unpacked on first use
        out = []
        for spec in THIRD_PARTY:
            root = cache_root() / spec.replace("==", "-")
            for pkg in sorted(p for p in root.iterdir() if (p / "__init__.py").is_file()):
                out.append((root, pkg))
        return out
    out = []
    for name in STDLIB_PACKAGES:
        root = tmp / "stdlib" / name.replace("/", "_")
        dest = root / name
        if not dest.exists():
            shutil.copytree(STDLIB / name, dest, ignore=shutil.ignore_patterns("__pycache__", "test*"))
            for parent in dest.relative_to(root).parents:
                init = root / parent / "__init__.py"
                if parent != Path(".") and not init.exists():
                    init.write_text("")
        out.append((root, dest))
    return out


def package_imports(path: Path, tree: ast.Module) -> tuple[dict[str, Path], dict[str, Path]]:
    """Of a module of the package: the names it imports from sibling modules (name -> module file)
    and the sibling modules it imports as names (name -> module file)."""
    names: dict[str, Path] = {}
    modules: dict[str, Path] = {}
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
        target = base.joinpath(*node.module.split(".")) if node.module else base
        for alias in node.names:
            sub = target / alias.name
            if (sub.with_suffix(".py")).is_file() or (sub / "__init__.py").is_file():
                modules[alias.asname or alias.name] = sub.with_suffix(".py") if sub.with_suffix(".py").is_file() else sub / "__init__.py"
            elif target.with_suffix(".py").is_file():
                names[alias.asname or alias.name] = target.with_suffix(".py")
            elif (target / "__init__.py").is_file():
                names[alias.asname or alias.name] = target / "__init__.py"
    return names, modules


def cut_points(packages: list[tuple[Path, Path]], n: int, seed: int) -> list[dict]:
    """`n` cross cuts and `n` ordinary ones (see the module's docstring)."""
    rng = random.Random(seed)
    members_rng = random.Random(seed + 1)  # apart, so that the other kinds' cut points stay those of a seed
    cross, member, ordinary = [], [], []
    files = []
    for root, pkg in packages:
        for p in sorted(pkg.rglob("*.py")):
            text = p.read_text(encoding="utf-8", errors="replace")
            if 1_000 < len(text) < 200_000 and compiles(text):
                files.append((root, p, text))
    rng.shuffle(files)
    for root, p, text in files:
        tree = ast.parse(text)
        names, modules = package_imports(p, tree)
        if not names and not modules:
            continue
        lines = text.split("\n")
        import_end = max((getattr(node, "end_lineno", 0) for node in tree.body
                          if isinstance(node, (ast.Import, ast.ImportFrom))), default=0)
        toks = code_tokens(text)
        found = []
        for k, t in enumerate(toks):
            i = t.start[0] - 1
            if t.type != tokenize.NAME or i < import_end or _after_dot(toks, k) or not _code_line(lines[i]):
                continue
            if t.string in names:
                found.append((i, t.start[1], t.string))
            elif t.string in modules and _dot_at(toks, k + 1, t.end):
                found.append((i, toks[k + 1].end[1], t.string))
        rng.shuffle(found)
        for i, ch, word in found[:2]:
            if len(cross) < n:
                cross.append({"root": str(root), "path": str(p), "line": i, "character": ch, "kind": "cross", "name": word})
        places = member_places(toks, lines, import_end, names, modules)
        members_rng.shuffle(places)
        for i, ch, word in places[:2]:
            if len(member) < n:
                member.append({"root": str(root), "path": str(p), "line": i, "character": ch, "kind": "member", "name": word})
        for _ in range(2):
            i = rng.randrange(import_end, len(lines))
            s = lines[i].strip()
            if len(ordinary) < n and s and not s.startswith("#") and len(s) >= 4:
                indent = len(lines[i]) - len(lines[i].lstrip())
                ch = indent if rng.random() < 0.5 else rng.randrange(indent + 1, len(lines[i]))
                ordinary.append({"root": str(root), "path": str(p), "line": i, "character": ch, "kind": "ordinary"})
        if len(cross) >= n and len(ordinary) >= n and len(member) >= n:
            break
    return cross + member + ordinary


def member_places(toks: list, lines: list[str], import_end: int, names: dict[str, Path],
                  modules: dict[str, Path]) -> list[tuple[int, int, str]]:
    """(line, character just after the dot, `name.attr`) of each `name.attr` read below the
    imports (in code: not in a string or a comment; `code_tokens`) where `name` is a class or
    module of another module of the package and `attr` one of its members there (`member_names`)."""
    out = []
    for k, t in enumerate(toks[:-2]):
        i = t.start[0] - 1
        if t.type != tokenize.NAME or i < import_end or _after_dot(toks, k) or not _code_line(lines[i]):
            continue
        attr = toks[k + 2]
        if not (_dot_at(toks, k + 1, t.end) and attr.type == tokenize.NAME and attr.start == toks[k + 1].end):
            continue
        known = (module_names(modules[t.string]) if t.string in modules
                 else member_names(names[t.string], t.string) if t.string in names else None)
        if known and attr.string in known and not attr.string.startswith("__"):
            out.append((i, attr.start[1], f"{t.string}.{attr.string}"))
    return out


def code_tokens(text: str) -> list:
    """The text's NAME and OP tokens (Python's tokenizer: what is in strings and comments is not
    among them), up to where it can't read further."""
    out = []
    try:
        for t in tokenize.generate_tokens(io.StringIO(text).readline):
            if t.type in (tokenize.NAME, tokenize.OP):
                out.append(t)
    except (tokenize.TokenError, SyntaxError):
        pass
    return out


def _code_line(line: str) -> bool:
    """Not an import or decorator line (where no name of another module is completed as a use)."""
    return not line.lstrip().startswith(("from ", "import ", "@"))


def _after_dot(toks: list, k: int) -> bool:
    return k > 0 and toks[k - 1].type == tokenize.OP and toks[k - 1].string == "."


def _dot_at(toks: list, k: int, end: tuple[int, int]) -> bool:
    """Token `k` is a `.` right after position `end` (no space between)."""
    return k < len(toks) and toks[k].string == "." and toks[k].start == end


def tabs(path: Path) -> list[Path]:
    """The modules of the package that `path` imports (an editor's open tabs)."""
    tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    names, modules = package_imports(path, tree)
    return sorted(set(names.values()) | set(modules.values()) - {path})


def bound_names(text: str) -> set[str] | None:
    """Every name the module binds anywhere (any scope), None when it does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                out.add((a.asname or a.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            out.add(node.name)
        elif isinstance(node, ast.alias):
            out.add(node.asname or node.name)
    return out


def module_names(path: Path) -> set[str] | None:
    """The top-level names of a module (None: a module-level __getattr__, a star import, or no parse)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if "__getattr__" in text or "import *" in text:
        return None
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    out = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        for t in getattr(node, "targets", []) + ([node.target] if isinstance(node, ast.AnnAssign) else []):
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    out.add(n.id)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
    return out


def member_names(path: Path, name: str) -> set[str] | None:
    """The members of class `name` of the module at `path`: what its body binds, the `self.`
    attributes its methods set, and the same of its bases defined in that module (None: no such
    class, or a base from elsewhere, whose members are not known here)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except SyntaxError:
        return None
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    out: set[str] = set()
    todo, seen = [name], set()
    while todo:
        node = classes.get(todo.pop())
        if node is None:
            return None
        if node.name in seen:
            continue
        seen.add(node.name)
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id != "object":
                todo.append(base.id)
            elif not isinstance(base, ast.Name):
                return None
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(item.name)
            for t in getattr(item, "targets", []) + ([item.target] if isinstance(item, ast.AnnAssign) else []):
                out.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        for sub in ast.walk(node):
            if (isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store)
                    and isinstance(sub.value, ast.Name) and sub.value.id == "self"):
                out.add(sub.attr)
    return out


def wrong_names(spliced: str, line: int, head: str, path: Path) -> tuple[int, int]:
    """(undefined names, unknown attributes) the offered text reads on line `line` of the
    spliced file after `head` (the cursor's line before it): the names and attributes in code
    (not in strings or comments: `code_tokens`) that reach into the offered text (see the
    module's docstring)."""
    bound = bound_names(spliced)
    if bound is None:
        return 0, 0
    toks = code_tokens(spliced)
    on_line = [k for k, t in enumerate(toks) if t.start[0] == line + 1]
    undefined = 0
    for k in on_line:
        t = toks[k]
        if (t.type == tokenize.NAME and t.end[1] > len(head) and not _after_dot(toks, k)
                and t.string not in bound and t.string not in _KNOWN
                and not (k + 1 < len(toks) and toks[k + 1].string == "=")):  # `f(key=`: a keyword argument
            undefined += 1
    imported, modules = package_imports(path, ast.parse(spliced))
    unknown = 0
    for k in on_line:
        t = toks[k]
        if (t.type != tokenize.NAME or _after_dot(toks, k) or t.string not in modules and t.string not in imported
                or not _dot_at(toks, k + 1, t.end) or k + 2 >= len(toks)):
            continue
        attr = toks[k + 2]
        if attr.type != tokenize.NAME or attr.start != toks[k + 1].end or attr.end[1] <= len(head):
            continue
        word = t.string
        names = module_names(modules[word]) if word in modules else member_names(imported[word], word)
        if names is not None and attr.string not in names:
            unknown += 1
    return undefined, unknown


def cut_document(cut: dict) -> tuple[Path, list[str], int, int, str]:
    """(the file, its lines, the cut's line and character, the document cut there: the rest of
    the line dropped, the lines after kept)."""
    path = Path(cut["path"])
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    i, ch = cut["line"], cut["character"]
    return path, lines, i, ch, "\n".join(lines[:i] + [lines[i][:ch]] + lines[i + 1 :])


def run(engine, contexts, cut: dict, mode: str, tag: str, window: str = "first") -> dict:
    """Cut point `cut` completed in `mode`: `on` (the context block made for it), `off` (none),
    `alone` (none, and the document unsaved: the names analysis reads the file alone, knowing no
    other module of the package, as before the repository's context)."""
    from lsp_server.decoding.engine import CompletionRequest
    from lsp_server.decoding.workspace_context import workspace_context

    path, lines, i, ch, doc = cut_document(cut)
    reference = lines[i][ch:]
    uri = path.as_uri()
    others = [(p.as_uri(), p.read_text(encoding="utf-8", errors="replace")) for p in tabs(path)]
    ws = workspace_context(uri, [(uri, doc)] + others)
    block_ms, sections = 0.0, []
    if mode == "on":
        t = time.perf_counter()
        block = contexts.wait(uri, doc, i, [(uri, doc)] + others, ANALYSIS_WAIT)
        block_ms = (time.perf_counter() - t) * 1000
        if block is not None:
            from dataclasses import replace

            ws = replace(ws, block=block)
            sections = [f"{s.kind}:{s.name}" for s in block.sections]
    # "first": a new document's first request (the short first window); "full": the full window,
    # as a request finds it once the work ahead has computed it
    document = f"untitled:{tag}" if mode == "alone" else f"{uri}#{tag}"  # untitled: no path for jedi
    req = CompletionRequest.at(doc, i, ch, document=document, workspace=ws, short_first=window == "first")
    engine.names_ahead(req, wait=ANALYSIS_WAIT)
    t0 = time.perf_counter()
    r = engine.complete(req)
    latency = (time.perf_counter() - t0) * 1000
    spliced = "\n".join(lines[:i] + [lines[i][:ch] + r.text] + lines[i + 1 :])
    first, ref_first = r.text.split("\n")[0].rstrip(), reference.rstrip()
    offered = bool(r.text.strip())
    undefined, unknown = wrong_names(spliced, i, lines[i][:ch], path) if offered else (0, 0)
    engine.forget(document)
    ref_name = first_name(reference)
    return {"exact": first == ref_first, "similarity": edit_similarity(first, ref_first), "offered": offered,
            "name_right": first_name(r.text) == ref_name if ref_name else None,
            "compiles": compiles(spliced) if offered else None, "undefined": undefined, "unknown": unknown,
            "latency_ms": latency, "block_ms": block_ms, "sections": sections, "prompt_tokens": r.figures.prompt_tokens,
            "stop": str(r.stop_reason), "text": r.text[:200], "reference": reference[:200]}


def first_name(text: str) -> str | None:
    """The identifier a continuation starts with (after spaces), or None."""
    m = _FIRST_NAME.match(text.lstrip(" \t"))
    return m.group(0) if m else None


_FIRST_NAME = re.compile(r"[^\W\d]\w*")


def summary(rows: list[dict]) -> dict:
    offered = [r for r in rows if r["offered"]]
    named = [r for r in rows if r.get("name_right") is not None]
    lat = [r["latency_ms"] for r in rows]
    return {
        "n": len(rows),
        "exact_match": round(sum(r["exact"] for r in rows) / max(len(rows), 1), 3),
        "edit_similarity": round(float(np.mean([r["similarity"] for r in rows])) if rows else 0.0, 3),
        # the answer's first name is the reference's (where that starts with one): at `cross` and
        # `member` cut points the other module's name itself, whatever the rest of the line says
        "name_right": f"{sum(r['name_right'] for r in named)}/{len(named)}",
        "empty": round(1 - len(offered) / max(len(rows), 1), 3),
        "undefined_per_100_offered": round(100 * sum(r["undefined"] for r in offered) / max(len(offered), 1), 1),
        "unknown_attributes_per_100_offered": round(100 * sum(r["unknown"] for r in offered) / max(len(offered), 1), 1),
        "offered_compile": f"{sum(bool(r['compiles']) for r in offered)}/{len(offered)}",
        "first_request_ms_p50": round(float(np.percentile(lat, 50)), 1) if lat else None,
        "first_request_ms_p90": round(float(np.percentile(lat, 90)), 1) if lat else None,
        "block_ms_p50": round(float(np.percentile([r["block_ms"] for r in rows], 50)), 1) if rows else None,
        "with_block": sum(bool(r["sections"]) for r in rows),
    }


def spread(values: list[int]) -> dict:
    """Mean, p50 and p90 of a list of counts or milliseconds."""
    if not values:
        return {"n": 0}
    return {"n": len(values), "mean": round(float(np.mean(values)), 1),
            "p50": round(float(np.percentile(values, 50)), 1), "p90": round(float(np.percentile(values, 90)), 1)}


async def through_server(args, cuts: list[dict], roots: list[str]) -> dict:
    """The `--server` scenario (see the module's docstring), each mode in a server of its own."""
    import asyncio

    from _util import stats_ms
    from lsp_latency import COMPLETED, Server, apply_item, items_of, log_lines, utf16, warmup

    out = {}
    for mode, share in (("off", 0.0), ("on", args.share)):
        s = Server(args, {"model": args.model, "contextShare": share}, folders=tuple(Path(r).as_uri() for r in roots))
        await s.start()
        await warmup(s, args)
        first, warm, quality = [], [], []
        for cut in cuts:
            path, lines, i, ch, doc = cut_document(cut)
            rest = lines[i][ch:]
            uri = path.as_uri()
            others = tabs(path)
            for p in others:
                s.open(p.as_uri(), p.read_text(encoding="utf-8", errors="replace"))
            s.open(uri, doc)
            s.cursor(uri, i, ch)
            await asyncio.sleep(args.lead - args.pause)
            col = ch
            for step, typed in enumerate((rest[:1], rest[1 : 2 + len(first) % 2])):
                if typed:
                    s.edit(uri, (i, col), (i, col), typed)
                    doc = "\n".join(doc.split("\n")[:i] + [lines[i][: col + len(typed)]] + doc.split("\n")[i + 1 :])
                    col += utf16(typed)
                    s.cursor(uri, i, col)
                if step == 0:
                    await asyncio.sleep(args.pause)
                r, dt = await s.timed(uri, i, col, ("first", "warm")[step], f"{cut['kind']}:{path.name}:{i + 1}")
                (first, warm)[step].append(dt)
                items = items_of(r)
                if step == 0:
                    row = {"kind": cut["kind"], "offered": bool(items)}
                    if items:
                        text, _ = apply_item(doc, items[0])
                        line, real = text.split("\n")[i].rstrip(), lines[i].rstrip()
                        row |= {"compiles": compiles(text), "exact": line == real,
                                "similarity": edit_similarity(line, real)}
                    quality.append(row)
                if not rest[1:]:
                    break
            s.close(uri)
            for p in others:
                s.close(p.as_uri())
        log = s.log()
        await s.stop()
        firsts = [a for a in s.asked if a["phase"] == "first"]
        said = log_lines(log)
        with_block = sum(1 for a in firsts if any(a["sent"] - args.lead - 1 <= at <= a["sent"] and f"context block of {a['uri']}:" in text
                                                  for at, text in said))
        first_window = sum(1 for m in COMPLETED.finditer(log) if m.group(4) == " (first window)")
        without_block = sum(1 for m in COMPLETED.finditer(log) if m.group(4) == " (without the context block)")
        offered = [q for q in quality if q["offered"]]
        # the completions the model computed (an answer typed through a shown suggestion has no
        # prompt), the warm-up's one included
        done = [m for m in COMPLETED.finditer(log) if int(m.group(3))]
        out[mode] = {
            "context_share": share, "first": stats_ms(first), "warm": stats_ms(warm) if warm else None,
            "first_answers": {kind: {"n": len(rows), "offered": sum(q["offered"] for q in rows),
                                     "exact": round(sum(q.get("exact", False) for q in rows) / max(len(rows), 1), 3),
                                     "similarity": round(float(np.mean([q.get("similarity", 0.0) for q in rows])), 3)}
                              for kind in ("cross", "member", "ordinary") for rows in [[q for q in quality if q["kind"] == kind]]},
            "offered_compile": f"{sum(q['compiles'] for q in offered)}/{len(offered)}",
            "first_requests_with_a_block_made_before": with_block,
            "completions_from_a_first_window": first_window,
            "completions_from_the_window_without_the_block": without_block,
            # where a ratio comes from: the prompt computed at the keystroke (what the block could add
            # there) and the answer's decoding (what a different answer costs), over every completion
            "at_the_keystroke": {
                "completions": len(done),
                "computed_tokens": spread([int(m.group(3)) - int(m.group(5)) for m in done]),
                "prefill_ms": spread([int(m.group(6)) for m in done]),
                "decoded_tokens": spread([int(m.group(8)) + int(m.group(9)) for m in done]),
                "decode_ms": spread([int(m.group(7)) for m in done]),
            },
            "server_log": str(s.log_file),
        }
    return out


def server_run(args) -> dict:
    """`--server`: the anchor (llama.cpp alone, first), then each mode's server in turn."""
    import asyncio
    import os

    from llama_cpp_anchor import in_units
    from lsp_latency import anchor

    tmp = Path(tempfile.mkdtemp(prefix="repo-context-"))
    packages = workspaces(args.code, tmp)
    # a session per project, as a user works: the cut points of one package after another
    cuts = sorted(cut_points(packages, args.cuts, args.seed), key=lambda c: (c["root"], c["path"]))
    out = {"code": args.code, "model": args.model, "share": args.share, "cuts_per_kind": args.cuts,
           "lead_s": args.lead, "pause_s": args.pause, "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
           "anchor": anchor(args)}
    L = (out["anchor"] or {}).get("decode_ms_per_token")
    out["L_ms"] = L
    modes = asyncio.run(through_server(args, cuts, sorted({c["root"] for c in cuts})))
    out["modes"] = in_units(modes, L) if L else modes
    out["first_p50_on_over_off"] = round(modes["on"]["first"]["p50_ms"] / modes["off"]["first"]["p50_ms"], 3)
    out["first_p90_on_over_off"] = round(modes["on"]["first"]["p90_ms"] / modes["off"]["first"]["p90_ms"], 3)
    if modes["off"]["warm"] and modes["on"]["warm"]:
        out["warm_p90_on_over_off"] = round(modes["on"]["warm"]["p90_ms"] / modes["off"]["warm"]["p90_ms"], 3)
    out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cuts", type=int, default=20, help="cut points of each kind")
    ap.add_argument("--code", choices=("thirdparty", "stdlib"), default="thirdparty")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="default")
    ap.add_argument("--share", type=float, default=0.25)
    ap.add_argument("--form", choices=("comments", "code"), default="comments", help="how the plain model reads the block")
    ap.add_argument("--out", help="a JSON line per cut point and mode")
    ap.add_argument("--modes", help="the modes to run, comma-separated (alone, off, on; default: off,on, "
                                    "alone first with --alone)")
    ap.add_argument("--alone", action="store_true",
                    help="a third mode first: no block and the names analysis without the document's path (the file alone)")
    ap.add_argument("--window", choices=("first", "full"), default="first",
                    help="the prompt window of the (cold) request: the short first window, or the full one")
    ap.add_argument("--server", action="store_true", help="through the real server over stdio (module docstring)")
    ap.add_argument("--lead", type=float, default=1.5, help="--server: seconds from opening the file to the request")
    ap.add_argument("--pause", type=float, default=0.5, help="--server: seconds from the character typed to the request")
    ap.add_argument("--no-anchor", dest="anchor", action="store_false",
                    help="--server: do not measure llama.cpp's decode (L): figures in ms only")
    ap.add_argument("--verbose", action="store_true", help="--server: the server's stderr on ours")
    args = ap.parse_args()
    if args.server:
        print(json.dumps(server_run(args), indent=1))
        return

    from lsp_server.decoding.engine import CompletionEngine
    from lsp_server.decoding.repo_context import RepoContexts
    from lsp_server.options import EngineOptions

    modes = tuple(args.modes.split(",")) if args.modes else (("alone",) if args.alone else ()) + ("off", "on")
    if not set(modes) <= {"alone", "off", "on"}:
        ap.error(f"--modes: alone, off or on, not {args.modes!r}")
    tmp = Path(tempfile.mkdtemp(prefix="repo-context-"))
    packages = workspaces(args.code, tmp)
    cuts = cut_points(packages, args.cuts, args.seed)
    engine = CompletionEngine.load(EngineOptions(model=args.model))
    rows: dict[tuple[str, str], list[dict]] = {}
    out = open(args.out, "w") if args.out else None
    contexts_by_root: dict[str, RepoContexts] = {}
    for n, cut in enumerate(cuts):
        contexts = contexts_by_root.setdefault(cut["root"], RepoContexts(roots=(cut["root"],), share=args.share,
                                                                          context_tokens=engine.options.context_tokens,
                                                                          form=args.form))
        for mode in modes:
            row = run(engine, contexts, cut, mode, f"{mode}{n}", args.window)
            rows.setdefault((cut["kind"], mode), []).append(row)
            if out:
                out.write(json.dumps(cut | {"mode": mode} | row) + "\n")
    report = {"code": args.code, "model": engine.runtime.name, "share": args.share, "form": args.form,
              "window": args.window, "cuts_per_kind": args.cuts,
              "results": {f"{kind}/{mode}": summary(r) for (kind, mode), r in sorted(rows.items())}
              | {f"other-module/{mode}": summary(rows.get(("cross", mode), []) + rows.get(("member", mode), []))
                 for mode in modes}}
    print(json.dumps(report, indent=1))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
