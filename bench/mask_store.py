"""Benchmark of the mask store and the matcher (prints JSON).

    .venv/bin/python bench/mask_store.py [--tokens 1000000] [--model default]

Builds the store(s) for the model's tokenizer into a temporary directory (build seconds, MB,
load seconds, rows, unique masks), then walks stdlib files token by token (teacher forcing):
every true next token must be allowed (rejections are counted and listed), and the mask time
per token is reported (p50/p95/p99).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import read_source, stdlib_files  # noqa: E402

from grammar_tools.lexer_automaton import load_lexer_automaton  # noqa: E402
from mask_store.loading import build_store, open_store  # noqa: E402
from mask_store.matcher import CompiledGrammar  # noqa: E402
from mask_store.verify import verify_files  # noqa: E402
from mask_store.vocabulary import load_tokenizer  # noqa: E402


def _build(tok, model, streamline: bool, tmp: Path) -> dict:
    t0 = time.perf_counter()
    store = build_store(tok, model, streamline=streamline, progress=False)
    build_s = time.perf_counter() - t0
    path = store.save(tmp / f"store-{'streamlined' if streamline else 'full'}.safetensors")
    t0 = time.perf_counter()
    loaded = open_store(path, tok)
    load_s = time.perf_counter() - t0
    info = loaded.info()
    return {
        "store": loaded,
        "path": str(path),
        "build_seconds": round(build_s, 2),
        "file_mb": round(os.path.getsize(path) / 1e6, 3),
        "load_seconds": round(load_s, 3),
        "rows": info["rows"],
        "logical_rows": info["logical_rows"],
        "unique_masks": info["unique_masks"],
        "nfa_states": info["nfa_states"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="default")
    ap.add_argument("--tokens", type=int, default=1_000_000)
    ap.add_argument("--include-tests", action="store_true", help="walk the stdlib's tests too")
    args = ap.parse_args()

    tok = load_tokenizer(args.model)
    load_lexer_automaton()
    out: dict = {"benchmark": "mask_store", "model": args.model, "vocab_size": tok.vocab.size}
    with tempfile.TemporaryDirectory() as tmp:
        full = _build(tok, args.model, False, Path(tmp))
        out["full"] = {k: v for k, v in full.items() if k not in ("store", "path")}
        compiled = CompiledGrammar(full["store"], tok.vocab)
        files = stdlib_files(include_tests=args.include_tests)
        random.Random(0).shuffle(files)
        chosen, total = [], 0
        for p in files:
            data = read_source(p)
            if data is None:
                continue
            chosen.append(p)
            total += len(tok.encode(data.decode()))
            if total >= args.tokens:
                break
        t0 = time.perf_counter()
        report = verify_files(compiled, tok.encode, chosen)
        s = report.summary()
        out["teacher_forced"] = {
            "files": s["files"],
            "tokens": s["tokens"],
            "positions": s["positions"],
            "rejections": s["rejections"],
            "first_rejections": s["first_rejections"],
            "mask_ms": s["mask_ms"],
            "parser_checks_per_position": s["parser_checks_per_position"],
            "cache_hit_rate": round(compiled.stats["cache_hits"] / max(compiled.stats["cache_hits"] + compiled.stats["masks"], 1), 3),
            "walk_seconds": round(time.perf_counter() - t0, 1),
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
