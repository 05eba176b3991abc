"""End-to-end inline completion latency through the real server over stdio (prints JSON).

    .venv/bin/python bench/lsp_latency.py [--cuts 40] [--scenarios cuts,typing,two,busy,leads]
                                          [--code both|stdlib|thirdparty] [--idle 3] [--no-work-ahead]
                                          [--client cursor|plain] [--lead 2] [--pause 0.5] [--no-anchor]

Each scenario starts its own `syntaxlock serve` (the CLI's fair thread settings included) and
waits for it to be ready. Latency is measured in the client, from sending a request to its
answer; figures are p50/p90/p95/p99 in ms, with the machine's load average.

- `cuts`: for each cut point (a line inside a function cut at a random column, the rest of the
  line removed, the following lines kept; from the stdlib and/or third-party wheels):
  - first: open the document, report the cursor (`syntaxlock/cursor`, as both editor clients
    do), stay idle `--idle` seconds, ask (the server prefilled the prompt meanwhile);
  - warm: type the next 1-3 characters of the real line and ask again;
  - after_accept: accept that suggestion (the edit and `syntaxlock.accepted`) and ask at the end
    of it (editors ask again after an accept); after_enter: `--enter-after` seconds after the
    accept, press Enter (the new line indented as editors do by default) and ask.
  The very first request of the process (one-time costs) is reported apart. `warm_time_went`
  (here and in `leads`): where the warm requests' time went, part by part, from the server's
  log (`where_the_time_went`, docs/latency.md), and how much of it the serving thread spent off
  the CPU (`off_the_cpu`: in the Python parts, waiting for the interpreter lock or a core; in
  the model's passes, at the kernels' barriers).
- `typing`: a typing session of `--typing-docs` documents: each opened, its cursor reported,
  `--typing-idle` seconds of looking, then the rest of a real line typed at `--cps` characters
  per second, one didChange + request per key without waiting for answers. Reports the share of
  the prompt tokens the engine prepared (for every request, superseded ones included, and the
  work ahead) that it found in the KV cache,
  how soon a superseded request is answered, the wait after the last key of each line for its
  answer, when the server's CPU goes idle after the session's last key (its CPU time from
  /proc), its peak memory and the KV caches' memory against the cap.
- `two`: the typing session in two servers at once, against the same session in one server
  alone (fresh servers each time): each one's wait after the last key, alone and together.
- `leads`: the first request as users meet it, for one client kind (`--client`): `cursor` (the
  project's clients: the document opened and its cursor reported, `--lead` seconds later minus
  `--pause` one character typed (reported again), `--pause` seconds later the request) or `plain`
  (no `syntaxlock/cursor`, as Helix, Zed, Emacs, Sublime: the document opened, one character
  typed at once, the request `--lead` seconds later). Then warm (1-3 more characters typed, ask
  at once), accept-then-continue (accept, ask at its end; `--enter-after` s later press Enter and
  ask). Quality of every answer: the file with it compiles (CPython), exact match and edit
  similarity of the completed cursor line against the real one; per generated token, from the
  server's log (decode time, checks and searches included, over sampled + forced tokens).
- `busy`: cold first requests without working ahead (`workAhead: false`, a whole prompt each),
  on a quiet machine and while two CPU-bound processes run (load 2-4 on 2 cores).

Units of the machine: before the scenarios, alone, llama.cpp decodes on the same GGUF file in a
child process (`llama_cpp_anchor.py`: 64 tokens after 512 of stdlib code, 2 threads, greedy, p50
of 3); its ms per token is L (`anchor`, with the load average then), and every figure in ms is
also given in units of L (`p50_ms` -> `p50_L`): machines of one kind differ up to 2x, so the
targets are set in L (docs/latency.md). `--no-anchor` skips it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import CODE_SETS, code_files, read_source, relative_name, stats_ms  # noqa: E402

from completion_quality import edit_similarity  # noqa: E402
from llama_cpp_anchor import anchor_in_child, in_units  # noqa: E402

from grammar_tools.parsing.cpython_check import compiles  # noqa: E402

from lsprotocol import types  # noqa: E402
from pygls.lsp.client import LanguageClient  # noqa: E402

from lsp_server.decoding.results import off_cpu_in, parts_in  # noqa: E402
from lsp_server.positions import offset_at  # noqa: E402
from lsp_server.server.work_ahead import after_enter  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Cut:
    name: str  # code set and path
    doc: str  # the document, the cursor's line cut at the cursor
    line: int
    col: int
    rest: str  # the rest of the real line


def cut_points(n: int, seed: int, code: str, min_before: int = 0) -> list[Cut]:
    """n cut points, half from each code set with `both` (with at least `min_before` characters
    before the cursor)."""
    sets = {kind: code_files(kind) for kind in (CODE_SETS if code == "both" else (code,))}
    rng = random.Random(seed)
    per = {k: -(-n // len(sets)) for k in sets}
    out = []
    for kind, files in sets.items():
        files = list(files)
        rng.shuffle(files)
        got = 0
        for path in files:
            if got >= per[kind] or len(out) >= n:
                break
            data = read_source(path)
            if data is None or len(data) > 200_000:
                continue
            lines = data.decode().splitlines(keepends=True)
            body = [i for i, ln in enumerate(lines)
                    if ln.startswith("        ") and ln.strip() and not ln.lstrip().startswith(("#", '"', "'"))
                    and len(ln.strip()) >= 8 and sum(map(len, lines[:i])) >= min_before]
            if not body:
                continue
            i = rng.choice(body)
            ln = lines[i].rstrip("\r\n")
            indent = len(ln) - len(ln.lstrip())
            col = rng.randint(indent + 1, len(ln) - 3)
            doc = "".join(lines[:i]) + ln[:col] + "\n" + "".join(lines[i + 1 :])
            out.append(Cut(f"{kind}/{relative_name(path)}", doc, i, col, ln[col:]))
            got += 1
    return out


def utf16(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


# --- a client driving one server ---------------------------------------------------------------


class Server:
    """One `syntaxlock serve` over stdio and the client that drives it."""

    def __init__(self, args, options: dict, env: dict | None = None, tag: str = "",
                 folders: tuple[str, ...] = ()) -> None:
        self.args, self.options, self.env, self.tag = args, options, env, tag
        self.folders = folders  # the workspace folders the client names (URIs)
        self.client = LanguageClient("syntaxlock-bench", "0")
        self.version: dict[str, int] = {}
        self.log_file = Path(tempfile.mkdtemp(prefix="syntaxlock-bench-")) / "server.log"
        self.asked: list[dict] = []  # every timed request: phase, document, when sent (wall clock), ms

    async def start(self) -> float:
        ready, failed = asyncio.Event(), []

        @self.client.feature("syntaxlock/status")
        def _status(ls, params):
            state = params["state"] if isinstance(params, dict) else params.state
            msg = params["message"] if isinstance(params, dict) else params.message
            if state == "ready":
                ready.set()
            elif state == "error":
                failed.append(msg)
                ready.set()

        @self.client.feature(types.WINDOW_LOG_MESSAGE)
        def _log(ls, params):  # the server's log is read from its log file instead
            pass

        @self.client.feature(types.WINDOW_SHOW_MESSAGE)
        def _show(ls, params):
            print(f"server says: {params.message}", file=sys.stderr)

        cmd = [sys.executable, "-m", "lsp_server.cli", "serve", "--log-level", "INFO", "--log-file", str(self.log_file)]
        t0 = time.perf_counter()
        await self.client.start_io(*cmd, env=self.env or dict(os.environ), cwd=str(ROOT))
        self.drain = asyncio.ensure_future(self._drain(self.client._server.stderr))
        await self.client.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(window=types.WindowClientCapabilities(work_done_progress=False)),
            initialization_options=self.options, process_id=os.getpid(),
            workspace_folders=[types.WorkspaceFolder(uri, uri.rsplit("/", 1)[-1]) for uri in self.folders] or None))
        self.client.initialized(types.InitializedParams())
        await asyncio.wait_for(ready.wait(), 1800)
        if failed:
            raise SystemExit(f"the server could not load the model: {failed[0]}")
        return time.perf_counter() - t0

    @property
    def pid(self) -> int:
        return self.client._server.pid

    async def _drain(self, stream) -> None:
        """Read the server's stderr so that the pipe never fills up."""
        while line := await stream.readline():
            if self.args.verbose:
                sys.stderr.buffer.write(line)

    async def stop(self) -> None:
        await self.client.shutdown_async(None)
        self.client.exit(None)
        await self.client.stop()
        self.drain.cancel()

    def open(self, uri: str, text: str) -> None:
        self.version[uri] = 1
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))

    def edit(self, uri: str, start: tuple[int, int], end: tuple[int, int], s: str) -> None:
        self.version[uri] += 1
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.version[uri]),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(types.Position(*start), types.Position(*end)), text=s)]))

    def cursor(self, uri: str, line: int, col: int) -> None:
        self.client.protocol.notify("syntaxlock/cursor", {
            "textDocument": {"uri": uri, "version": self.version[uri]}, "position": {"line": line, "character": col}})

    def close(self, uri: str) -> None:
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=uri)))

    def ask(self, uri: str, line: int, col: int):
        return self.client.text_document_inline_completion_async(types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line, col),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic)))

    async def timed(self, uri: str, line: int, col: int, phase: str = "", where: str = ""):
        sent, t = time.time(), time.perf_counter()
        r = await self.ask(uri, line, col)
        dt = time.perf_counter() - t
        self.asked.append({"phase": phase, "cut": where, "uri": uri, "sent": sent, "ms": round(dt * 1000, 1)})
        return r, dt

    async def command(self, name: str, *args):
        return await self.client.workspace_execute_command_async(
            types.ExecuteCommandParams(command=name, arguments=list(args)))

    def log(self) -> str:
        return self.log_file.read_text(encoding="utf-8", errors="replace")


