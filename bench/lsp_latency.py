"""End-to-end inline completion latency through the real server over stdio (prints JSON).

    .venv/bin/python bench/lsp_latency.py [--cuts 100] [--model default] [--typing-docs 10]

Starts `syntaxlock serve`, waits for it to be ready, then for each stdlib cut point (a line in a
function body cut at a random column; the rest of the line removed, the following lines kept):
- cold: open the document and ask for an inline completion (the first request on a document);
- warm: type the next 1-3 characters of the real line and ask again (the prompt cache is warm).
Latency is measured in the client, from sending the request to receiving the answer (the very
first request of the server process, which pays one-time costs, is reported apart). Items are
spliced in and the file is checked with `ast.parse`.
Then a simulated typing session types the rest of real lines at `--cps` characters per second,
one didChange + inlineCompletion per key, without waiting for answers: the share of requests
superseded, how long a superseded request takes to answer after the newer one was sent, and
(from the server's log) how long the engine took to stop after the supersede (a prompt's
forward passes run in chunks of 128 tokens, decoding one token at a time, with the stop flag
read between them) and how many tokens it had decoded by then. Warm answers that were the rest
of the previous suggestion (the user typed its first characters: no model call) are counted.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import os
import random
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import STDLIB, read_source, stats_ms, stdlib_files  # noqa: E402

from lsprotocol import types  # noqa: E402
from pygls.lsp.client import LanguageClient  # noqa: E402

from lsp_server.positions import offset_at  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def cut_points(n: int, seed: int) -> list[tuple[str, str, int, int, str]]:
    """(name, document, line, character, rest of the real line) for n cut points."""
    rng = random.Random(seed)
    files = stdlib_files()
    rng.shuffle(files)
    out = []
    for path in files:
        if len(out) >= n:
            break
        data = read_source(path)
        if data is None or len(data) > 200_000:
            continue
        lines = data.decode().splitlines(keepends=True)
        body = [i for i, ln in enumerate(lines)
                if ln.startswith("        ") and ln.strip() and not ln.lstrip().startswith(("#", '"', "'"))
                and len(ln.strip()) >= 8]
        if not body:
            continue
        i = rng.choice(body)
        ln = lines[i].rstrip("\r\n")
        indent = len(ln) - len(ln.lstrip())
        col = rng.randint(indent + 1, len(ln) - 3)
        doc = "".join(lines[:i]) + ln[:col] + "\n" + "".join(lines[i + 1 :])
        name = str(path.relative_to(STDLIB))
        out.append((name, doc, i, col, ln[col:]))
    return out


def utf16(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


class Bench:
    def __init__(self, client: LanguageClient) -> None:
        self.client = client
        self.version: dict[str, int] = {}

    def open(self, uri: str, text: str) -> None:
        self.version[uri] = 1
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))

    def type(self, uri: str, line: int, col: int, s: str) -> None:
        self.version[uri] += 1
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.version[uri]),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(types.Position(line, col), types.Position(line, col)), text=s)]))

    def close(self, uri: str) -> None:
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=uri)))

    def ask(self, uri: str, line: int, col: int):
        return self.client.text_document_inline_completion_async(types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line, col),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic)))

    async def timed(self, uri: str, line: int, col: int):
        t = time.perf_counter()
        r = await self.ask(uri, line, col)
        return r, time.perf_counter() - t

    async def command(self, name: str, *args):
        return await self.client.workspace_execute_command_async(
            types.ExecuteCommandParams(command=name, arguments=list(args)))


COMPLETED = re.compile(r"completed (\S+) at \d+:\d+: ([\w-]+), prompt (\d+) tokens \((\d+) reused\) (\d+) ms, "
                       r"decode (\d+) ms, (\d+) sampled \+ (\d+) forced")
STOPPED = re.compile(r"completion in file:///typing/\S+ stopped \(superseded\) "
                     r"(?:after (\d+) decoding steps|before it started), "
                     r"(\d+) ms after the stop")


def engine_figures(log: str) -> dict:
    """What the server's log says about the engine: prompt and decoding time of the completed
    runs (benchmark part), and how soon superseded runs stopped (typing part)."""
    prompt_ms, step_ms, reused, warm_runs = [], [], [], []
    typed_through = 0
    for m in COMPLETED.finditer(log):
        if m.group(1).startswith("file:///bench/") and int(m.group(3)) == 0:
            typed_through += 1  # the rest of the previous suggestion, no model call
        elif m.group(1).startswith("file:///bench/"):
            prompt_ms.append(int(m.group(5)) / 1000)
            reused.append(int(m.group(4)) / max(1, int(m.group(3))))
            if int(m.group(7)):
                step_ms.append(int(m.group(6)) / int(m.group(7)) / 1000)
            if int(m.group(4)) >= int(m.group(3)) // 2:  # a warm request that ran the model
                warm_runs.append((int(m.group(5)) + int(m.group(6))) / 1000)
    lag, steps = [], []
    for m in STOPPED.finditer(log):
        lag.append(int(m.group(2)) / 1000)
        steps.append(int(m.group(1) or 0))
    return {
        "prompt_ms": stats_ms(prompt_ms) if prompt_ms else None,
        "prompt_reused_share_mean": round(sum(reused) / len(reused), 3) if reused else None,
        "decode_ms_per_sampled_token": stats_ms(step_ms) if step_ms else None,
        "typed_through_answers": typed_through,
        # warm requests the model answered (not typed through): the engine's prompt + decoding
        "warm_model_runs_ms": stats_ms(warm_runs) if warm_runs else None,
        "stop_lag": stats_ms(lag) if lag else None,
        "stop_steps": {"mean": round(sum(steps) / len(steps), 2), "max": max(steps)} if steps else None,
    }


def items_of(r) -> list:
    if r is None:
        return []
    return list(r.items if isinstance(r, types.InlineCompletionList) else r)


def parses_after_accept(doc: str, item) -> bool:
    r = item.range
    a = offset_at(doc, r.start.line, r.start.character)
    b = offset_at(doc, r.end.line, r.end.character)
    try:
        ast.parse(doc[:a] + item.insert_text + doc[b:])
        return True
    except SyntaxError:
        return False


async def _drain(stream, show: bool) -> None:
    """Read the server's stderr (its log) so that the pipe never fills up."""
    while line := await stream.readline():
        if show:
            sys.stderr.buffer.write(line)


