"""`GrammarMatcher`: the per-completion runtime that says which tokens may come next.

Stages, as in XGrammar: `Vocabulary` -> `MaskStore` (offline) -> `CompiledGrammar` (compiled.py:
the store loaded with the recognizer and lexer, shared by all requests) -> `GrammarMatcher` (here:
one per completion, cheap to create; what a completion's masks did is counted in its
`MaskCounts`).

A matcher holds a set of configurations `(q, node, width)`: NFA state q (a class of lexer
configurations (X, d) that read every token alike, walked from its representative d), the parser
node after everything announced so far (X included), and the indentation width typed so far
when the open lexeme is a newline. A token moves each configuration (`advance`: the token's
bytes through the lexer, `walk`, each lexeme they complete fed to the parser, the
open one announced); `next_token_mask()` ORs the configurations' masks
(`CompiledGrammar.config_bits`, memoized by parser context), then applies healing, the end of
sequence and canonical tokenization in words.

Canonical tokenization (mask_store.canonical, on when the matcher is given a `CanonicalState`
other than `OFF`): the mask is also ANDed with the tokens that keep the generated sequence one
the tokenizer would produce. Where that leaves nothing the grammar alone allows, the step falls
back to the grammar's mask and counts it (`MaskCounts.canonical_fallbacks`, the completion's own).

Error policy: `accept_token` returns False for a token the grammar rejects (the state is
unchanged; canonicality is the mask's business, not a reason to reject: a fallback step's token
is accepted); misuse (rollback past the start, an id outside the vocabulary) raises ValueError;
there is never a silent fallback to unconstrained decoding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from grammar_tools.lexing.lexer_automaton import LexError, LexerAutomaton
from grammar_tools.parsing.incremental import PrefixParser, PrefixState, extend_width, parse_prefix
from grammar_tools.parsing.recognizer import Node

from . import bits
from .canonical import OFF, CanonicalState
from .compiled import CompiledGrammar


@dataclass
class MaskCounts:
    """What one completion's masks did under canonical tokenization, shared by a matcher and
    its forks (and by the matchers of one request where the caller hands the same record):
    masks ANDed with the canonical pairs, and steps where that left nothing the grammar allows
    but the end, so the grammar's mask was used alone."""

    canonical_masks: int = 0
    canonical_fallbacks: int = 0


@dataclass(frozen=True)
class Config:
    q: int
    node: Node
    width: tuple[int, int] | None  # the open newline's indentation so far
    held: bytes = b""  # the open lexeme so far when it is an f-/t-string (its fields are checked)
    # `node.key()`, made once with the configuration: the masks' memo and the dedupe read it
    node_key: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_key", self.node.key())


# ------------------------------------------------------------------ transitions


@dataclass(frozen=True)
class TokenWalk:
    """A token read from lexer state `d`.

    first_end: offset where the current lexeme ends (None: it grows through the whole token);
    first_state: the lexer state there (or at the token's end if it doesn't end);
    lexemes: the complete lexemes after it, as (start, end, state);
    final_start, final_state: the open lexeme at the token's end (if first_end is not None)."""

    first_end: int | None
    first_state: int
    lexemes: tuple[tuple[int, int, int], ...]
    final_start: int
    final_state: int


def walk(lexer: LexerAutomaton, d: int, data: bytes) -> TokenWalk | None:
    """Read `data` from state `d` (`LexerAutomaton.lexemes`, as `token_lexing` reads the whole
    vocabulary); None if the lexer dies (a lexical error)."""
    lexemes = lexer.lexemes(data, d)
    try:
        _, first_end, first_state = next(lexemes)
        if first_end == len(data):  # the lexeme grows through the whole token
            lexemes.close()  # (its open lexeme is read no further)
            return TokenWalk(None, first_state, (), 0, first_state)
        rest = tuple(lexemes)
    except LexError:
        return None
    final_start, _, final_state = rest[-1]
    return TokenWalk(first_end, first_state, rest[:-1], final_start, final_state)


