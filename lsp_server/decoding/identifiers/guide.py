"""The one object the decoding step calls: `IdentifierGuide.shape(row, mask, matcher, generated)`
returns the step's logits and mask reshaped towards names that exist.

While an identifier is open or about to start (`slots.slot_at` on the text; the grammar matcher
says the text is not inside a string or a comment), the tokens that leave every known name
there (`bad`: they write identifier bytes no known name continues with, or end the identifier
on a name that is not known) are held back as `Hold` says:
- `MASK` (`CONSTRAIN` only): after a closed receiver (`analysis.Receiver.closed`) read in an
  expression: nothing can add an attribute there, the tokens are masked (only while a token
  towards a known name is left in the mask: the analysis never refuses a completion);
- `LOWER` (`CONSTRAIN` only): after a closed receiver at a statement's start
  (`SlotKind.ATTRIBUTE_TARGET`, `util.` but not `self.`/`cls.`): an attribute may be added
  there (`util.flag = 1`), which code does seldom from outside a module or class, so they lose
  `SURE_NATS`, not the mask; so do they after a receiver closed but for a class decorator
  (`analysis.Receiver.decorated`: rich's `@rich_repr class Style`), and a name read outside
  brackets, in a parameter's annotation or default or at a subscript's own level
  (`SlotKind.LOAD`), or read at a statement's start, when the analysis' names are closed
  (`analysis.NameSet.CLOSED`): they lose `SURE_NATS`, not the mask. The name may still be
  bound before it is read: the body of a conditional expression is evaluated after its test,
  so `m.group(1) if (m := match(s)) else None` reads `m` where the text has not bound it yet,
  and any read outside brackets may be such a body (`x = a + 1 if (a := f()) else 0`). A mask
  there would refuse a valid program; only a model far surer of the name than of every known
  one writes it;
- `BIAS`: everywhere else, and in `BIAS` mode: they lose `BIAS_NATS`.
A token that writes the dot and an attribute's start at once after a receiver's name (`sys` then
`.fin`: byte-level BPE spells attributes so) is held back as the attribute after `sys.` would be
when the receiver has no attribute so.
Binding places (`SlotKind.BINDING`, `SlotKind.PARAMETER`, `SlotKind.FREE`) and `self.`/`cls.` at
a statement's start (maybe an attribute being assigned) are never held back. At a sure binding
place (`BINDING`: a `for` target, a `def`/`class`/`import`/`as` name; `PARAMETER`: a parameter's
name in a `def` header, not its annotation or default) and at a statement's start, the tokens
towards a name the rest of the document reads where nothing binds it and a binding at the cursor
would bind (`ScopeAnalysis.wanted`, `unbound.unbound_at`: what the line being written defines)
gain `BIAS_NATS`; nothing else is lowered there, so a new name is written as before.

At a statement's start the name may be a new target: only the tokens that would read an
unknown name there (anything that ends it but `=`, `:` or `,`: `helper(`, `obj.`, `table[`,
`name + 1`) are held back.

Known names: at a name read in an expression, the names in scope (`ScopeAnalysis.names`) and the
identifiers the cursor's line and the completion write (not after a dot: a name they bind,
`for item in items: total += item`); at a call's argument, also the keyword names the document
writes (`f(name=`); after `receiver.`, the receiver's attributes.
"""

from __future__ import annotations

import enum
import keyword
import re
import time
from collections.abc import Collection
from typing import NamedTuple

import numpy as np
import torch

from .analysis import Names, NameSet, Receiver, ScopeAnalysis
from .modes import IdentifierMode
from .slots import Slot, SlotKind, slot_at
from .token_index import IdentifierTokens, is_name_byte

