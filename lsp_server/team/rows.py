"""The grammar's side of one team request on the server: `TeamRow` (its matcher and stop
policy, fed the tokens the serving engine sampled) over `TeamGrammar` (the mask store of the
served model's tokenizer, loaded once per process). No vLLM here: the processor
(`vllm_processor.py`) holds one row per request of its batch, and the tests drive rows
directly against the local engine's matcher.

A row's step: the tokens sampled since the last step are accepted by the matcher and shown to
the stop policy, as the local decoding loop does (`decoding/loop.py: _Decoding.commit`); then
either the next mask (`GrammarMatcher.next_token_mask`, the healed bytes and canonical
tokenization included) or None, which means "end here": the processor then allows only the
end token, so the answer ends where the policy ended it. What the server can't do as the
local loop does, and why (docs/team.md):

- no whole-file check: the policy asks a `RestOfFile` whose check accepts every cut, so it
  stops at the first line end (single-line) or block end (multi-line) the grammar allows; the
  local server replays the returned tokens through its own policy, with the checks, and picks
  the offer (`remote_engine.py`);
- no rejection: a sampled token can't be taken back, so where the local policy would reject
  it (a line end where the file can't go on, an f-string field the matcher refuses after the
  fact) the answer ends; the local offer search asks again with that token avoided;
- no fast-forward: a token the grammar forces is still one step of the batch (the mask leaves
  it alone, so the answer is the same); vLLM has no way for a logits processor to append
  several tokens at once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np

from mask_store.compiled import CompiledGrammar
from mask_store.matcher import GrammarMatcher, start_configs

from ..decoding.stopping.policy import Stop, Verdict, StopPolicy
from ..decoding.stopping.rest_of_file import LineScanner
from .wire import TeamArgs, TeamArgsError

log = logging.getLogger(__name__)


class _EveryCutValid:
    """The server's stand-in for the whole-file check: every cut keeps the file valid (the
    local server checks the returned text against the whole file)."""

    ms = 0.0
    checks = 0

    @staticmethod
    def ok(completion: bytes) -> bool:
        return True


EVERY_CUT_VALID = _EveryCutValid()


class TeamGrammar:
    """The compiled grammar of the served model's tokenizer (loaded or built once per
    process), one per target Python version on demand, and what every row shares."""

    def __init__(self, compiled: CompiledGrammar) -> None:
        self.compiled = compiled
        self._versions = {compiled.recognizer.python_version: compiled}
        self.scanner = LineScanner(compiled.lexer)
        vocab = compiled.vocab
        self.stop_tokens = frozenset(int(i) for i in vocab.eos) | frozenset(vocab.special)
        self.end_token = min(int(i) for i in vocab.eos) if len(vocab.eos) else -1
        self.grammar_hash = compiled.lexer.hash
        self.tokenizer_hash = vocab.hash
        self.V = compiled.V

    @classmethod
    def load(cls, model: str, store: str | None = None) -> TeamGrammar:
        from mask_store.loading import load_compiled

        t0 = time.perf_counter()
        compiled, _ = load_compiled(model, store)
        log.info("syntaxlock: mask store for %s ready in %.1f s", model, time.perf_counter() - t0)
        return cls(compiled)

    def for_version(self, version: tuple[int, int]) -> CompiledGrammar:
        compiled = self._versions.get(version)
        if compiled is None:
            compiled = self._versions[version] = self.compiled.for_version(version)
        return compiled

    def check(self, args: TeamArgs) -> None:
        """TeamArgsError where the request was prepared for another grammar or tokenizer."""
        if args.grammar_hash and args.grammar_hash != self.grammar_hash:
            raise TeamArgsError(f"the request's grammar {args.grammar_hash[:12]} is not this server's "
                                f"{self.grammar_hash[:12]}: update syntaxlock on one side")
        if args.tokenizer_hash and args.tokenizer_hash != self.tokenizer_hash:
            raise TeamArgsError(f"the request was prepared for tokenizer {args.tokenizer_hash[:12]}, this server "
                                f"serves {self.tokenizer_hash[:12]}: point the editor at the team server's model")


@dataclass
class RowStats:
    steps: int = 0
    ms: list[float] = field(default_factory=list)  # per step: accept the new tokens + the next mask


class TeamRow:
    """One request's grammar state on the server (module docstring)."""

    def __init__(self, grammar: TeamGrammar, args: TeamArgs) -> None:
        grammar.check(args)
        compiled = grammar.for_version(args.python_version)
        self.grammar = grammar
        self.args = args
        if not all(compiled.recognizer.is_stack(node) for node in args.configs):
            raise TeamArgsError("parse state: a stack this grammar's table cannot make (a client of another "
                                "syntaxlock version?)")
        state = args.prefix_state()
        self.matcher = GrammarMatcher(compiled, start_configs(compiled, state, args.held), args.heal,
                                      prefix_state=state, canonical=args.canonical)
        self.policy = StopPolicy(args.rest_of_file(EVERY_CUT_VALID), grammar.scanner, args.held, args.heal,
                                 args.start_depth, args.start)
        self.generated = bytearray()
        self.seen = 0  # output tokens taken so far (the engine's list of the request's outputs)
        self.ended: str | None = None  # why the answer ends (None: it goes on)
        self.avoid = set(args.avoid)  # banned at the first decided step
        self.end_token = args.end_token if args.end_token >= 0 else grammar.end_token
        self.stats = RowStats()
        for t in args.replay:
            self._take(int(t))
            if self.ended:
                break

    def _take(self, token: int) -> None:
        if self.ended:
            return
        if token in self.grammar.stop_tokens:
            self.ended = "eos"
            return
        if not self.matcher.accept_token(token):
            self.ended = "rejected"  # inside an f-string field: the local search decides
            return
        self.generated.extend(self.matcher.compiled.tokens[token])
        decision = self.policy.after_token(bytes(self.generated))
        if isinstance(decision, Stop):
            self.ended = str(decision.reason)
        elif decision is Verdict.REJECT:
            self.ended = "policy-reject"

    def step(self, outputs) -> np.ndarray | None:
        """The tokens in `outputs` (the request's output so far) past those seen taken, then the
        mask of the next token (None: the answer ends here: only the end token)."""
        t0 = time.perf_counter()
        n = len(outputs)
        for i in range(self.seen, n):
            self._take(int(outputs[i]))
        if n > self.seen and self.avoid:
            self.avoid = set()  # the first decided step is past
        self.seen = n
        mask = None
        if not self.ended:
            mask = self.matcher.next_token_mask()
            if self.avoid:
                mask = mask.copy()
                mask[[t for t in self.avoid if t < len(mask)]] = False
            if not mask.any():
                self.ended, mask = "no-continuation", None
        self.stats.steps += 1
        self.stats.ms.append((time.perf_counter() - t0) * 1000)
        return mask