def options_of(args, **extra) -> dict:
    given = {key: value for key, value in (("latencyBudgetMs", args.latency_budget_ms),
                                            ("contextTokens", args.context_tokens),
                                            ("firstWindowTokens", args.first_window_tokens)) if value is not None}
    return {"model": args.model, "maxTokens": args.max_tokens, "mode": args.mode, "workAhead": args.work_ahead} | given | extra


COMPLETED = re.compile(r"completed (\S+) at offset \d+: ([\w-]+),(?: offered by [\w-]+ \(checked in [\d.]+ ms\),)? prompt (\d+) tokens( \(first window\)| \(without the context block\))? \((\d+) reused\) (\d+) ms, "
                       r"decode (\d+) ms, (\d+) sampled \+ (\d+) forced")
STOPPED = re.compile(r"completion in (\S+) stopped \(superseded\) (?:after (\d+) decoding steps|before it started), "
                     r"(\d+) ms after the stop")
PREFILLED = re.compile(r"prefilled (\S+) at offset \d+: (\d+) tokens \((\d+) reused, (\d+) computed\)")


def opening_tokens(log: str, prefix: str) -> int:
    """The tokens of each document's first prompt (work ahead's or a request's), summed over the
    documents whose URI starts with `prefix`: what opening them costs once, however they are
    edited afterwards."""
    first: dict[str, tuple[int, int]] = {}  # document -> (offset in the log, tokens)
    for m in PREFILLED.finditer(log):
        if m.group(1).startswith(prefix):
            first.setdefault(m.group(1), (m.start(), int(m.group(2))))
    for m in COMPLETED.finditer(log):
        if m.group(1).startswith(prefix) and int(m.group(3)) and m.start() < first.get(m.group(1), (1 << 62, 0))[0]:
            first[m.group(1)] = (m.start(), int(m.group(3)))
    return sum(n for _, n in first.values())