# what a token leaving every known name loses: measured on both code sets (docs/identifiers.md)
BIAS_NATS = 4.0
# what a token towards a wanted name gains at a sure binding place (a `for` target, an import's name, a
# parameter: the lines below read the name unbound, so the place is where it was bound; nothing else
# is lowered, and a model surer of its own new name by more writes it); at a statement's start, where the
# line may bind it in another way (`for y in`), BIAS_NATS
WANTED_NATS = 8.0
# what it loses where only a walrus written later could make it exist (`Hold.LOWER`): far more than
# a model's usual margin between two names, so greedy decoding writes it only when the model is sure
SURE_NATS = 12.0
TAIL = 4000  # bytes of the text before the cursor the slots are read from (slots.WINDOW)
_STRING_TERMINALS = ("STRING", "LONG_STRING", "FSTRING", "LONG_FSTRING", "TSTRING", "LONG_TSTRING", "COMMENT")
_STRING_PREFIXES = frozenset(b"r b f u t rb br fr rf tr rt".split())
# a name as a load or a binding writes it (not an attribute: `self.data` does not bind `data`)
_IDENTIFIER = re.compile(rb"(?<![A-Za-z0-9_\x80-\xff.])[A-Za-z_\x80-\xff][A-Za-z0-9_\x80-\xff]*")
_QUOTED = re.compile(rb"'[^'\n]*'|\"[^\"\n]*\"")  # a string on one line: its words bind nothing
_OWN = (b"self", b"cls")
_LEAD = re.compile(rb"[A-Za-z0-9_\x80-\xff]*")  # the identifier bytes a token starts with
_FAVOURED = (SlotKind.BINDING, SlotKind.PARAMETER, SlotKind.STATEMENT)  # where the wanted names are favoured


class Hold(enum.Enum):
    """How the tokens that leave every known name are held back at one step (module docstring)."""

    BIAS = "bias"  # they lose BIAS_NATS
    LOWER = "lower"  # they lose SURE_NATS
    MASK = "mask"  # they are masked while a token towards a known name is left


