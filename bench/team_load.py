"""Many editors on one team server (vLLM with the grammar inside; docs/team.md), prints JSON.

    .venv/bin/python bench/team_load.py [--editors 1,2,4,8] [--docs 3] [--keys 3] [--compare]
                                        [--failover] [--url URL] [--port 8011]

Starts `syntaxlock team-serve --model default` from .venv-team/ (`make team`), unless `--url`
names a running one, and waits until it answers. Each simulated editor is a `TeamEngine` (the
local server's engine in team mode: prompt, parse, whole-file checks and the compiler gate
here, the model's part on the team server) on a thread of its own, working through its own
cut points (a line inside a function cut at a random column, from the stdlib, as
`bench/lsp_latency.py` makes them): the document opened and its cursor reported (the work
ahead: the team server computes the prompt's KV cache), `--idle` seconds of looking, the first
request at the cut, then `--keys` keystrokes of
the real line, a request after each (warm: the same document, its prompt in the server's
prefix cache, or served by typing through the last suggestion without the model). For N
editors at once: p50/p90 of first and warm latency (ms, from the request to its answer), the
model answers per second over the run's wall time, the offered items whose file CPython
compiles, and the grammar processor's time per request per step and per request (the server
appends them to a file: `SYNTAXLOCK_TEAM_STATS`).

`--compare`: the same first cut points decoded by the local engine (greedy, the same default
model in this process, the names analysis off as in team mode): the share of identical answers
and the differences. `--failover`: two team servers behind vllm-router (consistent hashing on
the document's URI), 8 editors, one replica killed (SIGKILL) a few seconds in: requests lost
(no answer, or an error) and answered, and where each document went.

Take timings alone on the machine: `flock -x /tmp/cpu.lock .venv/bin/python bench/team_load.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import stats_ms  # noqa: E402
from lsp_latency import Cut, cut_points  # noqa: E402

from grammar_tools.parsing.cpython_check import compiles  # noqa: E402

from lsp_server.decoding.engine import CompletionRequest  # noqa: E402
from lsp_server.options import EngineOptions  # noqa: E402
from lsp_server.positions import offset_at  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TEAM_PY = ROOT / ".venv-team" / "bin" / "python"
ROUTER = ROOT / ".venv-team" / "bin" / "vllm-router"


# ---------------------------------------------------------------------- servers

SERVE_ARGS: list[str] = []  # more team-serve arguments (--serve-args)


def start_team_server(port: int, stats: Path, log: Path, kv_gb: int = 2) -> subprocess.Popen:
    env = dict(os.environ, SYNTAXLOCK_TEAM_STATS=str(stats), PYTHONPATH=str(ROOT))
    return subprocess.Popen([str(TEAM_PY), "-m", "lsp_server.cli", "team-serve", "--model", "default",
                             "--port", str(port), "--kv-cache-gb", str(kv_gb), *SERVE_ARGS],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True)


def start_router(workers: list[str], port: int, log: Path) -> subprocess.Popen:
    return subprocess.Popen([str(ROUTER), "--worker-urls", *workers, "--policy", "consistent_hash",
                             "--host", "127.0.0.1", "--port", str(port),
                             "--health-check-interval-secs", "1", "--health-failure-threshold", "1",
                             "--cb-failure-threshold", "1", "--retry-max-retries", "3",
                             "--retry-initial-backoff-ms", "20"],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)


def wait_ready(url: str, proc: subprocess.Popen | None, timeout: float = 1200.0) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server at {url} exited ({proc.returncode}) before it was ready")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2) as r:
                if r.status == 200:
                    return time.perf_counter() - t0
        except OSError:
            pass
        time.sleep(1.0)
    raise RuntimeError(f"the server at {url} was not ready after {timeout:.0f} s")


def stop(proc: subprocess.Popen | None, sig=signal.SIGTERM) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
        proc.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)


# ---------------------------------------------------------------------- editors

class Loaded:
    """The mask store and tokenizer every simulated editor shares (as each editor's own server
    would load them), loaded once."""

    def __init__(self) -> None:
        from mask_store.loading import load_compiled

        self.compiled, self.tok = load_compiled("default")

    def engine(self, url: str):
        from lsp_server.team.client import TeamClient
        from lsp_server.team.remote_engine import TeamEngine

        opts = EngineOptions(team_server=url, identifiers="off")
        return TeamEngine(opts, self.compiled, self.tok, TeamClient(url))


def _ask(engine, text: str, line: int, col: int, uri: str) -> tuple[float, object]:
    req = CompletionRequest(text, cursor=offset_at(text, line, col), document=uri)
    t0 = time.perf_counter()
    result = engine.complete(req)
    return time.perf_counter() - t0, result


def _valid(text: str, line: int, col: int, result) -> bool | None:
    """Whether the file with the offered item compiles (None: nothing offered)."""
    if not result.text:
        return None
    off = offset_at(text, line, col)
    return compiles(text[: result.start] + result.text + text[result.end :]) if result.start == off else False


def run_editor(engine, cuts: list[Cut], keys: int, tag: str, out: dict, idle: float = 0.0) -> None:
    for k, cut in enumerate(cuts):
        uri = f"file:///team/{tag}/{k}/{cut.name}"
        text, line, col = cut.doc, cut.line, cut.col
        if idle > 0:  # the document opened, the cursor reported: the work ahead, then the user looks
            engine.prefill(CompletionRequest(text, cursor=offset_at(text, line, col), document=uri))
            time.sleep(idle)
        dt, r = _ask(engine, text, line, col, uri)
        out["first"].append(dt)
        out["results"].append({"cut": cut.name, "phase": "first", "text": r.text, "valid": _valid(text, line, col, r),
                               "stop": str(r.stop_reason)})
        for ch in cut.rest[:keys]:
            off = offset_at(text, line, col)
            text = text[:off] + ch + text[off:]
            col += 1
            dt, r = _ask(engine, text, line, col, uri)
            out["warm"].append(dt)
            out["typed_through"] += r.typed_through > 0
            if not r.typed_through and str(r.stop_reason) != "cancelled":
                out["warm_model"].append(dt)  # asked of the team server (not typed through the last suggestion)
            out["results"].append({"cut": cut.name, "phase": "warm", "text": r.text,
                                   "valid": _valid(text, line, col, r), "stop": str(r.stop_reason)})


def editors_run(loaded: Loaded, url: str, cuts: list[Cut], n: int, docs: int, keys: int, stats: Path | None,
                tag: str, during=None, idle: float = 0.0) -> dict:
    """n editors at once, each on its own `docs` cut points."""
    engines = [loaded.engine(url) for _ in range(n)]
    outs = [{"first": [], "warm": [], "warm_model": [], "results": [], "typed_through": 0} for _ in range(n)]
    seen = _stats_lines(stats)
    threads = [threading.Thread(target=run_editor, args=(engines[i], cuts[i * docs : (i + 1) * docs], keys,
                                                         f"{tag}-{i}", outs[i], idle)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    if during is not None:
        during()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    first = [x for o in outs for x in o["first"]]
    warm = [x for o in outs for x in o["warm"]]
    warm_model = [x for o in outs for x in o["warm_model"]]
    results = [x for o in outs for x in o["results"]]
    answered = sum(e.calls["answered"] for e in engines)
    failed = sum(e.calls["failed"] for e in engines)
    reasons: dict[str, int] = {}
    for e in engines:
        for k, v in e.failures.items():
            reasons[k] = reasons.get(k, 0) + v
    offered = [r for r in results if r["valid"] is not None]
    steps = _stats_lines(stats)[len(seen):] if stats is not None else []
    step_ms = [m for s in steps for m in s["ms"]]
    req_ms = [sum(s["ms"]) for s in steps]
    return {
        "editors": n, "requests": len(results), "wall_s": round(wall, 2),
        "first": stats_ms(first) if first else None, "warm": stats_ms(warm) if warm else None,
        "warm_model": stats_ms(warm_model) if warm_model else None,
        "model_answers": answered, "model_answers_per_s": round(answered / wall, 3),
        "requests_per_s": round(len(results) / wall, 3), "team_calls_failed": failed, "failures": reasons,
        "idle_s_before_first": idle, "warmed": sum(e.calls["warmed"] for e in engines),
        "typed_through": sum(o["typed_through"] for o in outs),
        "offered": len(offered), "offered_compile": sum(bool(r["valid"]) for r in offered),
        "processor_ms_per_step": _pcts(step_ms), "processor_ms_per_request": _pcts(req_ms),
        "processor_steps_per_request": _pcts([s["steps"] for s in steps]),
        "_results": results,
    }


def _pcts(values) -> dict | None:
    import numpy as np

    if not values:
        return None
    a = np.asarray(values, dtype=float)
    return {"n": int(a.size), "p50": round(float(np.percentile(a, 50)), 4), "p90": round(float(np.percentile(a, 90)), 4),
            "mean": round(float(a.mean()), 4)}


def _stats_lines(path: Path | None) -> list[dict]:
    if path is None or not path.is_file():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


# ---------------------------------------------------------------------- comparison

def compare_local(cuts: list[Cut], team_first: dict[str, tuple[str, str]]) -> dict:
    """The local engine's greedy answers at the same first cut points against the team's."""
    from lsp_server.decoding.engine import CompletionEngine

    engine = CompletionEngine.load(EngineOptions(identifiers="off"))
    same, diffs = 0, []
    for k, cut in enumerate(cuts):
        if cut.name not in team_first:
            continue
        _, r = _ask(engine, cut.doc, cut.line, cut.col, f"file:///local/{k}/{cut.name}")
        team_text, team_stop = team_first[cut.name]
        if r.text == team_text:
            same += 1
        else:
            diffs.append({"cut": cut.name, "local": r.text, "team": team_text, "local_stop": str(r.stop_reason),
                          "team_stop": team_stop})
    n = same + len(diffs)
    return {"cut_points": n, "identical": same, "identical_share": round(same / n, 3) if n else None,
            "differences": diffs}


# ---------------------------------------------------------------------- main

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--editors", default="1,2,4,8")
    ap.add_argument("--docs", type=int, default=3, help="cut points per editor (default 3)")
    ap.add_argument("--keys", type=int, default=3, help="keystrokes after each first request (default 3)")
    ap.add_argument("--seed", type=int, default=45)
    ap.add_argument("--idle", type=float, default=2.0,
                    help="seconds each editor looks at a document before its first request, while the work "
                         "ahead has the team server prefill its prompt (default 2; 0: ask at once)")
    ap.add_argument("--url", help="a running team server (default: start one)")
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--compare", action="store_true", help="greedy answers against the local engine")
    ap.add_argument("--failover", action="store_true", help="two replicas behind vllm-router, one killed")
    ap.add_argument("--kill-after", type=float, default=8.0, help="seconds into the failover run (default 8)")
    ap.add_argument("--skip-load", action="store_true", help="only --compare / --failover")
    ap.add_argument("--serve-args", default="", help="more team-serve arguments, e.g. \"--threads 2\"")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args()
    SERVE_ARGS[:] = args.serve_args.split()
    out_args = {"serve_args": args.serve_args, "idle": args.idle, "docs": args.docs, "keys": args.keys}
    counts = [int(x) for x in args.editors.split(",") if x]
    tmp = Path(tempfile.mkdtemp(prefix="team-load-"))
    out: dict = {"machine": {"cpus": os.cpu_count(), "load_avg_before": os.getloadavg()}, "args": out_args}
    loaded = Loaded()
    procs: list[subprocess.Popen] = []
    try:
        if not args.skip_load or args.compare:
            stats = tmp / "steps.jsonl" if not args.url else None
            url = args.url or f"http://127.0.0.1:{args.port}"
            if not args.url:
                procs.append(start_team_server(args.port, stats, tmp / "server.log"))
                out["server_ready_s"] = round(wait_ready(url, procs[-1]), 1)
            cuts = cut_points(max(counts) * args.docs, args.seed, "stdlib")
            editors_run(loaded, url, cuts, 1, 1, 0, stats, "warmup")  # compiles, caches: once
            runs = []
            for n in counts if not args.skip_load else [1]:
                runs.append(editors_run(loaded, url, cuts, n, args.docs, args.keys, stats, f"n{n}", idle=args.idle))
            one = runs[0]
            for r in runs:
                r["answers_per_s_vs_one"] = round(r["model_answers_per_s"] / one["model_answers_per_s"], 2)
                if r["warm"] and one["warm"]:
                    r["warm_p90_vs_one"] = round(r["warm"]["p90_ms"] / one["warm"]["p90_ms"], 2)
                if r["warm_model"] and one["warm_model"]:
                    r["warm_model_p90_vs_one"] = round(r["warm_model"]["p90_ms"] / one["warm_model"]["p90_ms"], 2)
            out["load"] = [{k: v for k, v in r.items() if k != "_results"} for r in runs]
            offered = [x for r in runs for x in r["_results"] if x["valid"] is not None]
            out["invalid_offers"] = [x for x in offered if not x["valid"]][:10]
            if args.compare:
                # the largest run's first answers (every editor's cut points; batched with the others)
                first = {x["cut"]: (x["text"], x["stop"]) for x in runs[-1]["_results"] if x["phase"] == "first"}
                for p in procs:
                    stop(p)
                procs.clear()
                out["compare"] = compare_local(cuts, first)
        if args.failover:
            for p in procs:
                stop(p)
            procs.clear()
            out["failover"] = failover(loaded, args, tmp)
    finally:
        for p in procs:
            stop(p)
    out["machine"]["load_avg_after"] = os.getloadavg()
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


def failover(loaded: Loaded, args, tmp: Path) -> dict:
    """8 editors through vllm-router over two replicas; one replica killed during the run."""
    ports = [args.port + 1, args.port + 2]
    replicas = [start_team_server(p, tmp / f"steps-{p}.jsonl", tmp / f"replica-{p}.log", kv_gb=1) for p in ports]
    router = None
    try:
        for p, proc in zip(ports, replicas):
            wait_ready(f"http://127.0.0.1:{p}", proc)
        router = start_router([f"http://127.0.0.1:{p}" for p in ports], args.port + 3, tmp / "router.log")
        url = f"http://127.0.0.1:{args.port + 3}"
        wait_ready(url, router, 60)
        cuts = cut_points(8 * args.docs, args.seed + 1, "stdlib")
        editors_run(loaded, url, cuts, 1, 1, 0, None, "fo-warmup")
        killed = {}

        def kill_one():
            time.sleep(args.kill_after)
            killed["at_s"] = args.kill_after
            stop(replicas[0], signal.SIGKILL)

        run = editors_run(loaded, url, cuts, 8, args.docs, args.keys, None, "failover", during=kill_one,
                          idle=args.idle)
        lost = [x for x in run["_results"] if x["stop"] == "cancelled"]
        return {"replicas": ports, "killed": ports[0], **killed,
                "requests": run["requests"], "answered": run["requests"] - len(lost), "lost_or_errored": len(lost),
                "team_calls_failed": run["team_calls_failed"], "failures": run["failures"],
                "first": run["first"], "warm": run["warm"],
                "offered": run["offered"], "offered_compile": run["offered_compile"],
                "router_log_tail": (tmp / "router.log").read_text(errors="replace")[-1500:]}
    finally:
        stop(router)
        for p in replicas:
            stop(p)


if __name__ == "__main__":
    main()