def engine_figures(log: str, prefix: str) -> dict:
    """What the server's log says about the runs on documents whose URI starts with `prefix`."""
    prompt, reused, prompt_ms, step_ms, without_model, first_window = 0, 0, [], [], 0, 0
    for m in COMPLETED.finditer(log):
        if not m.group(1).startswith(prefix):
            continue
        n, r = int(m.group(3)), int(m.group(5))
        if n == 0:
            without_model += 1  # the rest of a suggestion (typed through) or a prefetched one
            continue
        prompt, reused = prompt + n, reused + r
        first_window += m.group(4) == " (first window)"
        prompt_ms.append(int(m.group(6)) / 1000)
        if int(m.group(8)):
            step_ms.append(int(m.group(7)) / int(m.group(8)) / 1000)
    ahead = [(int(m.group(2)), int(m.group(4))) for m in PREFILLED.finditer(log) if m.group(1).startswith(prefix)]
    lag, steps = [], []
    for m in STOPPED.finditer(log):
        if m.group(1).startswith(prefix):
            lag.append(int(m.group(3)) / 1000)
            steps.append(int(m.group(2) or 0))
    return {
        "requests_that_ran_the_model": len(prompt_ms),
        "answered_without_the_model": without_model,
        "answered_from_a_first_window": first_window,  # the KV cache lacked most of the full window
        "prompt_tokens": prompt,
        "prompt_tokens_reused": reused,
        "prompt_reused_share": round(reused / prompt, 3) if prompt else None,
        "prefills_ahead": len(ahead),
        "prefill_tokens_computed_ahead": sum(c for _, c in ahead),
        "prompt_ms": stats_ms(prompt_ms) if prompt_ms else None,
        "decode_ms_per_sampled_token": stats_ms(step_ms) if step_ms else None,
        "engine_stop_after_supersede_ms": stats_ms(lag) if lag else None,
        "engine_steps_before_the_stop": {"mean": round(sum(steps) / len(steps), 2), "max": max(steps)} if steps else None,
    }


LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) \w+ (.*)$", re.M)


def log_lines(log: str) -> list[tuple[float, str]]:
    """The server's log lines, each with when it was written (wall clock, ms resolution)."""
    lines = []
    for m in LOG_LINE.finditer(log):
        at = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000
        lines.append((at, m.group(3)))
    return lines


def said_while_waiting(lines: list[tuple[float, str]], a: dict) -> list[str]:
    """The log lines about request `a`'s document written while it waited for its answer."""
    end = a["sent"] + a["ms"] / 1000 + 0.002
    return [text for at, text in lines if a["sent"] - 0.002 <= at <= end and a["uri"] in text]


def slow_requests(log: str, asked: list[dict], slow_ms: float) -> list[dict]:
    """The requests that took more than `slow_ms`, each with the server's log lines about its
    document written while it waited (what the engine did for it: its prompt, decode and checks,
    the work ahead it waited for); `--slow-ms`."""
    lines = log_lines(log)
    return [{k: a[k] for k in ("phase", "cut", "ms")} | {"log": [text[:300] for text in said_while_waiting(lines, a)]}
            for a in asked if a["ms"] > slow_ms]


