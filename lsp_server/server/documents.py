"""The open documents, kept in sync with the editor (incremental changes, UTF-16 positions).

    docs = DocumentStore()
    docs.open(uri, "python", 1, text)
    docs.change(uri, 2, [(((0, 4), (0, 4)), "x")])     # ((start, end), new text); range None: whole text
    doc = docs.get(uri); doc.text, doc.version, doc.refused

A document the server won't complete in says why in `refused` (another language, binary, over
`MAX_DOCUMENT_BYTES`, or out of sync after a change it could not apply); its text is dropped when
it is huge, so that memory stays bounded. A change that can't be applied raises DocumentError and
leaves the document refused until the editor sends its whole text again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..decoding.workspace_context import WorkspaceContext, workspace_context
from ..positions import PositionError, line_starts, offset_at, to_lf

MAX_DOCUMENT_BYTES = 10 * 1024 * 1024
LANGUAGES = frozenset({"python", "python3", "py"})

Range = tuple[tuple[int, int], tuple[int, int]]


class DocumentError(ValueError):
    """A notification about a document that can't be applied; the message says why."""


@dataclass
class Document:
    uri: str
    language_id: str
    version: int
    text: str
    refused: str | None = None  # why the server gives no completions here (None: it does)
    _starts: list[int] | None = field(default=None, repr=False)
    _lf: str | None = field(default=None, repr=False)

    @property
    def starts(self) -> list[int]:
        if self._starts is None:
            self._starts = line_starts(self.text)
        return self._starts

    @property
    def lf_text(self) -> str:
        """The text with "\n" line ends, as the engine reads it (same lines and characters)."""
        if self._lf is None:
            self._lf = to_lf(self.text)
        return self._lf

    def offset(self, line: int, character: int) -> int:
        """String index of an LSP position (PositionError when outside the text)."""
        return offset_at(self.text, line, character, self.starts)

    def set_text(self, text: str) -> None:
        self.text = text
        self._starts = None
        self._lf = None

    def describe(self) -> dict:
        """What the server holds, for a client to check that it is in sync."""
        data = self.text.encode("utf-8", "surrogatepass")
        return {"version": self.version, "lines": len(self.starts), "bytes": len(data),
                "blake2b": hashlib.blake2b(data, digest_size=16).hexdigest(), "refused": self.refused}


def refusal(language_id: str, text: str) -> str | None:
    """Why a document with this language and text gets no completions, or None."""
    if language_id not in LANGUAGES:
        return f"language {language_id!r} is not Python"
    if len(text) * 4 > MAX_DOCUMENT_BYTES and len(text.encode("utf-8", "surrogatepass")) > MAX_DOCUMENT_BYTES:
        return f"larger than {MAX_DOCUMENT_BYTES // (1024 * 1024)} MB"
    if "\x00" in text:
        return "binary (it contains NUL characters)"
    return None


class DocumentStore:
    """Documents by URI. Every method runs on the server's event loop (no locking)."""

    def __init__(self) -> None:
        self._docs: dict[str, Document] = {}
        # a document's context block made ahead (the server's RepoContexts.block; none by default)
        self.blocks: Callable[[str], object | None] = lambda uri: None

    def __len__(self) -> int:
        return len(self._docs)

    def get(self, uri: str) -> Document | None:
        return self._docs.get(uri)

    def usable(self, uri: str) -> Document | None:
        """The open document, unless it was refused (too large, not UTF-8, ...)."""
        doc = self._docs.get(uri)
        return None if doc is None or doc.refused else doc

    def describe(self) -> dict[str, dict]:
        return {uri: doc.describe() for uri, doc in self._docs.items()}

    def workspace(self, uri: str) -> WorkspaceContext:
        """The other open Python documents, as context for a completion in `uri`, and the
        document's context block when one is ready (read, never made here)."""
        context = workspace_context(uri, ((u, d.lf_text) for u, d in self._docs.items() if not d.refused))
        block = self.blocks(uri)
        return context if block is None else replace(context, block=block)

    def texts(self) -> list[tuple[str, str]]:
        """(uri, text) of the open Python documents ("\n" line ends), for the context blocks."""
        return [(u, d.lf_text) for u, d in self._docs.items() if not d.refused]

    def version(self, uri: str) -> int | None:
        doc = self._docs.get(uri)
        return None if doc is None else doc.version

    def open(self, uri: str, language_id: str, version: int, text: str) -> Document:
        why = refusal(language_id, text)
        doc = Document(uri, language_id, version, "" if why and why.startswith("larger") else text, why)
        self._docs[uri] = doc
        return doc

    def close(self, uri: str) -> bool:
        return self._docs.pop(uri, None) is not None

    def change(self, uri: str, version: int, changes: list[tuple[Range | None, str]]) -> Document:
        """Apply content changes in order. Raises DocumentError for an unknown document or a
        range outside the text (the document is then refused until a whole-text change)."""
        doc = self._docs.get(uri)
        if doc is None:
            raise DocumentError(f"change to a document that is not open: {uri}")
        doc.version = version
        for rng, new in changes:
            if rng is None:
                doc.refused = refusal(doc.language_id, new)
                doc.set_text("" if doc.refused and doc.refused.startswith("larger") else new)
                continue
            if doc.refused and doc.refused.startswith(("larger", "out of sync")):
                continue  # no text to edit; wait for a whole-text change
            (l0, c0), (l1, c1) = rng
            try:
                a = doc.offset(l0, c0)
                b = doc.offset(l1, c1)
            except PositionError as e:
                doc.refused = f"out of sync: a change at {l0}:{c0}-{l1}:{c1} is outside the text"
                doc.set_text("")
                raise DocumentError(f"{uri} version {version}: {e}") from None
            if b < a:
                a, b = b, a
            text = doc.text[:a] + new + doc.text[b:]
            if len(new) * 4 > MAX_DOCUMENT_BYTES or len(text) * 4 > MAX_DOCUMENT_BYTES:
                why = refusal(doc.language_id, text)
                if why and why.startswith("larger"):
                    doc.refused = why
                    doc.set_text("")
                    continue
            doc.set_text(text)
            if doc.refused is None and "\x00" in new:
                doc.refused = refusal(doc.language_id, text)
            elif (doc.refused or "").startswith("binary") and "\x00" not in text:  # its last NUL byte went
                doc.refused = None
        return doc
