"""`TeamEngine`: the completion engine of a local server whose model runs on a team server.

Everything but the model stays here, as in the local engine (it *is* the local engine,
`CompletionEngine`, with one step replaced): the documents' prompts (same window, same token
healing), the parse of the text before the cursor, the rest of the file with its whole-file
checks, the offer search, the compiler gate, typing through a shown suggestion, the work ahead
(its prefill parses here and has the team server compute the prompt's KV cache, which vLLM's
prefix cache keeps for the request). The
one step replaced is the decoding pass (`TeamPasses.run`): instead of the local model, one call
to the team server with the prompt's ids and the grammar's starting point (`wire.TeamArgs`);
its tokens are then replayed here through the matcher and the stop policy *with* the
whole-file checks, so the stop, the offer and the result are made exactly as a local pass
makes them from the same tokens. A re-decoding pass of the offer search (`model_pass.Tries`) is one
more call, with the earlier pass's tokens to replay and its choice to avoid.

No model, no KV cache, no names analysis and no speculation run here (docs/team.md says what
the team server does instead). When the team server is slow or down, a pass gives an empty
answer within the request's latency budget (`client.TeamClient`: timeouts, back-off) and the
editor's status says why; it clears with the first answer.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from mask_store.loading import load_compiled

from ..decoding.budget import NO_BUDGET, Budget
from ..decoding.engine import CompletionEngine, stop_tokens
from ..decoding.loop import DecodeOutcome
from ..decoding.model_pass import pass_offer, EMPTY, Pass
from ..decoding.stopping.rest_of_file import Start, LineScanner
from ..decoding.stopping.policy import Stop, StopReason, Verdict, StopPolicy
from ..model.runtime import find_fim
from ..options import EngineOptions
from .client import TeamClient, TeamUnavailable
from .wire import TeamArgs

log = logging.getLogger(__name__)


@dataclass
class _Runtime:
    """What the engine reads of a model runtime when no model is loaded here."""

    tokenizer: object
    fim: object
    name: str
    device: str
    load_seconds: float = 0.0


class _NoPromptCache:
    """The prompt cache of an engine without a model: the team server's prefix cache keeps the
    prompts (its automatic prefix caching; the router keeps each document on one replica)."""

    stats = {"reused_tokens": 0, "computed_tokens": 0, "evicted": 0}

    def missing(self, key, ids) -> int:
        return 0  # the team server's prefix cache decides: no short first window here

    def prefill(self, key, ids, cancel=None, memory_mb=None, ahead=False, chunk=None, spare=False):
        return None, None, 0

    def move(self, key, to) -> None:
        pass

    def release(self, key, past, n) -> None:
        pass

    def forget(self, key) -> None:
        pass

    def documents(self) -> list:
        return []

    def memory_bytes(self) -> int:
        return 0


def replay_tokens(policy: StopPolicy, matcher, token_bytes, tokens: list[int], limit: int, finish_reason: str,
                  stop_tokens) -> DecodeOutcome:
    """The decoding outcome of `tokens` (the team server's, after the replayed ones) as the local
    loop makes it: each token accepted by the matcher and shown to the stop policy, which here
    has the whole-file checks. Where the local loop would have tried another token (the policy
    or the matcher rejects this one), the pass ends at the longest valid stop so far: the offer
    search asks the team server again with that token avoided."""
    out = DecodeOutcome([], b"", Stop(0, StopReason.MAX_TOKENS))
    generated = bytearray()
    stop = None
    for token in tokens:
        if token in stop_tokens:
            stop = policy.fallback(bytes(generated), StopReason.EOS, at_end=True)
            break
        if matcher is not None and not matcher.accept_token(token):
            out.rejected += 1
            stop = policy.fallback(bytes(generated), StopReason.LINE_END, at_end=False)
            break
        generated.extend(token_bytes[token])
        decision = policy.after_token(bytes(generated))
        if decision is Verdict.REJECT:
            del generated[len(generated) - len(token_bytes[token]) :]
            out.rejected += 1
            stop = policy.fallback(bytes(generated), StopReason.LINE_END, at_end=False)
            break
        out.tokens.append(token)
        out.sampled += 1
        if isinstance(decision, Stop):
            stop = decision
            break
    if stop is None:
        if finish_reason == "budget":  # the latency budget ended the call: the longest valid stop so far
            reason = StopReason.BUDGET
        elif finish_reason == "length" or len(out.tokens) >= limit:
            reason = StopReason.MAX_TOKENS
        else:
            reason = StopReason.EOS
        stop = policy.fallback(bytes(generated), reason, at_end=reason is StopReason.EOS)
    out.stop = stop
    out.generated = bytes(generated)
    return out


class TeamPasses:
    """Decoding passes on a team server (module docstring), as `model_pass.ModelPasses.run` makes
    them locally: same signature, same stop policy and offer search over the tokens."""

    def __init__(self, client: TeamClient, scanner: LineScanner, stop_tokens: frozenset[int]) -> None:
        self.client = client
        self.scanner = scanner
        self.stop_tokens = stop_tokens
        self.calls = {"answered": 0, "failed": 0, "ms": 0.0, "warmed": 0}
        self.failures: dict[str, int] = {}  # why calls failed (the first words of the reason), counted

    def run(self, r, matcher, logits, past, replay=(), avoid=frozenset(), limit=None, steer=None,
            budget: Budget = NO_BUDGET, start: Start = Start.CURSOR_LINE) -> Pass:
        """One decoding pass on the team server (module docstring): the prompt (and the tokens to
        replay) sent with the grammar's starting point; the tokens it returns replayed here
        through the stop policy with the whole-file checks, then the offer search."""
        limit = limit or r.max_tokens
        replay_ids = list(replay)
        end_token = min(int(i) for i in r.compiled.vocab.eos)
        xargs = None  # unconstrained (the `constrained: false` comparison): the model alone
        if matcher is not None:
            xargs = TeamArgs.build(matcher.prefix_state, r.held, r.heal, matcher.canonical,
                                   r.compiled.recognizer.python_version, r.rest, r.depth, start,
                                   replay_ids, avoid, r.compiled.lexer.hash, r.compiled.vocab.hash,
                                   end_token).to_json()
        # the budget of the line being written (`Budget.for_line`: at least the budget's span from
        # now); the tokens that came by then are replayed, and the rest is decoded in the
        # background as for a local answer the budget cut (`CompletionRequest.resume`)
        line_budget = (budget if budget.deadline is not None else r.req.budget).for_line()
        timeout = None if line_budget.deadline is None else line_budget.deadline - line_budget.clock()
        opts = r.opts
        t0 = time.perf_counter()
        try:
            answer = self.client.complete(list(r.prompt.ids) + replay_ids, xargs,
                                          max(limit - len(replay_ids), 1), end_token, r.req.document,
                                          timeout, opts.temperature, opts.top_p, opts.seed)
        except TeamUnavailable as e:
            self.calls["failed"] += 1
            kind = str(e).split("(")[0].split(";")[0].strip()
            self.failures[kind] = self.failures.get(kind, 0) + 1
            log.warning("team server %s: %s", self.client.url, e)
            return Pass(DecodeOutcome([], b"", Stop(0, StopReason.CANCELLED)), EMPTY)
        self.calls["answered"] += 1
        self.calls["ms"] += (time.perf_counter() - t0) * 1000
        policy = StopPolicy(r.rest, self.scanner, r.held, r.heal, r.depth, start, r.line_head)
        outcome = replay_tokens(policy, matcher, r.compiled.tokens, replay_ids + answer.tokens, limit,
                                answer.finish_reason, self.stop_tokens)
        return Pass(outcome, pass_offer(r, self.scanner, outcome))


class TeamEngine(CompletionEngine):
    """A `CompletionEngine` whose decoding passes run on a team server (module docstring)."""

    def __init__(self, options: EngineOptions, compiled, tokenizer, client: TeamClient) -> None:
        runtime = _Runtime(tokenizer, find_fim(tokenizer), f"{options.model} on {client.url}", f"team {client.url}")
        self.client = client
        self.team = TeamPasses(client, LineScanner(compiled.lexer), stop_tokens(tokenizer.vocab))
        self.calls = self.team.calls  # answered, failed, their ms, the work ahead's warm-ups
        self.failures = self.team.failures
        super().__init__(options, runtime, compiled, prompt_cache=_NoPromptCache(), passes=self.team)
        self._status_lock = threading.Lock()
        self._reported = ""  # the team server's last error reported to the editor ("": none, ready)
        # the work ahead's calls: their own connection and thread, never in a request's way
        self._warm_client = TeamClient(client.url, client.model)
        self._warming = threading.Lock()

    @classmethod
    def load(cls, options: EngineOptions | None = None, progress=None) -> TeamEngine:
        """The mask store and tokenizer of `options.model` (the team server's model: the same
        tokenizer), no model. The team server is not called here: a server that is down now
        only makes the first answers empty."""
        options = (options or EngineOptions()).validated()
        if not options.team_server:
            raise ValueError("a team engine needs options.team_server (the team server's URL)")
        report = progress or (lambda message, fraction: None)
        report(f"loading the mask store for the team server {options.team_server}", 0.3)
        compiled, tok = load_compiled(options.model, options.store, progress=False)
        report("ready", 1.0)
        return cls(options, compiled, tok, TeamClient(options.team_server))

    def describe(self) -> dict:
        return super().describe() | {"team_server": self.client.url, "team_calls": dict(self.calls)}

    # ------------------------------------------------------------------ hooks

    def prefill(self, request, cancel=None, options=None):
        """The work ahead (`CompletionEngine.prefill`: the prompt and the parse here), and the
        team server asked to compute the prompt's KV cache meanwhile (one token, on a thread and
        a connection of its own, one at a time), so that the request finds it in vLLM's prefix
        cache."""
        done = super().prefill(request, cancel, options)
        if done.complete and not (cancel and cancel()) and self._warming.acquire(blocking=False):
            with self._lock:
                prompt = self.prompt(request, options)
            threading.Thread(target=self._warm, args=(list(prompt.ids), request.document), daemon=True,
                             name="syntaxlock-team-warm").start()
        return done

    def _warm(self, ids: list[int], document: str) -> None:
        try:
            if self._warm_client.warm(ids, document):
                self.calls["warmed"] += 1
        finally:
            self._warming.release()

    def status_change(self) -> tuple[str, str] | None:
        """The team server's health when it changed since last asked: ("error", why) once it
        stops answering, ("ready", ...) once it answers again; None: no change
        (`EngineHost` reports it to the editor after each completion)."""
        error = self.client.last_error or ""
        with self._status_lock:
            if error == self._reported:
                return None
            self._reported = error
        if error:
            return "error", (f"the team server {self.client.url} does not answer ({error}): suggestions are empty "
                             "until it does; trying again on its own")
        return "ready", f"model {self.options.model} on the team server {self.client.url}"
