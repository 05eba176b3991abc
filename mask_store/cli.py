"""`mask-store build | info | verify`: the mask store from the command line."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

from grammar_tools.parsing.versions import NEWEST, format_version

from .build_timeline import Timeline, cpu_seconds

_STARTED = (time.perf_counter(), cpu_seconds())  # this module imported: the command begins


def _err(msg: str) -> int:
    print(f"mask-store: {msg}", file=sys.stderr)
    return 2


def cmd_build(args) -> int:
    timeline = Timeline()
    with timeline.phase("imports"):
        from .loading import build_store, load_tokenizer_beside_lexer, store_path_for
        from .model_files import ModelNotFound
    try:
        with timeline.phase("tokenizer_beside_lexer"):
            tok = load_tokenizer_beside_lexer(args.model)
    except ModelNotFound as e:
        return _err(str(e))
    streamline = not args.no_streamline
    merge = not args.no_merge_states
    out = Path(args.out) if args.out else store_path_for(tok, streamline, merge)
    store = build_store(tok, args.model, streamline=streamline, progress=not args.quiet, merge_states=merge,
                        timeline=timeline)
    with timeline.phase("save"):
        store.save(out)
    info = store.info()
    info["path"] = str(out)
    info["bytes"] = os.path.getsize(out)
    wall, cpu = time.perf_counter() - _STARTED[0], cpu_seconds() - _STARTED[1]
    info["command_seconds"] = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}
    info["phases"] = timeline.phases
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        print(f"built {out} ({info['bytes'] / 1e6:.2f} MB, {info['logical_rows']} rows, {info['build_seconds']} s)")
        _print_steps(info)
    return 0


def _print_steps(info: dict) -> None:
    """The row counts after each streamlining step, as a table."""
    sl = info.get("streamline")
    if not sl:
        return
    full = sl["steps"][0]["rows"]
    print(f"{'step':>20}  {'rows':>8}  {'vs full':>7}  {'stored rows':>11}  {'seconds':>7}")
    for st in sl["steps"]:
        ratio = full / max(st["rows"], 1)
        print(f"{st['step']:>20}  {st['rows']:>8}  {ratio:>6.2f}x  {st['stored_rows']:>11}  {st['seconds']:>7}")
    a = sl.get("analysis", {})
    print(
        "analyses: "
        + ", ".join(f"{k}={v}" for k, v in a.items())
    )


def cmd_info(args) -> int:
    from .store import MaskStoreError, load_store

    try:
        store = load_store(args.path)
    except MaskStoreError as e:
        return _err(str(e))
    info = store.info()
    info["path"] = str(args.path)
    info["bytes"] = os.path.getsize(args.path)
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for k, v in info.items():
            if k not in ("streamline", "rows_per_step"):
                print(f"{k:>20}: {v}")
        _print_steps(info)
    return 0


def cmd_verify(args) -> int:
    from .canonical import OFF, START
    from .canonical_tables import CanonicalUnsupported, load_canonical
    from .loading import open_store
    from .compiled import CompiledGrammar
    from .model_files import ModelNotFound
    from .store import MaskStoreError, load_store
    from .verify import verify_files
    from .vocabulary import load_tokenizer

    try:
        raw = load_store(args.store)
        tok = load_tokenizer(raw.header.get("model"))
        store = open_store(args.store, tok)
        full = open_store(args.compare_full, tok) if args.compare_full else None
    except (MaskStoreError, ModelNotFound) as e:
        return _err(str(e))
    pairs, canonical = None, OFF
    if args.canonical:
        try:
            pairs, canonical = load_canonical(tok), START
        except CanonicalUnsupported as e:
            return _err(str(e))
    from grammar_tools.parsing.recognizer import Recognizer
    from grammar_tools.parsing.versions import VersionError, parse_version

    try:
        version = parse_version(args.python_version)
    except VersionError as e:
        return _err(str(e))
    compiled = CompiledGrammar(store, tok.vocab, Recognizer(python_version=version), canonical=pairs)
    other = CompiledGrammar(full, tok.vocab, compiled.recognizer, compiled.lexer, canonical=pairs) if full else None
    report = verify_files(compiled, tok.encode, args.files, compare=other,
                          progress=not args.json and sys.stderr.isatty(),
                          canonical=canonical)
    s = report.summary()
    s["rows"] = {"store": store.logical_rows(), "nfa_states": store.n_states}
    if full is not None:
        s["rows"].update(compare_full=full.logical_rows(), compare_full_nfa_states=full.n_states,
                         reduction=round(full.logical_rows() / max(store.logical_rows(), 1), 3))
    if args.json:
        print(json.dumps(s, indent=2))
    else:
        print(f"files {s['files']}, tokens {s['tokens']}, positions {s['positions']}, rejections {s['rejections']}")
        r = s["rows"]
        print(f"rows {r['store']}" + (f" (compared store: {r['compare_full']}, {r['reduction']}x)" if full else ""))
        for r in s["first_rejections"]:
            print(f"  {r['file']}:{r['line']}: token {r['token']!r} after {r['context']!r}")
        if "differing_masks" in s:
            print(f"differing masks: {s['differing_masks']}")
            for d in s["first_differences"]:
                print(f"  {d}")
        m = s["mask_ms"]
        print(f"mask ms p50 {m['p50']} p95 {m['p95']} p99 {m['p99']}; "
              f"parser checks per position {s['parser_checks_per_position']}")
        if "canonical_fallbacks" in s:
            print(f"canonical tokenization on: {s['canonical_fallbacks']} steps fell back to the grammar's mask")
        for sk in s["skipped"]:
            print(f"  skipped {sk}")
    return 0 if report.ok else 1


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="mask-store", description="Build, inspect and verify syntaxlock mask stores.")
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the mask store of a model's tokenizer")
    b.add_argument("--model", default="default", help="default | a HF model directory | a .gguf file")
    b.add_argument("--out", help="output file (default: the per-user cache, where the server looks)")
    b.add_argument("--no-streamline", action="store_true",
                   help="build the full store, without the grammar analyses (default: streamlined, same masks)")
    b.add_argument("--no-merge-states", action="store_true",
                   help="one NFA state per lexer configuration (X, d), not per class of them (same masks, "
                        "more rows: to check the merge with `verify --compare-full`)")
    b.add_argument("--json", action="store_true")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    b.set_defaults(func=cmd_build)
    i = sub.add_parser("info", help="describe a store")
    i.add_argument("path")
    i.add_argument("--json", action="store_true")
    i.set_defaults(func=cmd_info)
    v = sub.add_parser("verify", help="walk files token by token: the true next token must always be allowed")
    v.add_argument("--store", required=True)
    v.add_argument("--compare-full", metavar="FULL_STORE", help="also check that this store gives identical masks")
    v.add_argument("--canonical", action="store_true",
                   help="with canonical tokenization: the masks also keep the token sequence the tokenizer's own")
    v.add_argument("--python-version", default=format_version(NEWEST), metavar="3.X",
                   help="the Python the files target, whose syntax the masks allow (default: %(default)s)")
    v.add_argument("--json", action="store_true")
    v.add_argument("files", nargs="+")
    v.set_defaults(func=cmd_verify)
    return ap


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
