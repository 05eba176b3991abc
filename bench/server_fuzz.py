"""A bounded fuzz campaign against the real server over stdio (prints one JSON summary).

    .venv/bin/python bench/server_fuzz.py [--model tiny|default|DIR] [--seed 0] [--edits 2000] [--burst 200]

`syntaxlock serve --stdio` is driven in raw bytes (tests/raw_lsp.py). Each probe is one check
that passes or fails; failures are listed by name. The categories:
- frames: the bad headers of issue 22 (short, long, zero, missing, non-numeric, negative
  Content-Length, LF-only and lower-case headers, 10^12 and over-the-limit lengths, garbage) and
  random mutations of good frames (lengths off by -20..+60, header case and blanks, junk between
  frames, frames split across writes); after each, 3 requests must all be answered;
- messages: invalid JSON-RPC (parse errors, non-objects, batches, bad jsonrpc / id / method /
  params) must get their error code, random envelopes must leave every request answered once,
  objects with a jsonrpc member nested in settings and arguments must not be taken for messages;
- documents: odd documents (CR-only, mixed line ends, emoji, NUL, BOM, 9.99 MB, 11 MB, a
  20,000-character line, 3,000 nested brackets, an unterminated string, another language,
  empty) each asked for completions at the end, the middle and outside: answered, no error;
- edits: `--edits` random edits mirrored on four documents with mixed line ends (joining and
  splitting "\\r\\n", emoji): every 500 edits the server's digest of each document
  (syntaxlock.status) must be the client's;
- burst: `--burst` inline requests over five documents while typing, a third cancelled at
  once and a third a little later: each answered exactly once (a result or -32800);
- settings: out-of-range and mistyped values must be refused with a message and completions
  go on; the extremes of the ranges must decode without an error;
- shutdown: requests after shutdown (-32600), exit codes (0 after shutdown, 1 without), end
  of input, a closed output, requests before initialize (-32002), each on its own server;
- stores: one-bit flips over a saved store (header and arrays) must all be refused, and a
  server on a damaged store must report the error.
Figures: probes, failures, the main server's peak resident memory (VmHWM, after the 9.99 MB
document), client-side latency p50/p99 of completion requests (documents, edits, burst; the
cancelled ones apart) and of commands, wall time, machine load. `--model tiny` (the default)
is the tests' random-weight model (tests/model_support.py make_tiny_model_dir), for speed: the
protocol does not depend on the model; latencies are that model's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "tests"))
from _util import stats_ms  # noqa: E402
from raw_lsp import RawServer, frame, lsp_lines, lsp_offset, server_command, text_digest  # noqa: E402

STATS = {"command": "syntaxlock.stats"}
ANSWER_S = 120.0  # a guard: a request unanswered this long is a failure


def vm_kib(pid: int, key: str) -> int:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class Campaign:
    def __init__(self, args) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.results: list[tuple[str, str, bool, str]] = []
        self.completion_ms: list[float] = []
        self.cancelled_ms: list[float] = []
        self.command_ms: list[float] = []
        self.peaks: dict[str, int] = {}

    # ------------------------------------------------------------------ bookkeeping

    def probe(self, category: str, name: str, ok: bool, detail: str = "") -> bool:
        self.results.append((category, name, bool(ok), detail))
        if not ok and self.args.verbose:
            print(f"FAIL {category}/{name}: {detail}", file=sys.stderr)
        return ok

    def check(self, category: str, name: str, fn) -> bool:
        """A probe whose check may raise (a timeout, a closed server): that is a failure."""
        try:
            ok = fn()
            detail = "" if ok else "check failed"
        except Exception as e:  # the probe failed; the campaign goes on
            ok, detail = False, f"{type(e).__name__}: {e}"[:300]
        return self.probe(category, name, ok, detail)

    def record(self, s: RawServer, ids, into: list[float]) -> None:
        for i in ids:
            if i in s.answered_at and i in s.sent_at:
                into.append(s.answered_at[i] - s.sent_at[i])

    def alive(self, s: RawServer, n: int = 3) -> bool:
        ids = [s.request("workspace/executeCommand", STATS) for _ in range(n)]
        answers = s.responses_for(ids, ANSWER_S)
        self.record(s, ids, self.command_ms)
        return all("result" in a for a in answers.values())

    def options(self) -> dict:
        return {"model": self.args.model_path, "maxTokens": 16, "mode": "single", "contextTokens": 512}

    # ------------------------------------------------------------------ categories

    def frames(self, s: RawServer) -> None:
        def good(i) -> dict:
            return {"jsonrpc": "2.0", "id": f"f{i}", "method": "workspace/executeCommand", "params": STATS}

        fixed = {
            "short": frame(good(0), length=10), "long": frame(good(1), length=400), "zero": frame(good(2), length=0),
            "missing": b"Content-Type: application/vscode-jsonrpc\r\n\r\n" + json.dumps(good(3)).encode(),
            "non-numeric": frame(good(4), length="twelve"), "negative": frame(good(5), length=-40),
            "no-header": json.dumps(good(6)).encode(), "lf-only": frame(good(7), eol=b"\n"),
            "lower-case": frame(good(8), header="content-length"), "absurd": frame(good(9), length=10**12),
            "over-limit": frame(good(10), length=64 * 1024 * 1024 + 1), "garbage": b"\x00\xff junk\r\n\r\n\r\nhello\n",
        }
        for name, data in fixed.items():
            s.send_bytes(data)
            self.check("frames", name, lambda: self.alive(s))
        for k in range(self.args.frame_mutations):
            body = json.dumps(good(100 + k)).encode()
            kind = self.rng.choice(["length", "case", "junk", "truncate", "split"])
            if kind == "length":
                data = frame(body, length=max(0, len(body) + self.rng.randint(-20, 60)))
            elif kind == "case":
                name = "".join(c.upper() if self.rng.random() < 0.5 else c.lower() for c in "content-length")
                colon = self.rng.choice([":", " :", ":  ", ":\t"])
                data = (name + colon + str(len(body)) + self.rng.choice(["", " "]) + "\r\n\r\n").encode() + body
            elif kind == "junk":
                data = bytes(self.rng.randrange(256) for _ in range(self.rng.randint(1, 200))) + frame(body)
            elif kind == "truncate":
                data = frame(body)[: self.rng.randint(1, len(body))]
            else:
                data = frame(body)
            if kind == "split":
                for i in range(0, len(data), 7):
                    s.send_bytes(data[i : i + 7])
                    time.sleep(0.001)
            else:
                s.send_bytes(data)
            self.check("frames", f"mutation-{k}-{kind}", lambda: self.alive(s))

    def messages(self, s: RawServer) -> None:
        invalid = [
            (b"{this is not json", -32700, None), (b'{"jsonrpc": "2.0", "id": 9005, "method": "x"', -32700, None),
            (b'{"jsonrpc": "2.0", "id": 9006, "method": "\xff\xfe"}', -32700, None), (b"[]", -32600, None),
            (b"42", -32600, None), (b"null", -32600, None), (b'"s"', -32600, None),
            (b'[{"jsonrpc": "2.0", "id": 9009, "method": "x"}]', -32600, 9009), (b'{"id": 9003, "method": "x"}', -32600, 9003),
            (b'{"jsonrpc": "1.0", "id": 9004, "method": "x"}', -32600, 9004),
            (b'{"jsonrpc": "2.0", "id": {}, "method": "x"}', -32600, None),
            (b'{"jsonrpc": "2.0", "id": [], "method": "x"}', -32600, None),
            (b'{"jsonrpc": "2.0", "id": 9001.5, "method": "x"}', -32600, None), (b'{"jsonrpc": "2.0", "id": 9012}', -32600, 9012),
            (b'{"jsonrpc": "2.0", "id": 9013, "method": 5}', -32600, 9013),
            (b'{"jsonrpc": "2.0", "id": 9014, "method": "workspace/executeCommand", "params": 7}', -32600, 9014),
            (b'{"jsonrpc": "2.0", "id": 9015, "method": "textDocument/didOpen", "params": {}}', -32600, 9015),
            (b'{"jsonrpc": "2.0", "id": 9016, "method": "workspace/executeCommand", "params": {"command": 5}}', -32602, 9016),
            (b'{"jsonrpc": "2.0", "id": 9017, "method": "no/such"}', -32601, 9017),
        ]
        for body, code, msg_id in invalid:
            def one(body=body, code=code, msg_id=msg_id):
                seen = len(s.received)
                s.send_bytes(frame(body))
                marker = s.request("workspace/executeCommand", STATS)
                s.response(marker, ANSWER_S)
                errors = [(m["error"]["code"], m.get("id", "absent")) for m in s.received[seen:]
                          if "error" in m and m.get("id") != marker]
                return errors == [(code, msg_id)]
            self.check("messages", f"invalid {body[:30]!r}", one)
        methods = ["workspace/executeCommand", "textDocument/inlineCompletion", "textDocument/completion",
                   "syntaxlock/none", "textDocument/hover", "initialize", "$/cancelRequest", "textDocument/didOpen"]
        junk = [None, 0, -1, 2**70, 1.5, "", "x" * 300, [], [1, {"a": None}], {}, {"textDocument": 5}, True,
                {"jsonrpc": "2.0", "id": "nested", "method": "shutdown"}]
        for k in range(self.args.random_messages):
            msg: dict = {}
            if self.rng.random() < 0.85:
                msg["jsonrpc"] = "2.0" if self.rng.random() < 0.8 else self.rng.choice(junk)
            if self.rng.random() < 0.8:
                msg["method"] = self.rng.choice(methods) if self.rng.random() < 0.85 else self.rng.choice(junk)
            msg_id = f"r{k}" if self.rng.random() < 0.7 else self.rng.choice(junk)
            if self.rng.random() < 0.8:
                msg["id"] = msg_id
            if self.rng.random() < 0.8:
                msg["params"] = self.rng.choice(junk + [STATS, {"command": "syntaxlock.status", "arguments": [self.rng.choice(junk)]}])
            answered_once = isinstance(msg.get("id"), str) and msg["id"].startswith("r")

            def one(msg=msg, answered_once=answered_once):
                seen = len(s.received)
                s.send(msg)
                ok = self.alive(s, 1)
                if answered_once:
                    s.response(msg["id"], ANSWER_S)
                    ok &= sum(1 for m in s.received[seen:] if "method" not in m and m.get("id") == msg["id"]) == 1
                return ok
            self.check("messages", f"random-{k}", one)
        inner = {"jsonrpc": "2.0", "id": "n2", "method": "textDocument/hover", "params": {"bad": 1}}

        def nested():
            seen = len(s.received)
            s.send({"jsonrpc": "2.0", "id": "n1", "method": "workspace/executeCommand",
                    "params": {"command": "syntaxlock.accepted", "arguments": [inner]}})
            s.notify("workspace/didChangeConfiguration", {"settings": {"syntaxlock": {"other": {**inner, "method": "shutdown"}}}})
            s.send({"jsonrpc": "2.0", "id": "n2", "method": "workspace/executeCommand",
                    "params": {"command": "syntaxlock.dismissed", "arguments": [{"deep": [inner]}]}})
            s.response("n1", ANSWER_S), s.response("n2", ANSWER_S)
            ok = self.alive(s, 1)
            s.drain(0.3)
            replies = [m.get("id") for m in s.received[seen:] if "method" not in m]
            return ok and replies.count("n1") == 1 and replies.count("n2") == 1
        self.check("messages", "nested jsonrpc objects", nested)

    def documents(self, s: RawServer) -> None:
        line = "value = compute(alpha, beta) + other(gamma)  # é 😀\n"
        docs = {
            "cr-only": "import os\rx = os.path\rdef f(a):\r    return a\rf(",
            "mixed": "import os\r\nx = 1\ry = 2\n\r\n\rz = [\r    1,\n",
            "crlf": "def f(a):\r\n    return a\r\n\r\nf(",
            "emoji": "s = '😀😀'\nt = '\U0001f600' + s\nu = ",
            "nul": "x = 1\x00\nimport os\nos.",
            "bom": "\ufeffimport os\nos.pa",
            "empty": "",
            "blank": "   \n\t\n  ",
            "form-feed": "x = 1\n\x0c\ny = x +",
            "unterminated": "s = 'abc\nt = \"\"\"abc\nu = ",
            "nested": "x = " + "(" * 3000 + "1",
            "20,000-character line": "x = [" + ", ".join(str(i) for i in range(3600)) + ", ",
            "not-python": "const x = require('fs');\nx.",
            "9.99 MB": line * (9_990_000 // len(line)),
            "11 MB": line * (11_000_000 // len(line)),
        }
        for name, text in docs.items():
            uri = f"file:///odd/{name.replace(' ', '_')}.py"
            language = "javascript" if name == "not-python" else "python"
            s.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": language, "version": 1, "text": text}})
            lines = lsp_lines(text)
            last = len(lines) - 1
            width = len(text[lines[last][0]:].encode("utf-16-le")) // 2
            mid = last // 2
            for where, (ln, ch) in {"end": (last, width), "middle": (mid, 3), "outside": (last + 5, 0)}.items():
                def one(uri=uri, ln=ln, ch=ch):
                    r = s.response(s.inline(uri, ln, ch), ANSWER_S * 3)
                    self.record(s, [r["id"]], self.completion_ms)
                    return "result" in r
                self.check("documents", f"{name} at the {where}", one)
            self.peaks["after " + name] = vm_kib(s.proc.pid, "VmHWM")
            s.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
        self.check("documents", "alive after the odd documents", lambda: self.alive(s))

    def edits(self, s: RawServer) -> None:
        pieces = ["x", "", "\n", "\r", "\r\n", "😀", "é", "(", ")", "    ", "ab\r\ncd", "\n\r"]
        docs = {f"file:///edits/{k}.py": start for k, start in enumerate(
            ["import os\rx = 1\r", "a = 1\r\nb = 2\nc = 3\r", "", "def f():\n    return 1\n"])}
        versions = {uri: 1 for uri in docs}
        for uri, text in docs.items():
            s.open(uri, text)
        for k in range(1, self.args.edits + 1):
            uri = self.rng.choice(list(docs))
            text = docs[uri]
            lines = lsp_lines(text)
            l0 = self.rng.randrange(len(lines))
            l1 = min(len(lines) - 1, l0 + self.rng.choice([0, 0, 0, 1, 2]))
            c0 = self.rng.randint(0, lines[l0][1] - lines[l0][0] + 1)
            c1 = self.rng.randint(0, lines[l1][1] - lines[l1][0] + 1) if l1 > l0 else self.rng.randint(c0, c0 + 3)
            new = self.rng.choice(pieces)
            a, b = lsp_offset(text, l0, c0), lsp_offset(text, l1, c1)
            docs[uri] = text[:a] + new + text[max(a, b):]
            versions[uri] += 1
            s.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": versions[uri]}, "contentChanges": [
                {"range": {"start": {"line": l0, "character": c0}, "end": {"line": l1, "character": c1}}, "text": new}]})
            if k % 100 == 0:
                ask = s.inline(uri, l0, c0)
                r = s.response(ask, ANSWER_S)
                self.record(s, [ask], self.completion_ms)
                self.probe("edits", f"completion after edit {k}", "result" in r)
            if k % 500 == 0 or k == self.args.edits:
                def same(k=k):
                    held = s.call("workspace/executeCommand", {"command": "syntaxlock.status"}, ANSWER_S)["result"]["documents"]
                    return all(held[u]["blake2b"] == text_digest(t) and held[u]["lines"] == len(lsp_lines(t)) for u, t in docs.items())
                self.check("edits", f"in sync after {k} edits", same)
        self.probe("edits", "every edit applied", "not applied" not in s.log_text())

    def burst(self, s: RawServer) -> None:
        uris = [f"file:///burst/{k}.py" for k in range(5)]
        texts = {u: "import os\n\n\ndef join(parts):\n    return os.path.join(*parts)\n\n\nname = os.pa" for u in uris}
        versions = {u: 1 for u in uris}
        for u in uris:
            s.open(u, texts[u])
        ids, cancelled = [], set()
        for k in range(self.args.burst):
            u = self.rng.choice(uris)
            if self.rng.random() < 0.3:
                versions[u] += 1
                texts[u] += "t"
                s.notify("textDocument/didChange", {"textDocument": {"uri": u, "version": versions[u]},
                                                    "contentChanges": [{"text": texts[u]}]})
            line = texts[u].count("\n")
            msg_id = s.inline(u, line, len(texts[u]) - texts[u].rfind("\n") - 1, msg_id=f"b{k}")
            ids.append(msg_id)
            roll = self.rng.random()
            if roll < 1 / 3:
                s.notify("$/cancelRequest", {"id": msg_id})
                cancelled.add(msg_id)
            elif roll < 2 / 3 and ids[:-1]:
                earlier = self.rng.choice(ids[:-1])
                s.notify("$/cancelRequest", {"id": earlier})
                cancelled.add(earlier)
        try:
            s.responses_for(ids, ANSWER_S * 3)
        except Exception:
            pass
        s.drain(0.5)
        counts = {i: 0 for i in ids}
        for m in s.received:
            if "method" not in m and m.get("id") in counts:
                counts[m["id"]] += 1
        for i in ids:
            self.probe("burst", f"request {i} answered once", counts[i] == 1, f"{counts[i]} answers")
        self.record(s, [i for i in ids if i not in cancelled], self.completion_ms)
        self.record(s, [i for i in ids if i in cancelled], self.cancelled_ms)
        self.check("burst", "alive after the burst", lambda: self.alive(s))

    def settings(self, s: RawServer) -> None:
        uri = "file:///settings.py"
        s.open(uri, "import os\n\n\ndef join(parts):\n    return os.path.join(*parts)\n\n\nname = os.pa")
        refused = [("seed", 2**64), ("seed", 1e300), ("seed", -1), ("temperature", 1e-300), ("temperature", -1),
                   ("temperature", 1e300), ("topP", 0), ("topP", 2), ("maxTokens", 4096), ("maxTokens", 0),
                   ("contextTokens", 10**9), ("mode", "sideways"), ("device", "tpu"), ("enabled", "yes"),
                   ("maxTokens", "many"), ("temperature", [1]), ("seed", {"a": 1}), ("model", ""), ("canonical", 3)]
        for key, value in refused:
            def one(key=key, value=value):
                seen = len(s.received)
                s.notify("workspace/didChangeConfiguration", {"settings": {"syntaxlock": {key: value}}})
                s.wait_for(lambda m: m.get("method") == "window/showMessage" and f"syntaxlock.{key}" in m["params"]["message"]
                           and m in s.received[seen:], ANSWER_S)
                ask = s.inline(uri, 7, 12)
                r = s.response(ask, ANSWER_S)
                self.record(s, [ask], self.completion_ms)
                return "result" in r
            self.check("settings", f"refused {key}={str(value)[:20]}", one)
        extremes = [{"seed": 2**53 - 1, "temperature": 0.01}, {"temperature": 5, "topP": 1e-9}, {"contextTokens": 16},
                    {"maxTokens": 1024, "mode": "multi"}, {"maxTokens": 1, "mode": "auto"}, {"seed": 0, "temperature": 1, "topP": 0.5}]
        for ext in extremes:
            def one(ext=ext):
                s.notify("workspace/didChangeConfiguration", {"settings": {"syntaxlock": ext}})
                ask = s.inline(uri, 7, 12)
                r = s.response(ask, ANSWER_S * 3)
                self.record(s, [ask], self.completion_ms)
                return "result" in r and "completion failed" not in s.log_text()
            self.check("settings", f"extreme {ext}", one)
        s.notify("workspace/didChangeConfiguration", {"settings": {"syntaxlock": self.options() | {
            "seed": None, "temperature": 0, "topP": 1}}})

    def shutdown(self) -> None:
        off = {"enabled": False}

        def after_shutdown():
            with RawServer() as s:
                s.initialize(off, wait="disabled")
                s.call("shutdown")
                ok = s.call("workspace/executeCommand", STATS)["error"]["code"] == -32600
                s.notify("exit")
                return ok and s.wait_exit() == 0
        self.check("shutdown", "requests after shutdown get -32600, exit gives 0", after_shutdown)

        def exit_without():
            with RawServer() as s:
                s.initialize(off, wait="disabled")
                s.notify("exit")
                return s.wait_exit() == 1
        self.check("shutdown", "exit without shutdown gives 1", exit_without)

        def before_initialize():
            with RawServer() as s:
                ok = s.call("workspace/executeCommand", STATS)["error"]["code"] == -32002
                s.notify("exit")
                return ok and s.wait_exit() == 1
        self.check("shutdown", "requests before initialize get -32002", before_initialize)
        for shut, code in ((True, 0), (False, 1)):
            def end_of_input(shut=shut, code=code):
                with RawServer() as s:
                    s.initialize(off, wait="disabled")
                    if shut:
                        s.call("shutdown")
                    s.proc.stdin.close()
                    return s.wait_exit() == code
            self.check("shutdown", f"end of input {'after' if shut else 'without'} shutdown gives {code}", end_of_input)

        def closed_output():
            env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
            proc = subprocess.Popen(server_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, cwd=ROOT, env=env, bufsize=0)
            try:
                proc.stdin.write(frame({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                        "params": {"capabilities": {}, "initializationOptions": off}}))
                proc.stdout.read(1)
                proc.stdout.close()
                return proc.wait(timeout=60) == 1
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
        self.check("shutdown", "a closed output ends the server with 1", closed_output)

    def stores(self) -> None:
        from mask_store.loading import load_compiled, load_store
        from mask_store.store import MaskStoreError

        compiled, tok = load_compiled(self.args.model_path if self.args.model != "tiny" else "default")
        with tempfile.TemporaryDirectory() as tmp:
            good = compiled.store.save(Path(tmp) / "good.safetensors")
            data = good.read_bytes()
            body = 8 + struct.unpack("<Q", data[:8])[0]
            for k in range(self.args.flips):
                pos = self.rng.randrange(body) if k % 3 == 0 else self.rng.randrange(body, len(data))
                damaged = bytearray(data)
                damaged[pos] ^= 1 << self.rng.randrange(8)
                path = Path(tmp) / "flipped.safetensors"
                path.write_bytes(bytes(damaged))

                def one(path=path):
                    try:
                        load_store(path, tokenizer_hash=tok.vocab.hash, vocab_size=tok.vocab.size)
                        return False
                    except MaskStoreError:
                        return True
                self.check("stores", f"flip at byte {pos} ({'header' if pos < body else 'arrays'}) refused", one)
            damaged = bytearray(data)
            damaged[(body + len(data)) // 2] ^= 8
            path = Path(tmp) / "damaged.safetensors"
            path.write_bytes(bytes(damaged))

            def server_says_so():
                with RawServer() as s:
                    s.initialize(self.options() | {"store": str(path)}, wait="error")
                    return "corrupt" in s.status("error")["params"]["message"]
            self.check("stores", "a server on a damaged store reports the error", server_says_so)

    # ------------------------------------------------------------------ run

    def run(self) -> dict:
        t0 = time.perf_counter()
        with RawServer() as s:
            s.initialize(self.options())
            for name in ("frames", "messages", "documents", "edits", "burst", "settings"):
                try:
                    getattr(self, name)(s)
                except Exception as e:  # a category that could not finish is one failure, and the rest runs
                    self.probe(name, "category finished", False, f"{type(e).__name__}: {e}"[:300])
            self.check("server", "alive at the end", lambda: self.alive(s))
            peak = vm_kib(s.proc.pid, "VmHWM")
            self.probe("server", "never died", s.proc.poll() is None)
        self.shutdown()
        self.stores()
        failed = [f"{c}/{n}: {d}" for c, n, ok, d in self.results if not ok]
        cats: dict[str, dict] = {}
        for c, _, ok, _ in self.results:
            d = cats.setdefault(c, {"probes": 0, "failures": 0})
            d["probes"] += 1
            d["failures"] += 0 if ok else 1
        return {
            "model": self.args.model, "model_path": self.args.model_path, "server_settings": self.options(),
            "probes": len(self.results), "failures": len(failed), "failed": failed[:50], "by_category": cats,
            "peak_rss_mib": round(peak / 1024, 1),
            "peak_rss_mib_after": {k: round(v / 1024, 1) for k, v in self.peaks.items()},
            "latency_ms": {"completion": stats_ms(self.completion_ms) if self.completion_ms else None,
                           "cancelled_completion": stats_ms(self.cancelled_ms) if self.cancelled_ms else None,
                           "command": stats_ms(self.command_ms) if self.command_ms else None},
            "seconds": round(time.perf_counter() - t0, 1), "load_average": list(os.getloadavg()),
            "seed": self.args.seed, "edits": self.args.edits, "burst": self.args.burst,
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny", help="tiny (the tests' random-weight model), default, or a model directory")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--edits", type=int, default=2000)
    ap.add_argument("--burst", type=int, default=200)
    ap.add_argument("--frame-mutations", type=int, default=40)
    ap.add_argument("--random-messages", type=int, default=60)
    ap.add_argument("--flips", type=int, default=100)
    ap.add_argument("--verbose", action="store_true", help="each failure on stderr as it happens")
    args = ap.parse_args()
    if args.model == "tiny":
        from model_support import make_tiny_model_dir

        from grammar_tools import cache

        args.model_path = str(make_tiny_model_dir(cache.cache_dir() / "tiny-model"))
    else:
        args.model_path = args.model
    print(json.dumps(Campaign(args).run(), indent=1))


if __name__ == "__main__":
    main()
