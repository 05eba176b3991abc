"""The local server's HTTP client for a team server: one OpenAI-style `/v1/completions` call per
decoding pass, bounded by the request's latency budget, and a back-off while the server is
down so that an editor never waits on a dead host.

Standard library only (`http.client`, one kept-alive connection, used by the engine's one
worker thread): the local product gains no dependency. Each call carries the document's URI in
`AFFINITY_HEADER` (and `DOCUMENT_HEADER`) so that a router in front of several replicas (docs/team.md) sends all of a
document's requests to the replica that holds its prefix in its KV cache.

Failures (refused, reset, timed out, HTTP errors, answers that are not vLLM's) raise
`TeamUnavailable` with the reason; after one that says the server is down (refused, reset,
HTTP errors), calls are refused at once (no network) for a back-off that starts at
`BACKOFF_S[0]` and doubles up to `BACKOFF_S[1]`, then one call tries again: the editor gets
empty answers while the server is down and real ones as soon as it answers again, without a
restart. A server that is reached but busy (nothing within the request's time) gets no
back-off: the next request may find its prompt cached.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

DOCUMENT_HEADER = "X-Syntaxlock-Document"  # the document's URI, for the team server's logs
AFFINITY_HEADER = "X-Session-ID"  # the same URI as the session key vllm-router's consistent_hash policy reads
BACKOFF_S = (0.5, 8.0)  # first and longest wait after a failure before the server is tried again
DEFAULT_TIMEOUT_S = 10.0  # a call without a latency budget (the CLI, tools)
MIN_TIMEOUT_S = 0.05  # a budget nearly spent still gets a short try
RETRIED = (502, 503, 504)  # a router's "the replica failed": the request is asked again once (it is idempotent)


class TeamUnavailable(RuntimeError):
    """The team server did not answer; the message says why (for the editor's status line).
    `busy`: it was reached but gave nothing within the time (no back-off: the next request,
    whose prompt may be cached already, is asked as usual)."""

    def __init__(self, message: str, busy: bool = False) -> None:
        super().__init__(message)
        self.busy = busy


@dataclass(frozen=True)
class TeamAnswer:
    tokens: list[int]  # the generated token ids (the forced end token included when the grammar ended it)
    finish_reason: str  # "stop" | "length" | "budget" (the deadline came first: the tokens so far)
    ms: float  # the call's wall time


def _unreachable(e: OSError | http.client.HTTPException) -> TeamUnavailable:
    """The team server's failure a socket or HTTP error says."""
    if isinstance(e, OSError):
        return TeamUnavailable(f"cannot reach it ({e.strerror or e})")
    return TeamUnavailable(f"a broken HTTP answer ({type(e).__name__})")


class TeamClient:
    """Calls to one team server (module docstring)."""

    def __init__(self, url: str, model: str | None = None, clock=time.monotonic) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"a team server URL is http(s)://host[:port], not {url!r}")
        self.url = url.rstrip("/")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.path = parts.path.rstrip("/") + "/v1/completions"
        self.models_path = parts.path.rstrip("/") + "/v1/models"
        self.model = model  # the served model's name (None: asked of /v1/models on first use)
        self.clock = clock
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()
        self._down_until = 0.0
        self._backoff = 0.0
        self.last_error: str | None = None  # None: the last call was answered
        self._started = 0.0

    # ------------------------------------------------------------------ connection

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
            self._conn = cls(self.host, self.port, timeout=timeout)
        self._conn.timeout = timeout
        if self._conn.sock is not None:
            self._conn.sock.settimeout(timeout)
        return self._conn

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _call(self, method: str, path: str, body: dict | None, timeout: float, headers: dict) -> dict:
        data = None if body is None else json.dumps(body).encode()
        hdrs = {"Content-Type": "application/json", **headers} if data else dict(headers)
        deadline = time.monotonic() + timeout
        for attempt in (0, 1):  # a kept-alive connection the server closed meanwhile: once more, fresh
            timeout = max(deadline - time.monotonic(), MIN_TIMEOUT_S) if attempt else timeout
            conn = self._connection(timeout)
            try:
                conn.request(method, path, body=data, headers=hdrs)
                resp = conn.getresponse()
                raw = resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self._close()
                if attempt == 0:
                    continue
                raise TeamUnavailable(f"the connection was closed ({type(e).__name__})") from None
            except TimeoutError:
                self._close()
                raise TeamUnavailable(f"no answer within {timeout * 1000:.0f} ms") from None
            except (OSError, http.client.HTTPException) as e:
                self._close()
                raise _unreachable(e) from None
            if resp.status in RETRIED and attempt == 0:
                continue  # a router whose replica died under this request: once more (another replica)
            if resp.status != 200:
                detail = raw[:300].decode("utf-8", errors="replace")
                raise TeamUnavailable(f"HTTP {resp.status}: {detail}")
            try:
                return json.loads(raw)
            except ValueError:
                raise TeamUnavailable("an answer that is not JSON") from None
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ calls

    def available(self) -> bool:
        """False while backing off after a failure (a call would be refused at once)."""
        return self.clock() >= self._down_until

    def served_model(self, timeout: float) -> str:
        if self.model is None:
            models = self._call("GET", self.models_path, None, timeout, {})
            try:
                self.model = str(models["data"][0]["id"])
            except (KeyError, IndexError, TypeError):
                raise TeamUnavailable("its /v1/models lists no model") from None
        return self.model

    def _stream(self, body: dict, headers: dict, deadline: float) -> tuple[list[int], str]:
        """POST a streaming completion; its tokens and finish reason ("budget": the deadline came
        first, the tokens so far; the connection is closed, which makes vLLM abort the request)."""
        data = json.dumps(body).encode()
        hdrs = {"Content-Type": "application/json", "Accept": "text/event-stream", **headers}
        for attempt in (0, 1):
            conn = self._connection(max(deadline - time.monotonic(), MIN_TIMEOUT_S))
            tokens: list[int] = []
            try:
                conn.request("POST", self.path, body=data, headers=hdrs)
                resp = conn.getresponse()
                if resp.status in RETRIED and attempt == 0:
                    resp.read()
                    continue  # a router whose replica died under this request: once more (another replica)
                if resp.status != 200:
                    detail = resp.read()[:300].decode("utf-8", errors="replace")
                    raise TeamUnavailable(f"HTTP {resp.status}: {detail}")
                reason = None
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError
                    conn.sock.settimeout(left)
                    line = resp.readline()
                    if not line:
                        break
                    line = line.strip()
                    if not line.startswith(b"data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        resp.read()  # the end of the chunked body: the connection stays usable
                        break
                    chunk = json.loads(payload)
                    if "error" in chunk:
                        raise TeamUnavailable(f"error: {str(chunk['error'])[:300]}")
                    choice = chunk["choices"][0]
                    tokens.extend(int(t) for t in choice.get("token_ids") or ())
                    reason = choice.get("finish_reason") or reason
                if reason is None:  # cut off before its end: the replica died under it (a router keeps the socket)
                    raise ConnectionResetError("the answer's stream was cut off")
                return tokens, str(reason)
            except TimeoutError:
                self._close()
                if tokens:
                    return tokens, "budget"
                raise TeamUnavailable(f"no answer within the budget ({(deadline - self._started) * 1000:.0f} ms)",
                                      busy=True) from None
            except (http.client.RemoteDisconnected, http.client.IncompleteRead, BrokenPipeError,
                    ConnectionResetError) as e:
                # a kept-alive connection the server closed, or a replica that died while it answered
                # (the router has taken it out by now): the whole request once more, if time is left
                self._close()
                if attempt == 0 and deadline - time.monotonic() > MIN_TIMEOUT_S:
                    continue
                raise TeamUnavailable(f"the connection was closed ({type(e).__name__})") from None
            except (OSError, http.client.HTTPException) as e:
                self._close()
                raise _unreachable(e) from None
            except (ValueError, KeyError, IndexError, TypeError):
                self._close()
                raise TeamUnavailable("an answer that is not vLLM's (no token ids: is it vLLM >= 0.10?)") from None
        raise AssertionError("unreachable")

    def warm(self, prompt: list[int], document: str, timeout: float = DEFAULT_TIMEOUT_S) -> bool:
        """Have the team server compute `prompt`'s KV cache now (one token, no grammar), so that
        the request that follows finds it in vLLM's prefix cache (the work ahead: the user looks
        at the code before asking). False where it did not answer (nothing else happens: the
        request will say so)."""
        try:
            self.complete(prompt, None, 1, -1, document, timeout)
            return True
        except TeamUnavailable:
            return False

    def complete(self, prompt: list[int], xargs: str | None, max_tokens: int, end_token: int, document: str,
                 timeout: float | None, temperature: float = 0.0, top_p: float = 1.0,
                 seed: int | None = None) -> TeamAnswer:
        """The model's tokens after `prompt` under the grammar (`xargs`: `TeamArgs.to_json()`;
        None: unconstrained), streamed; at the end of `timeout` the tokens so far (finish reason
        "budget"), or TeamUnavailable when none came (at once while backing off)."""
        with self._lock:
            now = self.clock()
            if now < self._down_until:
                raise TeamUnavailable(f"{self.last_error or 'down'}; trying again in {self._down_until - now:.1f} s")
            t = DEFAULT_TIMEOUT_S if timeout is None else max(timeout, MIN_TIMEOUT_S)
            t0 = time.perf_counter()
            self._started = time.monotonic()
            deadline = self._started + t
            try:
                body = {
                    "model": self.served_model(t),
                    "prompt": list(prompt),
                    "max_tokens": int(max_tokens),
                    "temperature": float(temperature),
                    "top_p": float(top_p),
                    "stop_token_ids": [int(end_token)] if end_token >= 0 else [],
                    "skip_special_tokens": False,
                    "return_token_ids": True,
                    "stream": True,
                }
                if xargs is not None:
                    body["vllm_xargs"] = {"syntaxlock": xargs}
                if seed is not None:
                    body["seed"] = int(seed)
                tokens, reason = self._stream(body, {DOCUMENT_HEADER: document, AFFINITY_HEADER: document}, deadline)
            except TeamUnavailable as e:
                self.last_error = str(e)
                if not e.busy:  # down (refused, reset, HTTP errors): no network for a while
                    self._backoff = BACKOFF_S[0] if not self._backoff else min(self._backoff * 2, BACKOFF_S[1])
                    self._down_until = self.clock() + self._backoff
                raise
            self.last_error = None
            self._backoff = 0.0
            self._down_until = 0.0
            return TeamAnswer(tokens, reason, (time.perf_counter() - t0) * 1000)