def start_configs(comp: CompiledGrammar, st: PrefixState, held: bytes) -> list[Config]:
    """Configurations for the held-back lexeme of a parsed prefix (its bytes: `held`): one
    per terminal it may still become (announced, i.e. fed, now)."""
    d = st.lexer_state
    out = []
    for x in comp.lexer.possible_ids[d]:
        q = comp.q_index.get((x, d))
        if q is None:
            continue
        for node in st.configs:
            n = _announce(comp, node, x)
            if n is None:
                continue
            if x in comp.fields.terminals:
                if comp.fields.is_valid(held, node.ctx):
                    out.append(Config(q, n, None, held))
            else:
                out.append(Config(q, n, st.newline_width if x == comp.NL else None))
    return out

def _announce(comp: CompiledGrammar, node: Node, x: int, width: tuple[int, int] | None = None) -> Node | None:
    """`node` after the terminal `x` of a lexeme (a newline's indentation: `width`, when known):
    the matcher's one door to the recognizer's feeding, memoized on the node."""
    return comp.recognizer.feed_terminal(node, x, width, cached=True)


def _complete(comp: CompiledGrammar, node: Node, state: int, data: bytes) -> list[Node]:
    """Nodes after a complete lexeme (one per terminal it may be)."""
    out = []
    fields = comp.fields
    for x in comp.lexer.accepting_ids[state]:
        if x in fields.terminals and not fields.is_valid(data, node.ctx):
            continue
        n = _announce(comp, node, x, extend_width(None, data) if x == comp.NL else None)
        if n is not None:
            out.append(n)
    return out


def advance(comp: CompiledGrammar, c: Config, data: bytes) -> list[Config]:
    """Configurations after token bytes `data` from `c` (empty: the token is rejected)."""
    x, d = comp.q_term[c.q], comp.q_state[c.q]
    w = walk(comp.lexer, d, data)
    if w is None:
        return []
    rec = comp.recognizer
    fields = comp.fields
    is_field = x in fields.terminals
    if w.first_end is None:
        q = comp.q_index.get((x, w.first_state))
        if q is None:
            return []
        if is_field:
            held = c.held + data
            return [Config(q, c.node, None, held)] if fields.is_valid(held, c.node.ctx) else []
        width = extend_width(c.width, data) if x == comp.NL else None
        return [Config(q, c.node, width)]
    if not comp.lexer.accepting[w.first_state] >> x & 1:
        return []
    if is_field and not fields.is_valid(c.held + data[: w.first_end], c.node.ctx):
        return []
    node = c.node
    if x == comp.NL and node.depth == 0:
        col, alt = extend_width(c.width, data[: w.first_end])
        node = rec.feed_indentation(node, col, alt)
        if node is None:
            return []
    nodes = [node]
    for a, b, st in w.lexemes:
        nodes = [n2 for n in nodes for n2 in _complete(comp, n, st, data[a:b])]
        if not nodes:
            return []
    out = []
    fs = w.final_state
    tail = data[w.final_start :]
    for x2 in comp.lexer.possible_ids[fs]:
        q = comp.q_index.get((x2, fs))
        if q is None:
            continue
        is_field = x2 in fields.terminals
        for n in nodes:
            n2 = _announce(comp, n, x2)
            if n2 is None:
                continue
            if is_field:
                if fields.is_valid(tail, n.ctx):
                    out.append(Config(q, n2, None, tail))
            else:
                out.append(Config(q, n2, extend_width(None, tail) if x2 == comp.NL else None))
    return out

def can_end(comp: CompiledGrammar, c: Config) -> bool:
    """Whether the text may end in configuration `c` (the open lexeme closed, then CPython's
    implicit NEWLINE and DEDENTs, then the end; never right after a line continuation, where
    CPython finds an unexpected end of file)."""
    x, d = comp.q_term[c.q], comp.q_state[c.q]
    if x == comp.CONT or not comp.lexer.accepting[d] >> x & 1:
        return False
    return comp.recognizer.can_end(c.node, after_newline=x == comp.NL)  # a newline was fed when announced


