"""What steering a line start's first line by the rest of the file costs per request (prints
JSON): on `bench/line_insert.py`'s cut points (same seed), the request's own set-up
(`request.prepare`: prompt, matcher, rest of the file; no decoding), then, timed,
`header_steering.first_line` (the probes asked of `RestOfFile.keeps_valid`) and
`HeaderStarts.first_line` (the steering's blank-token paths), after the request's first
whole-file check (the empty answer's, timed apart: it reads the rest of the file once, which
every request's stop policy does anyway): per cursor kind, p50/p90/max ms,
the whole-file checks the probes made and the shapes they gave. Run it under the lock that
keeps other work off the machine for timings (a code revision at a time, e.g. PYTHONPATH at
another worktree for the one before).

    .venv/bin/python bench/steering_cost.py [--code stdlib|thirdparty] [--cuts 20] [--kinds col0 indent]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lsp_server.threads import use_fair_threads  # noqa: E402

use_fair_threads()  # before torch loads libgomp, as the CLI does

from _util import CODE_SETS  # noqa: E402
from line_insert import KINDS, case, cut_points  # noqa: E402


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(q * len(s)))], 2) if s else 0.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--code", default="stdlib", choices=CODE_SETS)
    ap.add_argument("--cuts", type=int, default=20)
    ap.add_argument("--seed", type=int, default=2030)
    ap.add_argument("--kinds", nargs="+", choices=KINDS, default=["col0", "indent"])
    ap.add_argument("--model", default="default")
    args = ap.parse_args(argv)

    from lsp_server.decoding import header_steering
    from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
    from lsp_server.decoding.request import prepare
    from lsp_server.decoding.results import RequestTimes
    from lsp_server.options import EngineOptions

    engine = CompletionEngine.load(EngineOptions(model=args.model, temperature=0.0))
    opts = engine.options
    report = {"code": args.code, "cuts": args.cuts, "seed": args.seed}
    cuts = cut_points(args.cuts, args.seed, args.code)
    for kind in args.kinds:
        ms, first, checks, shapes = [], [], [], Counter()
        for cut in cuts:
            doc, line, col = case(cut, kind)
            req = CompletionRequest.at(doc, line, col, document=cut["path"], short_first=False)
            before = req.before
            setup = prepare(engine.parts, req, opts, lambda: False, RequestTimes())
            if not hasattr(setup, "rest") or setup.rest.compat is None:
                shapes["no set-up"] += 1
                continue
            t0 = time.perf_counter()
            setup.rest.keeps_valid(b"")
            first.append((time.perf_counter() - t0) * 1000)
            n0 = setup.rest.compat.checks
            t0 = time.perf_counter()
            shape = header_steering.first_line(setup.rest, before)
            engine.parts.header_starts.first_line(shape, setup.heal, engine.tokenizer.encode)
            ms.append((time.perf_counter() - t0) * 1000)
            checks.append(setup.rest.compat.checks - n0)
            start = getattr(shape, "start", None)
            shapes[shape.fit.name + (f" {start.name}" if start is not None and shape.fit.name == "SHAPED" else "")] += 1
            engine.forget(cut["path"])
        report[kind] = {"requests": len(ms), "ms_p50": percentile(ms, 0.5), "ms_p90": percentile(ms, 0.9),
                        "ms_max": round(max(ms), 2) if ms else 0.0, "first_check_ms_p50": percentile(first, 0.5),
                        "first_check_ms_p90": percentile(first, 0.9), "checks_p50": percentile(checks, 0.5),
                        "checks_p90": percentile(checks, 0.9), "shapes": dict(shapes)}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
