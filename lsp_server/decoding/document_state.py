"""What the engine keeps per document between requests (besides the KV caches, which the
prompt cache keeps under its own memory limit): the prefix parser of the text before the cursor,
which the next request continues from, and where its prompt windows started last, so that the
next prompt starts there again while it fits (its KV cache is then reused).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace

from grammar_tools.parsing.incremental import PrefixParser

from .prompt import Prompt

KEPT = 64  # documents whose state is kept
PARSERS_KEPT = 8  # of those, the most recent keep their parser (a parser holds its document's parse)


@dataclass(frozen=True)
class DocumentState:
    parser: PrefixParser | None = None
    window_line: int | None = None  # where the full prompt window started last
    first_window_line: int | None = None  # and the short first window (`windows.request_window`)


NEW = DocumentState()


class DocumentStates:
    """Each document's `DocumentState`, the most recent `KEPT` documents'; used under the
    engine's lock."""

    def __init__(self) -> None:
        self._states: OrderedDict[str, DocumentState] = OrderedDict()

    def get(self, document: str) -> DocumentState:
        return self._states.get(document, NEW)

    def parser(self, document: str, compiled) -> PrefixParser:
        """The document's prefix parser for `compiled`'s grammar (a new one on first use, or
        when the document's target version changed)."""
        state = self.get(document)
        p = state.parser
        if p is None or p.recognizer is not compiled.recognizer:
            p = PrefixParser(compiled.recognizer, compiled.lexer)
            self._put(document, replace(state, parser=p))
        else:
            self._put(document, state)
        return p

    def anchor(self, document: str, first_window: bool) -> int | None:
        """The line the document's last prompt window (`first_window`: short first window) started at."""
        state = self.get(document)
        return state.first_window_line if first_window else state.window_line

    def keep_anchor(self, document: str, first_window: bool, prompt: Prompt) -> None:
        field = "first_window_line" if first_window else "window_line"
        self._put(document, replace(self.get(document), **{field: prompt.window_line}))

    def forget(self, document: str) -> None:
        self._states.pop(document, None)

    def _put(self, document: str, state: DocumentState) -> None:
        self._states[document] = state
        self._states.move_to_end(document)
        while len(self._states) > KEPT:
            self._states.popitem(last=False)
        if len(self._states) > PARSERS_KEPT:  # one document leaves the most recent ones per put
            leaving = list(self._states)[-PARSERS_KEPT - 1]
            self._states[leaving] = replace(self._states[leaving], parser=None)