def where_the_time_went(log: str, asked: list[dict], phase: str = "warm") -> dict | None:
    """Where the `phase` requests' time went, from the server's account of each one's run (its
    `completed` line, written while the request waited): per part, its p50/p90/mean over the
    requests, and its mean over the slowest tenth (the client's time at or above its p90:
    `slowest_tenth_mean_ms`, where the p90 goes). Parts: `client`
    (the request's time in the client), `outside_the_engine` (client less the parts below: the
    pipe, the event loop, the answer written), `join` (a prefetch it joined), `queue` (the
    engine's worker thread busy), then the engine's parts (decoding/results.py, `RequestTimes`: they add up
    to its wall time, `unaccounted` the rest)."""
    lines, rows, offs = log_lines(log), [], []
    for a in asked:
        if a["phase"] != phase:
            continue
        found = [text for text in said_while_waiting(lines, a) if COMPLETED.search(text)]
        if not found:  # another request's run served it (the same text and cursor)
            continue
        parts = parts_in(found[-1])
        rows.append({"client": a["ms"], "outside_the_engine": round(a["ms"] - sum(parts.values()), 2)} | parts)
        off_cpu = off_cpu_in(found[-1])  # none where the answer was typed through (no engine run)
        if off_cpu:
            offs.append({"client": a["ms"]} | off_cpu)
    if not rows:
        return None
    return {"requests": len(rows), "asked": sum(a["phase"] == phase for a in asked), "parts": _spread(rows),
            # the serving thread's time off the CPU (inside the parts, not beside them), over the
            # requests that ran in the engine: RequestTimes.off_cpu
            "off_the_cpu": {"requests": len(offs)} | {k: v for k, v in _spread(offs).items() if k != "client"}}


def _spread(rows: list[dict]) -> dict:
    """Per key of the rows, its p50/p90/mean, and its mean over the slowest tenth of the rows
    (their `client` time at or above its p90)."""
    if not rows:
        return {}
    slowest = [r for r in rows if r["client"] >= stats_ms([r["client"] / 1000 for r in rows])["p90_ms"]]
    out = {}
    for part in rows[0]:
        figures = stats_ms([r[part] / 1000 for r in rows])
        out[part] = {k: figures[k] for k in ("p50_ms", "p90_ms", "mean_ms")} | {
            "slowest_tenth_mean_ms": round(sum(r[part] for r in slowest) / len(slowest), 2)}
    return out


def items_of(r) -> list:
    if r is None:
        return []
    return list(r.items if isinstance(r, types.InlineCompletionList) else r)


def apply_item(doc: str, item) -> tuple[str, tuple[int, int]]:
    """The document with the item accepted, and the cursor after it."""
    r = item.range
    a = offset_at(doc, r.start.line, r.start.character)
    b = offset_at(doc, r.end.line, r.end.character)
    text = doc[:a] + item.insert_text + doc[b:]
    lines = item.insert_text.split("\n")
    end = (r.start.line + len(lines) - 1, (r.start.character if len(lines) == 1 else 0) + utf16(lines[-1]))
    return text, end



def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_kb(pid: int) -> dict:
    out = {}
    for ln in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = ln.partition(":")
        if k in ("VmHWM", "VmRSS"):
            out[k] = int(v.split()[0])
    return out


async def idle_after(pid: int, horizon: float = 10.0, window: float = 0.5, busy_share: float = 0.05) -> float | None:
    """Seconds from now until the server's CPU use stays under `busy_share` of a core in every
    later `window` up to `horizon` (None: still busy at the horizon)."""
    t0 = time.perf_counter()
    samples = [(0.0, cpu_seconds(pid))]
    while samples[-1][0] < horizon:
        await asyncio.sleep(0.1)
        samples.append((time.perf_counter() - t0, cpu_seconds(pid)))
    last_busy = None
    for (ta, ca), (tb, cb) in zip(samples, samples[5:]):  # 0.5 s windows
        if (cb - ca) / max(1e-9, tb - ta) > busy_share:
            last_busy = tb
    if last_busy is None:
        return 0.0
    return None if last_busy >= horizon - window else round(last_busy, 2)


# --- scenarios ---------------------------------------------------------------------------------


async def warmup(s: Server, args) -> float:
    """The first completion of a process pays one-time costs (lazy initialisation)."""
    w = cut_points(1, args.seed + 1, "stdlib")[0]
    s.open("file:///warmup.py", w.doc)
    _, dt = await s.timed("file:///warmup.py", w.line, w.col)
    s.close("file:///warmup.py")
    return dt


async def accept_then_enter(s: Server, args, uri: str, doc: str, it) -> tuple:
    """Accept item `it` of `doc` (the edit and `syntaxlock.accepted`), ask at its end, then
    `--enter-after` seconds after the accept press Enter (the new line indented as editors do)
    and ask: ((answer, seconds) after the accept, (answer, seconds) after Enter, the document
    accepted, the document after Enter)."""
    rng = it.range
    accepted, end = apply_item(doc, it)
    s.edit(uri, (rng.start.line, rng.start.character), (rng.end.line, rng.end.character), it.insert_text)
    t_accept = time.perf_counter()
    await s.command("syntaxlock.accepted", it.command.arguments[0])
    at_end = await s.timed(uri, *end, phase="after_accept", where=uri)
    await asyncio.sleep(max(0.0, args.enter_after - (time.perf_counter() - t_accept)))
    entered, line, character = after_enter(accepted, *end)
    off = offset_at(accepted, *end)
    s.edit(uri, end, end, entered[off : off + len(entered) - len(accepted)])
    return at_end, await s.timed(uri, line, character, "after_accept_and_enter", uri), accepted, entered