class _Found(NamedTuple):
    """At one slot: the tokens that leave every known name, those that go on towards one, how
    the first are held back, and (after a receiver's dot) the rests of the names they go on to."""

    bad: np.ndarray
    good: np.ndarray
    hold: Hold
    rests: tuple[bytes, ...] = ()


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
        constrain = mode is IdentifierMode.CONSTRAIN
        self._attributes_hold = Hold.MASK if constrain else Hold.BIAS  # after a closed receiver
        self._targets_hold = Hold.LOWER if constrain else Hold.BIAS  # the same at a statement's start
        self._loads_hold = Hold.LOWER if constrain and scope.name_set is NameSet.CLOSED else Hold.BIAS
        self._compiled = compiled
        grammar = compiled.recognizer.grammar
        self._q_term = compiled.q_term
        self._name = grammar.term_id["NAME"]
        self._quiet = frozenset(grammar.term_id[n] for n in _STRING_TERMINALS if n in grammar.term_id)
        self._cache: dict = {}
        self._receiver_tails = frozenset(r.rsplit(b".", 1)[-1] for r in scope.receivers)  # `sys`, `path` of `os.path`
        self.stats = {"shaped": 0, "masked": 0, "lowered": 0, "fallbacks": 0, "ms": 0.0}

    def shape(self, row: torch.Tensor, mask: np.ndarray, matcher, generated: bytes,
              banned: Collection[int] = ()):
        """(logits, mask) for this step: unchanged, or as the module docstring says. `banned`:
        the tokens this step may not take (a search pass's earlier choices, rejected tokens): out
        of the mask the guide reads, so the best token it walks its dead ends from and the token
        towards a known name it keeps the mask for are ones the step can take."""
        t0 = time.perf_counter()
        events: set[str] = set()  # what this call did (`stats` counts each once per call)
        if banned:
            mask = mask.copy()
            mask[[u for u in banned if u < len(mask)]] = False
        try:
            return self._shape(row, mask, matcher, generated, events)
        finally:
            for event in events:
                self.stats[event] += 1
            self.stats["ms"] += (time.perf_counter() - t0) * 1000

    def _shape(self, row: torch.Tensor, mask: np.ndarray, matcher, generated: bytes, events: set[str]):
        terms = {self._q_term[c.q] for c in matcher.configs}
        if terms & self._quiet:
            return row, mask
        text = self.before + generated
        slot = slot_at(text[-TAIL:])
        if keyword.iskeyword(slot.partial.decode("ascii", "replace")):
            # `return`, `in`, `for` just written (a token ` return`, or the space healed away): a token
            # that starts with a space writes the name after the keyword, one that does not goes on
            # writing this identifier (`await_result`)
            spaced = self.tokens.spaced_start
            row, mask = self._apply(row, mask, slot_at(text[-TAIL:] + b" "), text, spaced, events, matcher)
            if self._name not in terms:
                return row, mask
            return self._apply(row, mask, slot, text, ~spaced, events, matcher)
        if slot.partial and self._name not in terms:
            return row, mask
        row, mask = self._apply(row, mask, slot, text, None, events, matcher)
        if slot.partial in self._receiver_tails:  # `sys` written: a token `.fin` writes an attribute at once
            row, mask = self._hold(row, mask, self._dotted(text), None, events)
        return row, mask

    def _apply(self, row: torch.Tensor, mask: np.ndarray, slot: Slot, text: bytes, only: np.ndarray | None,
               events: set[str], matcher=None):
        """`_shape` at `slot`, for the tokens of `only` (None: all); `matcher`: for its canonical
        state (no dead ends where attributes are masked)."""
        canonical_on = matcher is not None and matcher.canonical.active and self._compiled.canonical is not None
        canonical = matcher.canonical if canonical_on else None
        if slot.kind in _FAVOURED:
            row = self._favour(row, mask, slot, only, events, canonical)
        return self._hold(row, mask, self._bad(slot, text), only, events, canonical)

    def _hold(self, row: torch.Tensor, mask: np.ndarray, found: _Found | None, only: np.ndarray | None,
              events: set[str], canonical=None):
        """The step's logits and mask with the `bad` tokens of `found` (of `only`, when given)
        held back as its `Hold` says; `good`: the tokens towards a known name. `canonical`: the
        canonical state after the last token, when canonical tokenization filters the masks."""
        if found is None:
            return row, mask
        bad, good, hold, rests = found
        if only is not None:
            bad, good = bad & only, good & only
        n = min(len(bad), len(mask))
        hit = np.zeros(len(mask), dtype=bool)
        hit[:n] = bad[:n] & mask[:n]
        if not hit.any():
            return row, mask
        events.add("shaped")
        if hold is not Hold.BIAS and rests and canonical is not None:  # held back with what leaves every name
            hit[:n] |= self._dead_ends(row, good[:n] & mask[:n] & ~hit[:n], rests, canonical)
        if hold is Hold.MASK:
            if (good[:n] & mask[:n] & ~hit[:n]).any():  # a known name can still be written from here
                events.add("masked")
                return row, mask & ~hit
            events.add("fallbacks")
        if hold is Hold.LOWER:
            events.add("lowered")
        return _shifted(row, hit, -(SURE_NATS if hold is Hold.LOWER else BIAS_NATS)), mask

    def _dead_ends(self, row: torch.Tensor, towards: np.ndarray, rests: tuple[bytes, ...], canonical) -> np.ndarray:
        """Of the tokens `towards` known names (whose rests after the partial are `rests`), the
        best-scored ones after which canonical tokenization allows no spelling of those names
        (`sys.` then `f`: `flags` is spelled as one token, so after `f` no known name can be
        written, and the mask would fall back to the model's own `inally`), down to the first
        token that leads somewhere."""
        dead = np.zeros(len(towards), dtype=bool)
        ids = np.flatnonzero(towards)
        order = ids[torch.argsort(row[torch.from_numpy(ids).to(row.device)], descending=True).cpu().numpy()]
        pairs, token_bytes = self._compiled.canonical, self._compiled.tokens
        for u in order.tolist():
            if self._leads_somewhere(token_bytes[u], u, rests, pairs, canonical):
                break
            dead[u] = True
        return dead

    def _leads_somewhere(self, w: bytes, u: int, rests: tuple[bytes, ...], pairs, canonical) -> bool:
        """Whether token `u` (bytes `w`) is no dead end: it writes more than a name's lead, or a
        whole rest, or a rest that canonical tokens can go on spelling after it."""
        if len(_LEAD.match(w).group()) < len(w) or any(r == w for r in rests):
            return True
        return any(self._spells_name(pairs.after(canonical, u), r[len(w) :]) for r in rests if r.startswith(w))

    def _spells_name(self, state, rest: bytes) -> bool:
        """Whether tokens canonical from `state` can write `rest` and end the name there: a
        token longer than `rest` must go on with a byte that ends an identifier (after `L`,
        `ocker` writes `Locker`, not `Lock`: `CompiledGrammar.heal_goes_on` counts any token
        that starts with the rest, as healing needs)."""
        key = ("spells", state, rest)
        if key not in self._cache:
            compiled = self._compiled
            ids = compiled.vocab.tokens_compatible_with(rest)
            ids = ids[compiled.canonical.allowed_after(state)[ids]].tolist()
            token_bytes = compiled.tokens
            self._cache[key] = any(
                len(token_bytes[u]) == len(rest)
                or (not is_name_byte(token_bytes[u][len(rest)]) if len(token_bytes[u]) > len(rest)
                    else self._spells_name(compiled.canonical.after(state, u), rest[len(token_bytes[u]) :]))
                for u in ids)
        return self._cache[key]

    def _favour(self, row: torch.Tensor, mask: np.ndarray, slot: Slot, only: np.ndarray | None,
                events: set[str], canonical=None) -> torch.Tensor:
        """The logits with the tokens towards a wanted name (of `only`, when given) raised by
        `WANTED_NATS` at a sure binding place, `BIAS_NATS` at a statement's start (nothing is
        lowered or masked); where canonical tokenization filters the
        masks (`canonical`: its state after the last token), only those after which the name can
        still be spelled canonically (` L` towards `Legacy...`, spelled ` Legacy`: a favour there
        led to a name nobody wrote)."""
        key = (SlotKind.BINDING, slot.partial)
        if key not in self._cache:
            wanted = self.scope.wanted
            self._cache[key] = self._toward(wanted, slot.partial, True)[0] if wanted.with_prefix(slot.partial) else None
        good = self._cache[key]
        if good is None:
            return row
        if only is not None:
            good = good & only
        n = min(len(good), len(mask))
        up = np.zeros(len(mask), dtype=bool)
        up[:n] = good[:n] & mask[:n]
        if canonical is not None and up.any():
            up[np.flatnonzero(up)] = [self._spelled_on(u, slot.partial, canonical) for u in np.flatnonzero(up).tolist()]
        if not up.any():
            return row
        events.add("shaped")
        return _shifted(row, up, BIAS_NATS if slot.kind is SlotKind.STATEMENT else WANTED_NATS)

    def _spelled_on(self, u: int, partial: bytes, canonical) -> bool:
        """Whether after token `u` (towards a wanted name, `partial` written) canonical
        tokenization can still spell one of the wanted names it goes on to."""
        w = self._compiled.tokens[u]
        # a space starts the name only where none is written yet; after `partial` it ends the name
        # (` in` after a wanted `test`), as `(` or `,` do
        lead = _LEAD.match(w, 1 if w[:1] == b" " and not partial else 0).group()
        state = None
        for name in self.scope.wanted.with_prefix(partial + lead):
            rest = name[len(partial) + len(lead) :]
            if not rest:
                return True
            if state is None:
                state = self._compiled.canonical.after(canonical, u)
            if self._compiled.heal_goes_on(state, rest):
                return True
        return False

    def _bad(self, slot: Slot, text: bytes) -> _Found | None:
        """The tokens that leave every known name at `slot`, those that go on towards one,
        and how the first are held back."""
        kind = slot.kind
        if kind in (SlotKind.NONE, SlotKind.FREE, SlotKind.BINDING, SlotKind.PARAMETER):
            return None
        if kind is SlotKind.STATEMENT:  # only a name that is read: `helper(`, `obj.`, `table[`
            p = slot.partial
            # a known name that is not wanted: the line may bind it (`json =`), not read it
            # (`json.dump(`); a wanted name is bound nowhere it is read from here
            known_unwanted = p in self.scope.names and p not in self.scope.wanted
            # nothing typed, a string's prefix, a name the text already writes, or a known unwanted one
            unguided = not p or p.lower() in _STRING_PREFIXES or p in self._written(text, p) or known_unwanted
            if unguided:
                return None
            return _Found(self.tokens.reads_name, self.tokens.continues, self._loads_hold)
        spaced = kind in (SlotKind.NAME, SlotKind.ARGUMENT, SlotKind.LOAD)
        if kind in (SlotKind.ATTRIBUTE, SlotKind.ATTRIBUTE_TARGET):
            receiver = self._receiver(slot)
            if receiver is None:
                return None
            key = (kind, slot.receiver, slot.partial)
            if key not in self._cache:
                self._cache[key] = self._toward(receiver.attributes, slot.partial, spaced)
            good, known = self._cache[key]
            rests = tuple(n[len(slot.partial) :] for n in receiver.attributes.with_prefix(slot.partial))
            # right after the dot only a name can follow, after blanks or a line's continuation too
            # (`box. thematic`, `box.\` then `border_style`: legal, written by no one): there every
            # token not towards a known attribute leaves them all, held back as the rest are
            bad = ~good if not slot.partial else self._leaving(good, known, slot.partial, False)
            return _Found(bad, good, self._attribute_hold(slot, receiver), rests)
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
        hold = self._loads_hold if kind is SlotKind.LOAD else Hold.BIAS
        return _Found(self._leaving(good, known, slot.partial, spaced), good, hold)

    def _dotted(self, text: bytes) -> _Found | None:
        """After a receiver's name (`sys`), the tokens that write the dot and an attribute's start
        at once (`.fin`) where the receiver has no attribute so, those towards one of its
        attributes (the bare `.` too), and how the first are held back: as after `sys.`."""
        slot = slot_at(text[-TAIL:] + b".")
        if slot.kind not in (SlotKind.ATTRIBUTE, SlotKind.ATTRIBUTE_TARGET):
            return None
        receiver = self._receiver(slot)
        if receiver is None:
            return None
        key = ("dotted", slot.receiver)
        if key not in self._cache:
            self._cache[key] = self.tokens.toward_dotted(list(receiver.attributes))
        good = self._cache[key]
        return _Found(self.tokens.dotted_start & ~good, good, self._attribute_hold(slot, receiver))

    def _receiver(self, slot: Slot) -> Receiver | None:
        """The receiver of an attribute slot, None where nothing is known or an attribute may be
        set (`self.`/`cls.` at a statement's start: new attributes in `__init__`)."""
        if slot.kind is SlotKind.ATTRIBUTE_TARGET and slot.receiver in _OWN:
            return None
        return self.scope.receivers.get(slot.receiver)

    def _attribute_hold(self, slot: Slot, receiver: Receiver) -> Hold:
        if receiver.decorated:  # closed but for a decorator, which may add attributes: lowered
            return self._targets_hold
        if not receiver.closed:
            return Hold.BIAS
        # at a statement's start the attribute may be one being added (`util.flag = 1`): legal,
        # rare from outside a module or class, so lowered there, not masked
        return self._attributes_hold if slot.kind is SlotKind.ATTRIBUTE else self._targets_hold

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


def _shifted(row: torch.Tensor, where: np.ndarray, nats: float) -> torch.Tensor:
    """A copy of the logits `row` with the tokens `where` holds moved by `nats`."""
    shaped = row.clone()
    shaped[torch.from_numpy(np.flatnonzero(where)).to(row.device)] += nats
    return shaped
