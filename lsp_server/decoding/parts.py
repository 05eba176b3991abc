"""The parts of a loaded engine that a request uses, made once when the engine is made
(`CompletionEngine.__init__`) and read by every step of `request.complete`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..options import EngineOptions
from ..target_version import target_version
from .document_state import DocumentStates
from .header_steering import HeaderStarts
from .identifiers.analyses import NameAnalyses
from .identifiers.token_index import IdentifierTokens
from .stopping.line_scanner import LineScanner


class GrammarVersions:
    """The compiled grammar per Python version a document targets: the loaded store with that
    version's recognizer, made on first use (`target_version`)."""

    def __init__(self, compiled) -> None:
        self.newest = compiled  # the loaded store with the newest Python's recognizer
        self._versions = {compiled.recognizer.python_version: compiled}

    def for_document(self, document: str, opts: EngineOptions):
        version = target_version(opts.python_version, document)
        compiled = self._versions.get(version)
        if compiled is None:
            compiled = self._versions[version] = self.newest.for_version(version)
        return compiled


@dataclass(frozen=True)
class EngineParts:
    tokenizer: object  # model.tokenizer.LoadedTokenizer
    fim: object | None  # the model's fill-in-the-middle tokens (None: a plain model)
    prompt_cache: object  # model.kv_cache.PromptCache: each document's KV cache
    passes: object  # model_pass.ModelPasses (or the team server's): runs a decoding pass
    grammars: GrammarVersions
    documents: DocumentStates  # each document's parser and prompt anchors
    scanner: LineScanner  # the line scanner of the stop policy and the offer search
    header_starts: HeaderStarts  # re-decoding's steering masks, built as needed
    stop_tokens: frozenset[int]  # the end and special tokens
    names: NameAnalyses  # the names analyses, made ahead of the requests (`CompletionEngine.names_ahead`)
    identifier_tokens: IdentifierTokens  # the names guide's index of identifier tokens
    guides_names: bool = True  # False: the passes run elsewhere (a team server), the names guide cannot shape them

    def canonical_on(self, opts: EngineOptions) -> bool:
        """Canonical tokenization applies: asked for, constrained, and the tokenizer's pairs known
        (its prompts then back off the whole last pre-token: build_prompt's `heal_pretoken`;
        every target version's grammar shares the one tokenizer's pairs)."""
        return opts.canonical and opts.constrained and self.grammars.newest.canonical is not None