async def scenario_cuts(args, cuts: list[Cut]) -> dict:
    s = Server(args, options_of(args))
    ready_s = await s.start()
    first_s = await warmup(s, args)
    first, warm, accept, enter = {}, [], [], []
    counts = {"first_items": 0, "first_parse": 0, "warm_items": 0, "accepted": 0, "enter_items": 0}
    for k, c in enumerate(cuts):
        uri = f"file:///bench/{k}/{c.name}"
        kind = c.name.split("/", 1)[0]
        s.open(uri, c.doc)
        s.cursor(uri, c.line, c.col)
        await asyncio.sleep(args.idle)
        r, dt = await s.timed(uri, c.line, c.col, "first", uri)
        first.setdefault(kind, []).append(dt)
        items = items_of(r)
        counts["first_items"] += bool(items)
        counts["first_parse"] += sum(compiles(apply_item(c.doc, it)[0]) for it in items[:1])
        doc, typed = c.doc, c.rest[: 1 + k % 3]
        col = c.col
        if typed:
            s.edit(uri, (c.line, col), (c.line, col), typed)
            doc = doc[: offset_at(doc, c.line, col)] + typed + doc[offset_at(doc, c.line, col):]
            col += utf16(typed)
            r, dt = await s.timed(uri, c.line, col, "warm", uri)
            warm.append(dt)
            items = items_of(r)
            counts["warm_items"] += bool(items)
        if items:  # accept what is shown, ask at its end, then press Enter
            (_, dt), (r, dt_enter), _, _ = await accept_then_enter(s, args, uri, doc, items[0])
            counts["accepted"] += 1
            accept.append(dt)
            enter.append(dt_enter)
            counts["enter_items"] += bool(items_of(r))
        s.close(uri)
        if args.verbose:
            print(f"{k:3d} first {first[kind][-1] * 1000:7.0f} ms warm {warm[-1] * 1000 if warm else 0:7.0f} ms "
                  f"enter {enter[-1] * 1000 if enter else 0:7.0f} ms {c.name}:{c.line + 1}:{c.col}", file=sys.stderr)
    status = await s.command("syntaxlock.status")
    log = s.log()
    await s.stop()
    all_first = [x for v in first.values() for x in v]
    return {
        "server_ready_s": round(ready_s, 2),
        "first_request_of_the_process_ms": round(first_s * 1000, 1),
        "cut_points": len(cuts),
        "idle_s_before_the_first_request": args.idle,
        "first": stats_ms(all_first),
        "first_by_code": {k: stats_ms(v) for k, v in first.items()},
        "warm": stats_ms(warm) if warm else None,
        "after_accept": stats_ms(accept) if accept else None,
        "enter_after_s": args.enter_after,
        "after_accept_and_enter": stats_ms(enter) if enter else None,
        "counts": counts,
        "engine": engine_figures(log, "file:///bench/"),
        "warm_time_went": where_the_time_went(log, s.asked),
        "work_ahead": status.get("workAhead"),
        "kv_cache": status.get("kvCache"),
        "server_log": str(s.log_file),
    }


def quality_of(doc: str, cut: Cut, item) -> dict:
    """Whether the file with `item` accepted compiles, and its cursor line against the real one."""
    text, _ = apply_item(doc, item)
    line = text.split("\n")[cut.line].rstrip()
    real = (cut.doc.split("\n")[cut.line] + cut.rest).rstrip()
    return {"compiles": compiles(text), "exact": line == real, "similarity": edit_similarity(line, real)}