class MaskBuffer:
    """Memory a caller lends `GrammarMatcher.fill_next_token_mask` and reuses at every step of
    a decoding: `words`, the mask in bits ((W,) uint64, `bits`' layout), and `spare`, where the
    grammar's mask is kept while the canonical one is made from it. Each fill overwrites both."""

    __slots__ = ("words", "spare")

    def __init__(self, compiled: CompiledGrammar) -> None:
        self.words = np.zeros(compiled.W, dtype=np.uint64)
        self.spare = np.zeros(compiled.W, dtype=np.uint64)


def _dedupe(configs: list[Config]) -> list[Config]:
    if len(configs) < 2:
        return configs
    seen = {}
    for c in configs:
        seen.setdefault((c.q, c.node_key, c.width, c.held), c)
    return list(seen.values())


class GrammarMatcher:
    """Which tokens may come next in one completion; see the module docstring."""

    def __init__(self, compiled: CompiledGrammar, configs, heal: bytes = b"",
                 prefix_state: PrefixState | None = None, history: tuple | None = None,
                 canonical: CanonicalState = OFF, counts: MaskCounts | None = None) -> None:
        if canonical.active and compiled.canonical is None:
            raise ValueError("canonical tokenization asked of a grammar compiled without canonical pairs")
        self.compiled = compiled
        self.configs: tuple[Config, ...] = tuple(configs)
        self.heal = heal  # bytes the next tokens must spell again (token healing: `mask_store.healing`)
        self.prefix_state = prefix_state  # the parse of the text before the cursor (`from_prefix`)
        self.canonical = canonical  # the canonical state after the last token (OFF: not filtered)
        # earlier states, newest first, as a shared linked list: (configs, heal, canonical, older, count)
        self._history = history
        self.counts = counts if counts is not None else MaskCounts()  # the completion's, shared by forks

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_prefix(
        cls,
        compiled: CompiledGrammar,
        text: str | bytes,
        heal: bytes = b"",
        parser: PrefixParser | None = None,
        canonical: CanonicalState = OFF,
        counts: MaskCounts | None = None,
    ) -> GrammarMatcher:
        """A matcher for the text before the cursor (minus `heal`: bytes that the first tokens
        must spell again). Recovers from syntax errors before the cursor; raises
        `grammar_tools.parsing.incremental.ParseError`/`LexError` when it can't. `canonical`: the
        canonical state after the prompt's tokens kept (`CanonicalPairs.state_after`), or OFF.
        `counts`: a record to count into (one request's matchers sharing one), else a new one."""
        data = text.encode() if isinstance(text, str) else text
        parser = parser or PrefixParser(compiled.recognizer, compiled.lexer)
        st = parse_prefix(parser, data)
        held = data[st.lexeme_start : st.end]
        return cls(compiled, start_configs(compiled, st, held), heal, prefix_state=st, canonical=canonical,
                   counts=counts)

    def fork(self) -> GrammarMatcher:
        return GrammarMatcher(self.compiled, self.configs, self.heal, self.prefix_state, self._history,
                              self.canonical, self.counts)

    # ------------------------------------------------------------------ queries

    def next_token_mask(self, out: MaskBuffer | None = None) -> np.ndarray:
        """Bool array over the vocabulary: True for the tokens that may come next
        (`fill_next_token_mask` unpacked once; `out`: the caller's buffer for its words, reused
        step after step, else one made for this call). Does not change the matcher."""
        words = self.fill_next_token_mask(out if out is not None else MaskBuffer(self.compiled))
        return bits.unpack(words, self.compiled.V)

    def fill_next_token_mask(self, out: MaskBuffer) -> np.ndarray:
        """The tokens that may come next written into the caller's `out.words` ((W,) uint64,
        `bits`' layout; returned), as XGrammar fills a caller's bitmask: the configurations'
        memoized words ORed, then healing, the end of sequence and canonical tokenization
        applied in words (64 tokens a word), nothing allocated per step for the mask. Does
        not change the matcher."""
        comp = self.compiled
        words = out.words
        if not self.configs:
            words.fill(0)
            return words
        np.copyto(words, comp.config_bits(self.configs[0]))
        for c in self.configs[1:]:
            np.bitwise_or(words, comp.config_bits(c), out=words)
        if self.heal:
            words &= comp.memo.heal_words(self.heal)
        elif self.is_complete():
            words |= comp.eos_words
        if self.canonical.active:
            self._canonical(words, out.spare)
        return words

    def _canonical(self, words: np.ndarray, grammar: np.ndarray) -> None:
        """The grammar's mask `words` ANDed, in place, with the canonical pairs after the last
        token; left the grammar's alone (counted) where that leaves no token but the end of
        sequence while the grammar has others. `grammar`: room for a copy of the grammar's."""
        comp = self.compiled
        self.counts.canonical_masks += 1
        np.copyto(grammar, words)
        row = comp.canonical.allowed_after_bits(self.canonical)
        if row is not None:
            words &= row
        if self.heal:
            self._drop_dead_ends(words)
        end = words & comp.eos_words  # the end of sequence: the grammar's to allow (rows leave it alone)
        words &= comp.not_eos_words
        if words.any():
            words |= end
            return
        words |= comp.eos_words
        if not (grammar & ~words).any():  # the grammar allows no more than the end either
            words &= comp.not_eos_words
            words |= end
            return
        self.counts.canonical_fallbacks += 1  # nothing but the end left: the grammar decides alone
        np.copyto(words, grammar)

    def _drop_dead_ends(self, words: np.ndarray) -> None:
        """While healing: a token spelling only part of the healed bytes must leave a rest that
        tokens can go on spelling canonically after it (cleared in the mask's `words`).
        `\\n\\n   ` for a healed `\\n\\n        ` leaves five spaces that, after a whitespace
        run, only a lone space may start, after which the run must end; `un` for `undeclar`
        leaves `declar`, which every token would merge across (`und` `ecl` `ared`): taken, each
        would be followed by fallbacks. The tokenizer's own spelling of the healed bytes always
        goes on, so it is never dropped (the grammar is not asked about the rest;
        `CompiledGrammar.heal_goes_on` searches, memoized by state and rest across requests)."""
        comp = self.compiled
        pairs, heal, by = comp.canonical, self.heal, comp.vocab.by_bytes
        for k in range(1, len(heal)):
            t = by.get(heal[:k])
            if t is not None and bits.contains(words, t) and not comp.heal_goes_on(pairs.after(self.canonical, t),
                                                                                   heal[k:]):
                bits.clear_ids(words, [t])

    def is_complete(self) -> bool:
        """The text so far can end here: statements closed, brackets balanced."""
        return not self.heal and any(can_end(self.compiled, c) for c in self.configs)

    # ------------------------------------------------------------------ updates

    def accept_token(self, token: int) -> bool:
        comp = self.compiled
        if not 0 <= token < comp.V:
            raise ValueError(f"token id {token} outside the vocabulary ({comp.V})")
        if token in comp.vocab.special:
            return False
        data = comp.tokens[token]
        heal = self.heal
        if heal:
            if data.startswith(heal):
                heal = b""
            elif heal.startswith(data):
                heal = heal[len(data) :]
            else:
                return False
        new = [n for c in self.configs for n in advance(comp, c, data)]
        if not new:
            return False
        h = self._history
        self._history = (self.configs, self.heal, self.canonical, h, (h[4] + 1) if h else 1)
        self.configs = tuple(_dedupe(new))
        self.heal = heal
        if self.canonical.active:
            self.canonical = comp.canonical.after(self.canonical, token)
        return True

    def rollback(self, n: int = 1) -> None:
        if n < 0 or n > self.n_accepted:
            raise ValueError(f"can't roll back {n} tokens ({self.n_accepted} accepted)")
        for _ in range(n):
            self.configs, self.heal, self.canonical, self._history, _ = self._history

    @property
    def n_accepted(self) -> int:
        return self._history[4] if self._history else 0
