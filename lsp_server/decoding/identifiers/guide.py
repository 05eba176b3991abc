"""The one object the decoding step calls: `IdentifierGuide.shape(row, mask, matcher, generated)`
returns the step's logits and mask reshaped towards names that exist.

While an identifier is open or about to start (`slots.slot_at` on the text; the grammar matcher
says the text is not inside a string or a comment), the tokens that leave every known name
there (`bad`: they write identifier bytes no known name continues with, or end the identifier
on a name that is not known) lose `BIAS_NATS` of logit; in `CONSTRAIN` mode they are masked
instead where the analysis is sure: after a closed receiver (`analysis.Receiver.closed`) read in
an expression, and at a load outside brackets (`SlotKind.LOAD`) when the analysis' names are
closed (`analysis.NameSet.CLOSED`). A mask is only cut while a token towards a known name is
left in it: the analysis never refuses a completion. Binding places (`SlotKind.FREE`) and
`self.`/`cls.` at a statement's start (maybe an attribute being assigned) are left alone.

At a statement's start the name may be a new target: only the tokens that would read an
unknown name there (anything that ends it but `=`, `:` or `,`: `helper(`, `obj.`, `table[`,
`name + 1`) lose the bias, or are masked under the conditions of a load.

Known names: at a name read in an expression, the names in scope (`ScopeAnalysis.names`) and the
identifiers the cursor's line and the completion write (not after a dot: a name they bind,
`for item in items: total += item`); at a call's argument, also the keyword names the document
writes (`f(name=`); after `receiver.`, the receiver's attributes.
"""

from __future__ import annotations

import re
import time

import numpy as np
import torch

from .analysis import Names, NameSet, ScopeAnalysis
from .modes import IdentifierMode
from .slots import Slot, SlotKind, slot_at
from .token_index import IdentifierTokens

# what a token leaving every known name loses: measured on both code sets (docs/identifiers.md)
BIAS_NATS = 4.0
TAIL = 4000  # bytes of the text before the cursor the slots are read from (slots.WINDOW)
_STRING_TERMINALS = ("STRING", "LONG_STRING", "FSTRING", "LONG_FSTRING", "TSTRING", "LONG_TSTRING", "COMMENT")
_STRING_PREFIXES = frozenset(b"r b f u t rb br fr rf tr rt".split())
# a name as a load or a binding writes it (not an attribute: `self.data` does not bind `data`)
_IDENTIFIER = re.compile(rb"(?<![A-Za-z0-9_\x80-\xff.])[A-Za-z_\x80-\xff][A-Za-z0-9_\x80-\xff]*")
_QUOTED = re.compile(rb"'[^'\n]*'|\"[^\"\n]*\"")  # a string on one line: its words bind nothing
_OWN = (b"self", b"cls")