async def scenario_leads(args, cuts: list[Cut]) -> dict:
    """The first request `--lead` s after the server can know the cursor, for one client kind;
    then warm requests and accept-then-continue (see the module's docstring)."""
    s = Server(args, options_of(args))
    ready_s = await s.start()
    first_s = await warmup(s, args)
    pause = min(args.pause, args.lead)
    times: dict[str, list[float]] = {"first": [], "warm": [], "after_accept": [], "after_accept_and_enter": []}
    first_by_code: dict[str, list[float]] = {}
    warm_by_code: dict[str, list[float]] = {}
    quality: list[dict] = []
    counts = {"first_items": 0, "first_multiline": 0, "warm_items": 0, "accepted": 0, "after_accept_items": 0,
              "enter_items": 0, "offered": 0, "offered_compiling": 0}

    not_compiling: list[dict] = []

    def offered(doc: str, r, phase: str, where: str) -> list:
        items = items_of(r)
        for it in items[:1]:
            counts["offered"] += 1
            ok = compiles(apply_item(doc, it)[0])
            counts["offered_compiling"] += ok
            if not ok:
                not_compiling.append({"phase": phase, "cut": where, "insert_text": it.insert_text})
        return items

    for k, c in enumerate(cuts):
        uri = f"file:///bench/{k}/{c.name}"
        kind = c.name.split("/", 1)[0]
        s.open(uri, c.doc)
        doc, col = c.doc, c.col
        typed = c.rest[:1]
        if args.client == "cursor":
            s.cursor(uri, c.line, col)
            await asyncio.sleep(args.lead - pause)
        s.edit(uri, (c.line, col), (c.line, col), typed)
        doc = doc[: offset_at(doc, c.line, col)] + typed + doc[offset_at(doc, c.line, col):]
        col += utf16(typed)
        if args.client == "cursor":
            s.cursor(uri, c.line, col)
            await asyncio.sleep(pause)
        else:
            await asyncio.sleep(args.lead)
        where = f"{c.name}:{c.line + 1}:{c.col}"
        r, dt = await s.timed(uri, c.line, col, "first", where)
        times["first"].append(dt)
        first_by_code.setdefault(kind, []).append(dt)
        items = offered(doc, r, "first", where)
        counts["first_items"] += bool(items)
        if items:
            quality.append({"code": kind} | quality_of(doc, c, items[0]))
            counts["first_multiline"] += "\n" in items[0].insert_text.rstrip("\n")
        more = c.rest[1 : 2 + k % 3]
        if more:
            s.edit(uri, (c.line, col), (c.line, col), more)
            doc = doc[: offset_at(doc, c.line, col)] + more + doc[offset_at(doc, c.line, col):]
            col += utf16(more)
            r, dt = await s.timed(uri, c.line, col, "warm", where)
            times["warm"].append(dt)
            warm_by_code.setdefault(kind, []).append(dt)
            items = offered(doc, r, "warm", where)
            counts["warm_items"] += bool(items)
        if not items:
            s.close(uri)
            continue
        # accept what is shown, ask at its end, then press Enter and ask
        (r, dt), (r_enter, dt_enter), accepted, entered = await accept_then_enter(s, args, uri, doc, items[0])
        counts["accepted"] += 1
        times["after_accept"].append(dt)
        counts["after_accept_items"] += bool(offered(accepted, r, "after_accept", where))
        times["after_accept_and_enter"].append(dt_enter)
        counts["enter_items"] += bool(offered(entered, r_enter, "after_accept_and_enter", where))
        s.close(uri)
        if args.verbose:
            print(f"{k:3d} first {times['first'][-1] * 1000:7.0f} ms {c.name}:{c.line + 1}:{c.col}", file=sys.stderr)
    status = await s.command("syntaxlock.status")
    log = s.log()
    await s.stop()
    steps = [(int(m.group(6)), int(m.group(7)) + int(m.group(8))) for m in COMPLETED.finditer(log)
             if m.group(1).startswith("file:///bench/") and int(m.group(3))]
    decode_ms, tokens = sum(d for d, _ in steps), sum(n for _, n in steps)  # the log's figures are ms
    return {
        "client": args.client, "lead_s": args.lead, "pause_s": pause if args.client == "cursor" else args.lead,
        "server_ready_s": round(ready_s, 2),
        "first_request_of_the_process_ms": round(first_s * 1000, 1),
        "cut_points": len(cuts),
        **{name: stats_ms(v) if v else None for name, v in times.items()},
        "first_by_code": {k: stats_ms(v) for k, v in first_by_code.items()},
        "warm_by_code": {k: stats_ms(v) for k, v in warm_by_code.items()},
        "quality_of_the_first_answer": {
            code: {"n": len(rows), "compiles": sum(r["compiles"] for r in rows),
                   "exact": round(sum(r["exact"] for r in rows) / len(rows), 3),
                   "similarity": round(sum(r["similarity"] for r in rows) / len(rows), 3)}
            for code in sorted({r["code"] for r in quality}) for rows in [[r for r in quality if r["code"] == code]]},
        "counts": counts,
        "offered_not_compiling": not_compiling,
        "stop_reasons": dict(Counter(m.group(2) for m in COMPLETED.finditer(log) if m.group(1).startswith("file:///bench/"))),
        "ms_per_generated_token": {"requests": len(steps), "tokens": tokens,
                                   "ms": round(decode_ms / tokens, 2) if tokens else None},
        "engine": engine_figures(log, "file:///bench/"),
        "warm_time_went": where_the_time_went(log, s.asked),
        "work_ahead": status.get("workAhead"),
        "slow_requests": slow_requests(log, s.asked, args.slow_ms),
        "server_log": str(s.log_file),
    }


