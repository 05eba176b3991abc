"""Find, load or build the mask store that serves a model: one call for the CLI and server."""

from __future__ import annotations

import logging
import multiprocessing
from pathlib import Path

from grammar_tools import cache
from grammar_tools.analyses.forked_pool import can_fork
from grammar_tools.lexing.lexer_automaton import load_lexer_automaton
from grammar_tools.parsing.recognizer import Recognizer

from . import builder
from .build_timeline import Timeline
from .builder import StoreBuilder
from .canonical import CanonicalPairs
from .canonical_tables import CanonicalUnsupported, load_canonical
from .compiled import CompiledGrammar
from .store import MaskStore, MaskStoreError, default_store_path, load_store
from .vocabulary import LoadedTokenizer, load_tokenizer

log = logging.getLogger(__name__)


def model_label(tok: LoadedTokenizer, spec: str | None) -> str:
    if spec in (None, "", "default"):
        return "default"
    return str(Path(spec).expanduser().resolve())


def load_tokenizer_beside_lexer(spec: str | None) -> LoadedTokenizer:
    """`load_tokenizer(spec)`, with the default grammar's lexer automaton made meanwhile in a
    forked child, which leaves it (and the grammar) in the cache for this process to read: a
    cold build's two first steps, one core each (151k: 1.2 s and 2.0 s), side by side. Where
    the child can't fork or fails (a read-only cache), the lexer is made here when asked for."""
    if not can_fork():
        return load_tokenizer(spec)
    child = multiprocessing.get_context("fork").Process(target=_lexer_into_cache, daemon=True)
    child.start()
    try:
        return load_tokenizer(spec)
    finally:
        child.join()


def _lexer_into_cache() -> None:
    """The forked child's work: the lexer automaton made, so cached; a failure (an unwritable
    cache, an interrupt) is left for the parent, which then makes it itself and reports it."""
    try:
        load_lexer_automaton()
    except (Exception, KeyboardInterrupt):  # noqa: BLE001 - the parent makes it and reports
        pass


def build_store(
    tok: LoadedTokenizer,
    spec: str | None = None,
    streamline: bool = True,
    progress: bool = True,
    full: MaskStore | None = None,
    merge_states: bool = True,
    timeline: Timeline | None = None,
) -> MaskStore:
    """The mask store of a tokenizer: streamlined (the default: same masks, fewer rows and
    parser checks) or full. `full`: the full store when it is at hand (it is streamlined).
    `merge_states`: one NFA state per class of lexer configurations (`nfa_states`; the
    default, same masks); False keeps one per configuration, to compare with. `timeline` gets
    the phases' wall and CPU seconds (`build_timeline`)."""
    timeline = timeline if timeline is not None else Timeline()
    with timeline.phase("lexer"):
        lexer = load_lexer_automaton()
    if full is None:
        header = {
            "model": model_label(tok, spec),
            "grammar_hash": lexer.hash,
            "tokenizer_hash": tok.vocab.hash,
            "options": {"streamline": False},
            "code": full_store_code_hash(),
        }
        full = StoreBuilder(tok.vocab, lexer, progress=progress, merge_states=merge_states).build(header, timeline)
    if not streamline:
        return full
    from .streamline import streamline_store

    with timeline.phase("recognizer"):
        recognizer = Recognizer(lexer.grammar)
    return streamline_store(full, recognizer, progress=progress, vocab=tok.vocab, timeline=timeline)


def full_store_code_hash() -> str:
    """Hash of the code that builds the full store: the builder and everything it imports
    (token lexing, the lexer automaton...). The grammar and the tokenizer are keyed apart."""
    return cache.source_hash(builder)[:8]


def store_path_for(tok: LoadedTokenizer, streamline: bool = True, merge_states: bool = True) -> Path:
    """The cached store's file, keyed by the grammar (its lexer automaton), the tokenizer and
    the code and options that build it: a store made by other code is never read for this one."""
    if streamline:
        from .streamline import code_hash

        variant = code_hash()
    else:
        variant = full_store_code_hash()
    if not merge_states:
        variant += "-unmerged"
    return default_store_path(load_lexer_automaton().hash, tok.vocab.hash, streamline, variant)


def open_store(path, tok: LoadedTokenizer) -> MaskStore:
    return load_store(
        path,
        grammar_hash=load_lexer_automaton().hash,
        tokenizer_hash=tok.vocab.hash,
        vocab_size=tok.vocab.size,
    )


def load_compiled(
    model: str | None = None,
    store_path: str | Path | None = None,
    build_if_missing: bool = True,
    streamline: bool = True,
    python_version=None,
    progress: bool = False,
) -> tuple[CompiledGrammar, LoadedTokenizer]:
    """The compiled grammar for a model: its store from `store_path` or the cache (built and
    cached on first use unless `build_if_missing` is False). `streamline`: the streamlined
    store (the default; it gives the same masks as the full one, checked by
    tests/test_streamline.py), else the full one."""
    tok = load_tokenizer(model)
    path = Path(store_path) if store_path else store_path_for(tok, streamline)
    try:
        store = open_store(path, tok)
    except MaskStoreError:
        if store_path or not build_if_missing:
            raise
        with cache.one_maker(path):  # a second process (server, test worker) waits, then reads it
            store = _store_made_once(path, tok, model, streamline, progress)
    rec = Recognizer(python_version=python_version) if python_version else Recognizer()
    return CompiledGrammar(store, tok.vocab, rec, canonical=canonical_pairs(tok)), tok


def _store_made_once(path: Path, tok: LoadedTokenizer, model: str | None, streamline: bool,
                     progress: bool) -> MaskStore:
    """The store at `path`, built and saved unless another process made it meanwhile."""
    try:
        return open_store(path, tok)
    except MaskStoreError as e:
        if path.is_file():  # there, but damaged or from another version: never used, made again
            log.warning("%s; rebuilding it", str(e).split(": rebuild it")[0])
    log.info("building the mask store for %s (once)", tok.source.name)
    full = None
    if streamline:  # streamline the cached full store if there is one
        try:
            full = open_store(store_path_for(tok, False), tok)
        except MaskStoreError:
            full = None
    store = build_store(tok, model, streamline=streamline, progress=progress, full=full)
    store.save(path)
    return store


def canonical_pairs(tok: LoadedTokenizer) -> CanonicalPairs | None:
    """The tokenizer's canonical pairs (cached; about a second the first time), or None with
    the reason logged where the tokenizer is not byte-level BPE with GPT-2's pre-tokenizer."""
    try:
        return load_canonical(tok)
    except CanonicalUnsupported as e:
        log.warning("canonical tokenization is not available for %s: %s", tok.source.name, e)
        return None
