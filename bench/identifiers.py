"""Names that exist (issue 35, docs/identifiers.md): completions with `identifiers` off, bias and
constrain on the same cut points (completion_quality.py's: the cursor's line cut, the following
lines kept), greedy, the names analysis made ahead of each request as work-ahead makes it.

Per mode, over the accepted completions (non-empty answers whose file then compiles):
- undefined_names_per_100: pyflakes' "undefined name" messages in the file after accepting
  minus those before (the cut file, or the original file where the cut one does not compile),
  per 100 accepted completions;
- unknown_attributes_per_100: `receiver.attr` written by the completion where the receiver is
  closed at the cursor (a module, a class of the file, `self` in it) and jedi lists no `attr`;
and over every cut point: exact_match and similarity of the first line against the original
rest of the line, first_identifier_match (the first identifier written, as the original's),
latency_ms p50/p90 of the request (the analysis already made), names_ms p50/p90 (the time the
guide took inside it); analysis_ms p50/p90 (made ahead, off the request path). Each cut point
runs the modes in a rotated order (the first one in turn), so no mode always pays first.

    .venv/bin/python bench/identifiers.py --cuts 100 --code stdlib|thirdparty [--modes off bias constrain]

A long measurement is run in parts (`--start 0 --cuts 40 --out a.jsonl`, `--start 40 --cuts 80
--out b.jsonl`: cut points 0-39 and 40-79 of the same seed's list) and summarized together:
`bench/identifiers.py --merge a.jsonl b.jsonl`. Parts that ran other modes on the same cut points
are joined (`--modes off` in one part, `--modes constrain` in another: one row per cut point; a
later file's mode replaces an earlier one's).

`undefined_binding_lost` counts the undefined names the completion never writes: it replaced
what bound a name the rest of the file reads (counted where the cut file does not compile, so
the original file is the one compared with).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from completion_quality import cut_points, edit_similarity, percentile  # noqa: E402  (fair threads set there)
from _util import CODE_SETS  # noqa: E402
from grammar_tools.parsing.cpython_check import parsed_tree  # noqa: E402

_IDENT = re.compile(r"[^\W\d]\w*")
_ATTR = re.compile(r"((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)\.([A-Za-z_]\w*)")


def undefined_names(text: str) -> Counter | None:
    """pyflakes' undefined names of a file (None: CPython's parser refuses it)."""
    from pyflakes import checker, messages

    tree = parsed_tree(text, "<cut>")
    if tree is None:
        return None
    w = checker.Checker(tree, filename="<cut>")
    return Counter(m.message_args[0] for m in w.messages if isinstance(m, messages.UndefinedName))


def unknown_attributes(head: str, completion: str, scope) -> int:
    """`receiver.attr` the completion writes (the attribute ends inside it) on a closed receiver
    whose attributes jedi lists without `attr`."""
    line = head + completion.split("\n")[0]
    n = 0
    for m in _ATTR.finditer(line):
        if m.end(2) <= len(head):
            continue
        receiver = scope.receivers.get(m.group(1).encode()) if scope else None
        if receiver is not None and receiver.closed and m.group(2).encode() not in receiver.attributes:
            n += 1
    return n


def why_undefined(before: str, completion: str, names: list[str], scope, ready: bool) -> list[str]:
    """Where each undefined name the completion introduced came from: the place its first
    occurrence in the completion was written (`slots.SlotKind`; `line 2+`: not on the first
    line; `known`: the analysis lists it; `not ready`: the guide was not used), or `binding lost`
    (the completion never writes it: it replaced what bound a name the rest of the file reads)."""
    from lsp_server.decoding.identifiers.slots import slot_at

    out = []
    for name in names:
        m = re.search(rf"(?<![\w.]){re.escape(name)}\b", completion)
        if m is None:
            out.append(f"{name}: binding lost")
            continue
        slot = slot_at((before + completion[: m.start()]).encode()[-4000:])
        where = [slot.kind.value] + (["line 2+"] if "\n" in completion[: m.start()] else [])
        if not ready:
            where.append("not ready")
        if scope is not None and name.encode() in scope.names:
            where.append("known")
        out.append(f"{name}: {', '.join(where)}")
    return out


def first_identifier(text: str) -> str | None:
    m = _IDENT.search(text)
    return m.group() if m else None


def run_cut(engine, cut: dict, modes: list[str], max_tokens: int, turn: int = 0) -> dict:
    from lsp_server.decoding.engine import CompletionRequest

    lines = Path(cut["path"]).read_text(encoding="utf-8").split("\n")
    i, ch = cut["line"], cut["character"]
    reference = lines[i][ch:].rstrip()
    doc = "\n".join(lines[:i] + [lines[i][:ch]] + lines[i + 1 :])
    # the full prompt window, as the work ahead leaves it (not a first request's short one)
    request = CompletionRequest.at(doc, i, ch, document=cut["path"], max_tokens=max_tokens, short_first=False)
    t0 = time.perf_counter()
    engine.names_ahead(request, wait=300)  # as work-ahead makes it while the user pauses
    analysis_ms = (time.perf_counter() - t0) * 1000
    scope = engine.names.ready(cut["path"], doc, i)
    engine.complete(CompletionRequest.at(doc, i, ch, document=cut["path"], max_tokens=1, short_first=False),
                    options=engine.options.updated(identifiers="off"))  # the KV cache warm, as typing leaves it
    before = undefined_names(doc)
    if before is None:
        before = undefined_names("\n".join(lines)) or Counter()
    out = {"analysis_ms": analysis_ms, "receivers": len(scope.receivers) if scope else 0}
    for mode in modes[turn % len(modes) :] + modes[: turn % len(modes)]:  # each mode first in turn (latency)
        opts = engine.options.updated(identifiers=mode)
        t0 = time.perf_counter()
        r = engine.complete(request, options=opts)
        latency = (time.perf_counter() - t0) * 1000
        spliced = "\n".join(lines[:i] + [lines[i][:ch] + r.text] + lines[i + 1 :])
        after = undefined_names(spliced) if r.text.strip() else None
        first = r.text.split("\n")[0].rstrip()
        out[mode] = {
            "text": r.text,
            "accepted": after is not None,
            "undefined": sum((after - before).values()) if after is not None else 0,
            "undefined_names": sorted(after - before) if after is not None else [],
            "why": why_undefined("\n".join(lines[:i] + [lines[i][:ch]]), r.text, sorted(after - before), scope,
                                 mode == "off" or r.figures.names_ready) if after is not None else [],
            "unknown_attributes": unknown_attributes(lines[i][:ch], r.text, scope) if after is not None else 0,
            "exact": first == reference,
            "similarity": edit_similarity(first, reference),
            "first_identifier": first_identifier(first) == first_identifier(reference) if reference else not first,
            "latency_ms": latency,
            "names_ready": r.figures.names_ready,
            "shaped": r.figures.names_shaped,
            "masked": r.figures.names_masked,
            "names_ms": r.figures.names_ms,
        }
    engine.forget(cut["path"])
    return out


def summarize(rows: list[dict], mode: str) -> dict:
    mine = [r[mode] for r in rows]
    accepted = [m for m in mine if m["accepted"]]

    def per100(key: str) -> float | None:
        return round(100 * sum(m[key] for m in accepted) / len(accepted), 2) if accepted else None

    lat = [m["latency_ms"] for m in mine]
    return {
        "cuts": len(mine),
        "accepted": len(accepted),
        "undefined_names_per_100": per100("undefined"),
        "undefined_names": sum(m["undefined"] for m in accepted),
        "undefined_binding_lost": sum(w.endswith("binding lost") for m in accepted for w in m["why"]),
        "unknown_attributes_per_100": per100("unknown_attributes"),
        "exact_match": round(sum(m["exact"] for m in mine) / len(mine), 4),
        "similarity": round(sum(m["similarity"] for m in mine) / len(mine), 4),
        "first_identifier_match": round(sum(m["first_identifier"] for m in mine) / len(mine), 4),
        "latency_ms_p50": round(percentile(lat, 50), 1),
        "latency_ms_p90": round(percentile(lat, 90), 1),
        "steps_shaped": sum(m["shaped"] for m in mine),
        "steps_masked": sum(m["masked"] for m in mine),
        "names_ready": sum(m["names_ready"] for m in mine),
        "names_ms_p50": round(percentile([m["names_ms"] for m in mine], 50), 2),
        "names_ms_p90": round(percentile([m["names_ms"] for m in mine], 90), 2),
    }


def report_of(rows: list[dict], code: str, seed: int, model: str | None, bias_nats: float | None,
              modes: list[str]) -> dict:
    modes = [m for m in modes if all(m in r for r in rows)]
    analysis = [r["analysis_ms"] for r in rows[1:]] or [r["analysis_ms"] for r in rows]  # the first loads jedi
    report = {
        "code": code,
        "seed": seed,
        "model": model,
        "bias_nats": bias_nats,
        "files": len({r["path"] for r in rows if "path" in r}),
        "analysis_ms_p50": round(percentile(analysis, 50), 1),
        "analysis_ms_p90": round(percentile(analysis, 90), 1),
        **{m: summarize(rows, m) for m in modes},
    }
    if "off" in modes:
        base = report["off"]["latency_ms_p50"]
        for m in modes:
            if m != "off" and base:
                report[m]["latency_p50_vs_off"] = round(report[m]["latency_ms_p50"] / base, 3)
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cuts", type=int, default=100, help="the seed's first CUTS cut points")
    ap.add_argument("--start", type=int, default=0, help="measure cut points START.. of them (a part)")
    ap.add_argument("--merge", nargs="+", metavar="JSONL", help="summarize the parts' --out files (nothing run)")
    ap.add_argument("--code", default="stdlib", choices=CODE_SETS)
    ap.add_argument("--seed", type=int, default=35)
    ap.add_argument("--model", default="default")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--modes", nargs="+", default=["off", "bias", "constrain"], choices=["off", "bias", "constrain"])
    ap.add_argument("--out", help="one JSON line per cut point here")
    ap.add_argument("--bias-nats", type=float, help="the guide's bias (default: guide.BIAS_NATS), to measure another")
    args = ap.parse_args(argv)
    if args.merge:
        joined: dict[tuple, dict] = {}
        for f in args.merge:
            for line in Path(f).read_text().splitlines():
                if line.strip():
                    row = json.loads(line)
                    joined.setdefault((row["path"], row["line"], row["character"]), {}).update(row)
        rows = list(joined.values())
        print(json.dumps(report_of(rows, args.code, args.seed, None, None, args.modes), indent=2))
        return 0
    from lsp_server.decoding.identifiers import guide

    if args.bias_nats is not None:
        guide.BIAS_NATS = args.bias_nats

    from lsp_server.decoding.engine import CompletionEngine
    from lsp_server.options import EngineOptions

    engine = CompletionEngine.load(EngineOptions(model=args.model, max_tokens=args.max_tokens))
    cuts = cut_points(args.cuts, args.seed, args.code)[args.start :]
    rows = []
    out = open(args.out, "w") if args.out else None
    for k, cut in enumerate(cuts):
        row = {**cut, **run_cut(engine, cut, args.modes, args.max_tokens, args.start + k)}
        rows.append(row)
        if out:
            out.write(json.dumps(row) + "\n")
            out.flush()
        if (k + 1) % 10 == 0:
            print(f"{k + 1}/{len(cuts)} cut points", file=sys.stderr, flush=True)
    report = report_of(rows, args.code, args.seed, engine.describe()["model"], guide.BIAS_NATS, args.modes)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