async def typing_session(s: Server, args, cuts: list[Cut], tag: str) -> dict:
    """Type the rest of real lines, one key at a time, without waiting for answers."""
    before = await s.command("syntaxlock.stats")
    cache_before = (await s.command("syntaxlock.status"))["kvCache"]
    stop_ms, final_wait, answered, requests = [], [], 0, 0
    peak_cache_mb = 0.0
    for k, c in enumerate(cuts):
        uri = f"file:///typing/{tag}/{k}/{c.name}"
        s.open(uri, c.doc)
        s.cursor(uri, c.line, c.col)
        await asyncio.sleep(args.typing_idle)  # the user looks before typing
        pending: list[asyncio.Future] = []
        col = c.col
        for ch in c.rest[:24]:
            s.edit(uri, (c.line, col), (c.line, col), ch)
            col += utf16(ch)
            sent = time.perf_counter()
            fut = asyncio.ensure_future(s.ask(uri, c.line, col))
            requests += 1
            if pending and not pending[-1].done():  # superseded now: time its answer
                pending[-1].add_done_callback(lambda f, t=sent: stop_ms.append(time.perf_counter() - t))
            pending.append(fut)
            await asyncio.sleep(1 / args.cps)
        last_key = time.perf_counter() - 1 / args.cps
        results = await asyncio.gather(*pending, return_exceptions=True)
        final_wait.append(time.perf_counter() - last_key)
        answered += sum(1 for r in results if not isinstance(r, BaseException) and items_of(r))
        status = await s.command("syntaxlock.status")
        peak_cache_mb = max(peak_cache_mb, status.get("kvCache", {}).get("memory_mb", 0.0))
        if k < len(cuts) - 1:
            s.close(uri)
    idle_s = await idle_after(s.pid)  # from the session's last answer on
    after = await s.command("syntaxlock.stats")
    status = await s.command("syntaxlock.status")
    reused = status["kvCache"]["reused_tokens"] - cache_before["reused_tokens"]
    computed = status["kvCache"]["computed_tokens"] - cache_before["computed_tokens"]
    opening = min(computed, opening_tokens(s.log(), f"file:///typing/{tag}/"))
    return {
        "documents": len(cuts),
        "chars_per_second": args.cps,
        "idle_s_before_typing": args.typing_idle,
        # every prompt the engine prepared (requests, superseded ones included, and work ahead):
        # the share of their tokens found in the KV cache
        "prompt_tokens_reused_share": round(reused / max(1, reused + computed), 3),
        "prompt_tokens_reused": reused,
        "prompt_tokens_computed": computed,
        # the same without each document's first prompt (computed once when it is opened, however
        # it is edited): what editing costs, i.e. whether the prompt window survives typing
        "opening_prompt_tokens": opening,
        "prompt_tokens_reused_share_after_opening": round(reused / max(1, reused + computed - opening), 3),
        "requests": requests,
        "superseded": after["superseded"] - before["superseded"],
        "with_item": answered,
        "superseded_answer_ms": stats_ms(stop_ms) if stop_ms else None,
        "wait_after_the_last_key_ms": stats_ms(final_wait),
        "server_idle_s_after_the_last_key": None if idle_s is None else round(final_wait[-1] + idle_s, 2),
        "kv_cache_peak_mb": peak_cache_mb,
        "kv_cache_cap_mb": status["settings"]["cacheMemoryMB"],
        "server_memory_kb": memory_kb(s.pid),
        "engine": engine_figures(s.log(), f"file:///typing/{tag}/"),
    }


async def scenario_typing(args, cuts: list[Cut]) -> dict:
    s = Server(args, options_of(args))
    await s.start()
    await warmup(s, args)
    out = await typing_session(s, args, cuts, "one")
    await s.stop()
    return out


async def scenario_two(args, cuts: list[Cut]) -> dict:
    """The typing session alone, then in two servers at once (each on its own documents)."""
    half = len(cuts) // 2
    alone = []
    for tag, part in (("a", cuts[:half]), ("b", cuts[half:])):
        s = Server(args, options_of(args))
        await s.start()
        await warmup(s, args)
        alone.append(await typing_session(s, args, part, f"alone-{tag}"))
        await s.stop()
    servers = [Server(args, options_of(args)) for _ in range(2)]
    await asyncio.gather(*(s.start() for s in servers))
    await asyncio.gather(*(warmup(s, args) for s in servers))
    together = await asyncio.gather(typing_session(servers[0], args, cuts[:half], "together-a"),
                                    typing_session(servers[1], args, cuts[half:], "together-b"))
    await asyncio.gather(*(s.stop() for s in servers))

    def p(d, q):
        return d["wait_after_the_last_key_ms"][q]

    return {
        "alone": [{"wait_after_the_last_key_ms": a["wait_after_the_last_key_ms"], "engine": a["engine"]} for a in alone],
        "together": [{"wait_after_the_last_key_ms": t["wait_after_the_last_key_ms"], "engine": t["engine"]}
                     for t in together],
        "slowdown_p50": [round(p(t, "p50_ms") / max(1e-9, p(a, "p50_ms")), 2) for a, t in zip(alone, together)],
        "slowdown_p90": [round(p(t, "p90_ms") / max(1e-9, p(a, "p90_ms")), 2) for a, t in zip(alone, together)],
    }


