"""A stand-in for a team server (vLLM's completions API with the syntaxlock processor), for the
team mode's tests: a scripted model whose logits go through the processor's `GrammarBatch`,
one greedy step at a time, as vLLM runs it; streamed as vLLM streams."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
from scripted_model import ScriptedRuntime

from lsp_server.team.batch import GrammarBatch
from lsp_server.team.client import DOCUMENT_HEADER
from lsp_server.team.rows import TeamGrammar


class StandIn:
    """vLLM's `/v1/models` and `/v1/completions` (token ids in, `token_ids` out, `vllm_xargs`
    to the logits processor) over a scripted model, greedy; `delay`: seconds before answering."""

    def __init__(self, grammar: TeamGrammar, port: int = 0) -> None:
        self.grammar = grammar
        self.runtime: ScriptedRuntime | None = None
        self.delay = 0.0  # before the first token
        self.stall_after = -1  # tokens sent before the stream stalls (-1: never)
        self.release = threading.Event()
        self.seen: list[dict] = []
        self.answers: list[dict] = []  # what each request got: for a failing test's message
        self.connections: set = set()  # open (kept-alive) connections: closed with the server
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                super().setup()
                stand_in.connections.add(self.connection)

            def finish(self):
                stand_in.connections.discard(self.connection)
                super().finish()

            def log_message(self, *args):
                pass

            def _send(self, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send({"data": [{"id": "stand-in"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stand_in.seen.append({"body": body, "document": self.headers.get(DOCUMENT_HEADER)})
                if stand_in.delay:
                    stand_in.release.wait(stand_in.delay)
                answer = stand_in.decode(body)
                if not body.get("stream"):
                    self._send(answer)
                    return
                # server-sent events, one token a chunk (`token_ids`: the delta), as vLLM streams
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                choice = answer["choices"][0]
                tokens = choice["token_ids"]
                for i, t in enumerate(tokens):
                    last = i == len(tokens) - 1
                    if i == stand_in.stall_after:
                        stand_in.release.wait(30)
                    event = {"choices": [{"token_ids": [t], "finish_reason": choice["finish_reason"] if last else None}]}
                    self._chunk(b"data: " + json.dumps(event).encode() + b"\n\n")
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")

            def _chunk(self, data: bytes) -> None:
                try:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading (its budget ran out)

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def decode(self, body: dict) -> dict:
        """What vLLM does with the request: a step, the processor's `apply`, the argmax."""
        V = self.grammar.V
        batch = GrammarBatch(self.grammar, V, max_rows=1)
        outputs: list[int] = []
        batch.add(0, body.get("vllm_xargs"), outputs)
        kind = type(batch.rows[0][0]).__name__ if 0 in batch.rows else None  # _EndedRow: refused
        ids = list(body["prompt"])
        stops = set(body["stop_token_ids"])
        reason = "length"
        for _ in range(body["max_tokens"]):
            logits, _ = self.runtime.forward(ids + outputs, None)
            row = logits[-1:].clone()
            batch.apply(row)
            token = int(torch.argmax(row[0]))
            outputs.append(token)
            if token in stops:
                reason = "stop"
                break
        batch.remove(0)
        self.answers.append({"row": kind, "tokens": outputs, "reason": reason, "prompt": ids})
        return {"choices": [{"token_ids": outputs, "finish_reason": reason}]}

    def close(self) -> None:
        """Stop as a crashed server stops: no new connections, the open ones cut."""
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        for conn in list(self.connections):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