async def run(args) -> dict:
    client = LanguageClient("syntaxlock-bench", "0")
    ready = asyncio.Event()
    failed: list[str] = []

    @client.feature("syntaxlock/status")
    def _status(ls, params):
        state = params["state"] if isinstance(params, dict) else params.state
        msg = params["message"] if isinstance(params, dict) else params.message
        if state == "ready":
            ready.set()
        elif state == "error":
            failed.append(msg)
            ready.set()

    @client.feature(types.WINDOW_LOG_MESSAGE)
    def _log(ls, params):  # the server's log is read from its log file instead
        pass

    @client.feature(types.WINDOW_SHOW_MESSAGE)
    def _show(ls, params):
        print(f"server says: {params.message}", file=sys.stderr)

    env = dict(os.environ)
    log_file = Path(tempfile.mkdtemp(prefix="syntaxlock-bench-")) / "server.log"
    cmd = [sys.executable, "-m", "lsp_server.cli", "serve", "--log-level", "INFO", "--log-file", str(log_file)]
    t0 = time.perf_counter()
    await client.start_io(*cmd, env=env, cwd=str(ROOT))
    drain = asyncio.ensure_future(_drain(client._server.stderr, args.verbose))
    options = {"model": args.model, "maxTokens": args.max_tokens, "mode": args.mode}
    await client.initialize_async(types.InitializeParams(
        capabilities=types.ClientCapabilities(window=types.WindowClientCapabilities(work_done_progress=False)),
        initialization_options=options, process_id=os.getpid()))
    client.initialized(types.InitializedParams())
    await asyncio.wait_for(ready.wait(), 1800)
    if failed:
        raise SystemExit(f"the server could not load the model: {failed[0]}")
    ready_s = time.perf_counter() - t0
    b = Bench(client)
    status = await b.command("syntaxlock.status")
    # the first completion of a process pays one-time costs (lazy initialisation): measured apart
    warmup = cut_points(1, args.seed + 1)[0]
    b.open("file:///warmup.py", warmup[1])
    _, first_s = await b.timed("file:///warmup.py", warmup[2], warmup[3])
    b.close("file:///warmup.py")

    cold, warm, n_items, n_parse, n_warm_items = [], [], 0, 0, 0
    cuts = cut_points(args.cuts, args.seed)
    for k, (name, doc, line, col, rest) in enumerate(cuts):
        uri = f"file:///bench/{k}/{name}"
        b.open(uri, doc)
        r, dt = await b.timed(uri, line, col)
        cold.append(dt)
        items = items_of(r)
        n_items += bool(items)
        n_parse += sum(parses_after_accept(doc, it) for it in items[:1])
        typed = rest[: 1 + k % 3]
        if typed:
            b.type(uri, line, col, typed)
            r, dt = await b.timed(uri, line, col + utf16(typed))
            warm.append(dt)
            n_warm_items += bool(items_of(r))
        b.close(uri)
        if args.verbose:
            print(f"{k:3d} cold {cold[-1] * 1000:7.0f} ms warm {warm[-1] * 1000 if warm else 0:7.0f} ms "
                  f"{name}:{line + 1}:{col} {items[0].insert_text[:50] if items else ''!r}", file=sys.stderr)

    # a typing session: the rest of real lines, one key at a time, without waiting for answers
    before = await b.command("syntaxlock.stats")
    stop_ms, answered, requests = [], 0, 0
    for k, (name, doc, line, col, rest) in enumerate(cuts[: args.typing_docs]):
        uri = f"file:///typing/{k}/{name}"
        b.open(uri, doc)
        pending: list[tuple[asyncio.Future, float]] = []
        c = col
        for ch in rest[:24]:
            b.type(uri, line, c, ch)
            c += utf16(ch)
            sent = time.perf_counter()
            fut = asyncio.ensure_future(b.ask(uri, line, c))
            requests += 1
            if pending:  # the previous one is superseded now (if still running): time its answer
                prev, _ = pending[-1]
                if not prev.done():
                    prev.add_done_callback(lambda f, s=sent: stop_ms.append(time.perf_counter() - s))
            pending.append((fut, sent))
            await asyncio.sleep(1 / args.cps)
        results = await asyncio.gather(*(f for f, _ in pending), return_exceptions=True)
        answered += sum(1 for r in results if not isinstance(r, BaseException) and items_of(r))
        b.close(uri)
    after = await b.command("syntaxlock.stats")
    superseded = after["superseded"] - before["superseded"]
    engine = engine_figures(log_file.read_text(encoding="utf-8", errors="replace"))

    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    drain.cancel()
    return {
        "model": status.get("model"),
        "device": status.get("device"),
        "server_ready_s": round(ready_s, 2),
        "first_request_ms": round(first_s * 1000, 1),
        "cut_points": len(cuts),
        "max_tokens": args.max_tokens,
        "mode": args.mode,
        "cold": stats_ms(cold),
        "warm": stats_ms(warm) if warm else None,
        "items_share_cold": round(n_items / len(cuts), 3),
        "items_share_warm": round(n_warm_items / max(1, len(warm)), 3),
        "parses_after_accept": round(n_parse / max(1, n_items), 3),
        "typing": {
            "documents": min(args.typing_docs, len(cuts)),
            "chars_per_second": args.cps,
            "requests": requests,
            "superseded": superseded,
            "superseded_share": round(superseded / max(1, requests), 3),
            "with_item": answered,
            "superseded_answer_ms": stats_ms(stop_ms) if stop_ms else None,
            "engine_stop_after_supersede_ms": engine["stop_lag"],
            "engine_steps_before_the_stop": engine["stop_steps"],  # tokens decoded when it stopped
        },
        "engine": {k: v for k, v in engine.items() if not k.startswith("stop_")},
        "server_log": str(log_file),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cuts", type=int, default=100)
    ap.add_argument("--model", default="default")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--mode", default="single", choices=["auto", "single", "multi"])
    ap.add_argument("--typing-docs", type=int, default=10)
    ap.add_argument("--cps", type=float, default=8.0, help="typing speed, characters per second")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--verbose", action="store_true", help="one line per cut point on stderr")
    args = ap.parse_args()
    print(json.dumps(asyncio.run(run(args)), indent=1))


if __name__ == "__main__":
    main()