async def scenario_busy(args, cuts: list[Cut]) -> dict:
    """Cold prompts (no work ahead) on a quiet machine, then with two CPU-bound processes."""
    s = Server(args, options_of(args, workAhead=False))
    await s.start()
    await warmup(s, args)
    out = {}
    for phase in ("quiet", "two_cpu_bound_processes"):
        hogs = []
        if phase != "quiet":
            hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
            await asyncio.sleep(1.0)
        try:
            times = []
            load0 = os.getloadavg()[0]
            for k, c in enumerate(cuts):
                uri = f"file:///busy/{phase}/{k}/{c.name}"
                s.open(uri, c.doc)
                _, dt = await s.timed(uri, c.line, c.col)
                times.append(dt)
                s.close(uri)
            out[phase] = {"first_request": stats_ms(times), "load_average_1m": [round(load0, 2),
                                                                                 round(os.getloadavg()[0], 2)],
                          "engine": engine_figures(s.log(), f"file:///busy/{phase}/")}
        finally:
            for h in hogs:
                h.kill()
                h.wait()
    await s.stop()
    q, b = out["quiet"]["first_request"], out["two_cpu_bound_processes"]["first_request"]
    out["slowdown"] = {"p50": round(b["p50_ms"] / q["p50_ms"], 2), "p90": round(b["p90_ms"] / q["p90_ms"], 2)}
    out["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY", "PASSIVE (the CLI's default)")
    return out


def anchor(args) -> dict | None:
    """llama.cpp's decode on the model's GGUF file, measured alone before the scenarios (None:
    `--no-anchor`; {"skipped": why} for a model that is not one GGUF file)."""
    from mask_store.model_files import resolve_model

    if not args.anchor:
        return None
    src = resolve_model(args.model)
    if src.kind != "gguf":
        return {"skipped": f"llama.cpp reads GGUF files; the model is a {src.kind}"}
    return anchor_in_child(src.path)


async def run(args) -> dict:
    cuts = cut_points(args.cuts, args.seed, args.code)
    out = {
        "model": args.model, "max_tokens": args.max_tokens, "mode": args.mode, "work_ahead": args.work_ahead,
        "latency_budget_ms": args.latency_budget_ms, "context_tokens": args.context_tokens,
        "first_window_tokens": args.first_window_tokens,
        "code": args.code, "cpus": os.cpu_count(), "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "anchor": anchor(args),
    }
    L = (out["anchor"] or {}).get("decode_ms_per_token")
    out["L_ms"] = L  # the unit of the `*_L` figures: llama.cpp's decode ms per token, this run
    scenarios = args.scenarios.split(",")
    if "cuts" in scenarios:
        out["cuts"] = await scenario_cuts(args, cuts)
    if "leads" in scenarios:
        out["leads"] = await scenario_leads(args, cuts)
    typing_cuts = cut_points(args.typing_docs, args.seed + 7, args.code)
    if "typing" in scenarios:
        out["typing"] = await scenario_typing(args, typing_cuts)
    if "two" in scenarios:
        out["two_servers"] = await scenario_two(args, typing_cuts)
    if "busy" in scenarios:
        # prompts of ~1,000 tokens: at least 6,000 characters before the cursor
        out["busy_machine"] = await scenario_busy(args, cut_points(args.busy_cuts, args.seed + 11, args.code, 6000))
    out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    if L:
        out |= {name: in_units(out[name], L) for name in ("cuts", "leads", "typing", "two_servers", "busy_machine")
                if name in out}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cuts", type=int, default=40)
    ap.add_argument("--scenarios", default="cuts,typing,two,busy")
    ap.add_argument("--code", default="both", choices=["both", "stdlib", "thirdparty"])
    ap.add_argument("--model", default="default")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--mode", default="single", choices=["auto", "single", "multi"])
    ap.add_argument("--idle", type=float, default=3.0, help="seconds between the cursor report and the first request")
    ap.add_argument("--client", default="cursor", choices=["cursor", "plain"],
                    help="leads: a client that reports the cursor (syntaxlock/cursor) or one that does not")
    ap.add_argument("--lead", type=float, default=2.0,
                    help="leads: seconds from when the server can know the cursor to the request")
    ap.add_argument("--pause", type=float, default=0.5,
                    help="leads, cursor client: seconds between the character typed and the request")
    ap.add_argument("--latency-budget-ms", type=int, help="the server's latencyBudgetMs (default: the server's)")
    ap.add_argument("--context-tokens", type=int, help="the server's contextTokens, the prompt window (default: the server's)")
    ap.add_argument("--first-window-tokens", type=int,
                    help="the server's firstWindowTokens, the short first window (0: off; default: the server's)")
    ap.add_argument("--slow-ms", type=float, default=300,
                    help="leads: list the requests slower than this, with the server's log lines about them")
    ap.add_argument("--enter-after", type=float, default=0.5, help="seconds between an accept and Enter")
    ap.add_argument("--no-work-ahead", dest="work_ahead", action="store_false", help="the server does not work ahead")
    ap.add_argument("--no-anchor", dest="anchor", action="store_false",
                    help="do not measure llama.cpp's decode (L): figures in ms only")
    ap.add_argument("--typing-docs", type=int, default=10)
    ap.add_argument("--cps", type=float, default=8.0, help="typing speed, characters per second")
    ap.add_argument("--typing-idle", type=float, default=1.0, help="seconds between opening a document and typing")
    ap.add_argument("--busy-cuts", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--verbose", action="store_true", help="one line per cut point on stderr")
    args = ap.parse_args()
    print(json.dumps(asyncio.run(run(args)), indent=1))


if __name__ == "__main__":
    main()
