"""The kernels' attention of a pass by its number of query rows (prints JSON).

    .venv/bin/python bench/attention_rows.py [--heads 9] [--kv-heads 3] [--dim 64] [--layers 30]
        [--lengths 1000,2000] [--rows 1,4,8,24] [--reps 20] [--spin]

`DecodeKernels.row_attention` of Q query rows over a float16 cache of L positions, once per
layer, each layer its own keys and values (as a pass reads them: from memory, not from a cache
level a single layer's would fit in); the default shape is SmolLM2-135M's (9 query heads, 3 key
heads of 64 dims, 30 layers). Per (L, Q): the milliseconds of all layers (p50 of `--reps`), and
per row. One row is a decoding step's attention, a few rows a speculative verification pass's,
24 a prompt chunk's as the work ahead computes it (`kv_cache.AHEAD_CHUNK`). The call's own cost
(Python, the parallel region's wake-up) is in every figure: `calls_ms` is that of a 8-position
cache. OpenMP's threads wait as the server's do unless `--spin`. Run it on two commits for a
before/after figure; the numbers move ±10% from run to run on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import p50  # noqa: E402


def attention_ms(kernels, caches, heads: int, rows: int, dim: int, reps: int) -> float:
    """p50 milliseconds of one `row_attention` per layer's cache, `rows` query rows."""
    import torch

    query = torch.randn(1, heads, rows, dim)

    def run():
        for key, value in caches:
            kernels.row_attention(query, key, value, dim ** -0.5)

    return p50(run, reps) * 1000


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--heads", type=int, default=9)
    ap.add_argument("--kv-heads", type=int, default=3)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--lengths", default="1000,2000")
    ap.add_argument("--rows", default="1,4,8,24")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--spin", action="store_true", help="libgomp's spinning waits instead of PASSIVE")
    args = ap.parse_args(argv)
    if not args.spin:
        from lsp_server.threads import use_fair_threads

        use_fair_threads()  # before torch loads, as the server does
    import torch

    from lsp_server.model.kernels.build import load

    kernels = load()
    if kernels is None:
        print(json.dumps({"error": "the kernels could not be built here"}))
        return 1
    torch.manual_seed(0)

    def caches(length: int):
        return [(torch.randn(1, args.kv_heads, length, args.dim).half(),
                 torch.randn(1, args.kv_heads, length, args.dim).half()) for _ in range(args.layers)]

    rows = [int(r) for r in args.rows.split(",")]
    report = {"isa": kernels.isa, "threads": torch.get_num_threads(), "spin": args.spin,
              "shape": {"heads": args.heads, "kv_heads": args.kv_heads, "dim": args.dim, "layers": args.layers},
              "calls_ms": round(attention_ms(kernels, caches(8), args.heads, 1, args.dim, args.reps), 3),
              "by_length": {}}
    for length in (int(n) for n in args.lengths.split(",")):
        kv = caches(length)
        got = {}
        for q in rows:
            ms = attention_ms(kernels, kv, args.heads, q, args.dim, args.reps)
            got[str(q)] = {"ms": round(ms, 3), "ms_per_row": round(ms / q, 3)}
        report["by_length"][str(length)] = got
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