class IdentifierGuide:
    """Names analysis meets one completion's decoding (see the module docstring). Made per
    completion; `shape` is called once per sampled position."""

    def __init__(self, mode: IdentifierMode, scope: ScopeAnalysis, tokens: IdentifierTokens, compiled,
                 before: bytes) -> None:
        if mode is IdentifierMode.OFF:
            raise ValueError("an IdentifierGuide for identifiers 'off': decode without one")
        self.mode = mode
        self.scope = scope
        self.tokens = tokens
        self.before = before[-TAIL:]  # the text before the cursor, healed bytes not included
        self._line_start = self.before.rfind(b"\n") + 1  # the analysis read the lines before this one
        self._sure = scope.name_set is NameSet.CLOSED and mode is IdentifierMode.CONSTRAIN
        grammar = compiled.recognizer.grammar
        self._q_term = compiled.q_term
        self._name = grammar.term_id["NAME"]
        self._quiet = frozenset(grammar.term_id[n] for n in _STRING_TERMINALS if n in grammar.term_id)
        self._cache: dict = {}
        self.stats = {"shaped": 0, "masked": 0, "fallbacks": 0, "ms": 0.0}

    def shape(self, row: torch.Tensor, mask: np.ndarray, matcher, generated: bytes):
        """(logits, mask) for this step: unchanged, or as the module docstring says."""
        t0 = time.perf_counter()
        try:
            return self._shape(row, mask, matcher, generated)
        finally:
            self.stats["ms"] += (time.perf_counter() - t0) * 1000

    def _shape(self, row: torch.Tensor, mask: np.ndarray, matcher, generated: bytes):
        terms = {self._q_term[c.q] for c in matcher.configs}
        if terms & self._quiet:
            return row, mask
        text = self.before + generated
        slot = slot_at(text[-TAIL:])
        if slot.partial and self._name not in terms:
            return row, mask
        found = self._bad(slot, text)
        if found is None:
            return row, mask
        bad, good, closed = found
        n = min(len(bad), len(mask))
        hit = np.zeros(len(mask), dtype=bool)
        hit[:n] = bad[:n] & mask[:n]
        if not hit.any():
            return row, mask
        self.stats["shaped"] += 1
        if closed and self.mode is IdentifierMode.CONSTRAIN:
            if (good[:n] & mask[:n] & ~hit[:n]).any():  # a known name can still be written from here
                self.stats["masked"] += 1
                return row, mask & ~hit
            self.stats["fallbacks"] += 1
        shaped = row.clone()
        idx = torch.from_numpy(np.flatnonzero(hit)).to(row.device)
        shaped[idx] -= BIAS_NATS
        return shaped, mask

    def _bad(self, slot: Slot, text: bytes) -> tuple[np.ndarray, np.ndarray, bool] | None:
        """The tokens that leave every known name at `slot`, those that go on towards one,
        and whether the set is sure."""
        kind = slot.kind
        if kind in (SlotKind.NONE, SlotKind.FREE):
            return None
        if kind is SlotKind.STATEMENT:  # only a name that is read: `helper(`, `obj.`, `table[`
            p = slot.partial
            if not p or p in self.scope.names or p in self._written(text, p) or p.lower() in _STRING_PREFIXES:
                return None
            return self.tokens.reads_name, self.tokens.continues, self._sure
        spaced = kind in (SlotKind.NAME, SlotKind.ARGUMENT, SlotKind.LOAD)
        if kind in (SlotKind.ATTRIBUTE, SlotKind.ATTRIBUTE_TARGET):
            receiver = self.scope.receivers.get(slot.receiver)
            if receiver is None or (kind is SlotKind.ATTRIBUTE_TARGET and slot.receiver in _OWN):
                return None
            key = (kind, slot.receiver, slot.partial)
            if key not in self._cache:
                self._cache[key] = self._toward(receiver.attributes, slot.partial, spaced)
            good, known = self._cache[key]
            return self._leaving(good, known, slot.partial, spaced), good, receiver.closed and kind is SlotKind.ATTRIBUTE
        key = (kind, slot.partial)
        if key not in self._cache:  # the analysis' names: once per place and partial
            names = self.scope.names
            if kind is SlotKind.ARGUMENT:
                names = names.union(self.scope.document_names)
            self._cache[key] = self._toward(names, slot.partial, spaced)
        good, known = self._cache[key]
        extra = [n for n in self._written(text, slot.partial) if n.startswith(slot.partial) and n not in self.scope.names]
        if extra:  # names written since the analysis: few, checked every step
            more, known_more = self._toward(Names(extra), slot.partial, spaced)
            good, known = good | more, known or known_more
        return self._leaving(good, known, slot.partial, spaced), good, kind is SlotKind.LOAD and self._sure

    def _toward(self, names: Names, p: bytes, spaced: bool) -> tuple[np.ndarray, bool]:
        """The tokens towards the `names` that start with `p`, and whether `p` is one of them."""
        rests = [n[len(p) :] for n in names.with_prefix(p)]
        return self.tokens.toward(rests, spaced=spaced and not p), p in names

    def _leaving(self, good: np.ndarray, known: bool, p: bytes, spaced: bool) -> np.ndarray:
        """The tokens that write identifier bytes `good` does not hold, or end an unknown `p`."""
        tok = self.tokens
        if p:
            writing = tok.continues
            if not known and p.lower() not in _STRING_PREFIXES:
                writing = writing | tok.ends_name  # the identifier would end on a name that is not known
        else:
            writing = tok.starts_name | tok.spaced_start if spaced else tok.starts_name
        return writing & ~good

    def _written(self, text: bytes, partial: bytes) -> frozenset[bytes]:
        """The names the cursor's line (before the cursor) and the completion write before the one
        being written, attributes and one-line strings left out (names they bind: `for item in
        items: total += item`; the analysis read the other lines)."""
        return frozenset(_IDENTIFIER.findall(_QUOTED.sub(b"", text[self._line_start : len(text) - len(partial)])))
