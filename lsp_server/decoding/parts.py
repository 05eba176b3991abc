"""The parts of a loaded engine that a request uses, made once when the engine is made
(`CompletionEngine.__init__`) and read by every step of `request.complete`: the compiled grammar
of the Python version each document targets (`GrammarVersions`, `target_version`), what the
engine keeps per document (`DocumentStates`) and the request's prompt window (`request_window`).

The Python version a document targets (`target_version`): what its masks allow (`grammar_tools.parsing.versions`).

    target_version("3.9", "file:///p/a.py")   # (3, 9): the `pythonVersion` setting wins
    target_version(None, "file:///p/a.py")    # from /p/pyproject.toml or /p/.python-version, upward
    target_version(None, "untitled:1")        # (3, 14): no file, the newest

Without the setting, the nearest directory from the document's upward that says it decides: its
`pyproject.toml`'s `requires-python` lower bound (code must parse on the oldest Python the
project supports), else its `.python-version` file (pyenv, uv: the interpreter the project runs
on). A `pyproject.toml` without `requires-python`, or with one that doesn't parse, says nothing
and the search goes on upward. A version outside 3.8-3.14 is brought to the nearest end of it
(`>=3.6` reads as 3.8); nothing found anywhere means the newest.

The files are read again only when their modification time or size changed.

What the engine keeps per document between requests (`DocumentStates`) (besides the KV caches, which the
prompt cache keeps under its own memory limit): the prefix parser of the text before the cursor,
which the next request continues from, and where its prompt windows started last, so that the
next prompt starts there again while it fits (its KV cache is then reused).

The request's prompt window (`request_window`): the full window of `context_tokens`, or on a first request a
short one of the lines nearest the cursor.

The full window starts where the document's last one did while it fits (`DocumentStates`
anchors), so the KV cache keeps serving it. When that cache lacks more than
`first_window_tokens` of it (the first request in a document, a jump far from the cached
prompt, work ahead that has not got far yet) and the request may be answered from a short one,
the prompt is the lines nearest the cursor in at most that many tokens, with a KV cache of its
own (`first_window_key`) kept while the user types on; the full window is left to the work ahead
(`CompletionResult.short_window`). The first answer then costs a short window's prefill on any
machine, not a whole one's; and the work ahead computes that short window before the full one
(`engine.prefill`, where a request then would take it), so a first request after a pause finds
it computed. The grammar reads the whole document either way: only the model's prompt is short.

The context block (docs/context.md) is the full window's start, and it arrives seconds after
the document opens (jedi) and changes when the cursor enters another function: each new block
makes the whole window to compute again. So a request is never made to wait for that: the
short window holds no block, and where the document has a block whose window the KV cache
lacks, the same full window without the block (`window="plain"`, under a key of its own,
`plain_window_key`), which the work ahead computes first (`engine.prefill`), serves while the
window with the block is computed. A request then finds what it would find with the block off;
the block reaches the model once its window is ready.
"""

from __future__ import annotations

import logging
import re
import stat
import tomllib
from collections import OrderedDict
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from grammar_tools.lexing.lexer_automaton import LexError
from grammar_tools.parsing.incremental import ParseError, PrefixParser
from grammar_tools.parsing.versions import NEWEST, OLDEST, PythonVersion, format_version, parse_version

from ..options import EngineOptions
from .header_steering import HeaderStarts
from .identifiers.analyses import NameAnalyses
from .identifiers.token_index import IdentifierTokens
from .prompt import FIRST_WINDOW_STEP, WINDOW_STEP, Prompt, build_prompt
from .results import CompletionRequest
from .stopping.rest_of_file import LineScanner
from .window_starts import NO_STARTS, StatementLines

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- the version a document targets


PYPROJECT = "pyproject.toml"
PYTHON_VERSION_FILE = ".python-version"
_PINNED = re.compile(r"^\s*(?:[A-Za-z]+-?)?(\d+)\.(\d+)")  # "3.12.1", "3.12", "pypy3.10", "cpython-3.13"
_HIGHEST_MINOR = 40  # minors probed when reading a specifier (3.0 .. 3.40)


def target_version(setting: str | None, document: str) -> PythonVersion:
    """The version that `document` (a file URI, a path, or a name of no file) targets: the
    setting when given (`EngineOptions.python_version`, checked when set), else the project's."""
    if setting:
        return parse_version(setting)
    path = document_path(document)
    found = project_version(path) if path is not None else None
    return found[0] if found else NEWEST


def document_path(document: str) -> Path | None:
    """The file of a document key: `file:` URIs and absolute paths; None for anything else
    (`untitled:1`, a test's "d")."""
    if document.startswith("file:"):
        parsed = urlparse(document)
        path = unquote(parsed.path)
        if parsed.netloc and parsed.netloc != "localhost":
            path = f"//{parsed.netloc}{path}"
        return Path(path)
    p = Path(document)
    return p if p.is_absolute() else None


def project_version(path: Path) -> tuple[PythonVersion, Path] | None:
    """The version the project around `path` declares, and the file that says it; None when
    no directory from `path`'s upward has a `requires-python` or a `.python-version`."""
    for directory in path.parents if not path.is_dir() else (path, *path.parents):
        for name, reader in ((PYPROJECT, requires_python_floor), (PYTHON_VERSION_FILE, pinned_version)):
            f = directory / name
            try:
                st = f.stat()
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            version = _read(str(f), st.st_mtime_ns, st.st_size, reader)
            if version is not None:
                return version, f
    return None


@lru_cache(maxsize=256)
def _read(path: str, mtime_ns: int, size: int, reader) -> PythonVersion | None:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    version = reader(text)
    log.info("%s: Python %s", path, "not stated" if version is None else format_version(version))
    return version


def requires_python_floor(pyproject: str) -> PythonVersion | None:
    """The oldest supported version that a `pyproject.toml`'s `requires-python` allows (any
    patch release of it), clamped to 3.8-3.14; None without one, or when it doesn't parse."""
    try:
        spec = tomllib.loads(pyproject).get("project", {}).get("requires-python")
    except (tomllib.TOMLDecodeError, AttributeError):
        return None
    if not isinstance(spec, str):
        return None
    try:
        allowed = SpecifierSet(spec)
    except InvalidSpecifier:
        return None
    for minor in range(_HIGHEST_MINOR + 1):
        # a minor is allowed when one of its releases is: `>3.8` allows 3.8.1
        if any(allowed.contains(f"3.{minor}.{patch}", prereleases=True) for patch in range(0, 30)):
            return _clamped((3, minor))
    return None


def pinned_version(text: str) -> PythonVersion | None:
    """The first version a `.python-version` file names ("3.12.1" -> (3, 12)), clamped to
    3.8-3.14; None when it names none (`system`)."""
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        m = _PINNED.match(line)
        if m and m.group(1) == "3":
            return _clamped((3, int(m.group(2))))
    return None


def _clamped(version: PythonVersion) -> PythonVersion:
    return max(OLDEST, min(NEWEST, version))


# ---------------------------------------------------------------------------- each document's state

KEPT = 64  # documents whose state is kept
PARSERS_KEPT = 8  # of those, the most recent keep their parser (a parser holds its document's parse)


WINDOWS = ("full", "plain", "first")  # the full window, the same without the context block, the short first one


@dataclass(frozen=True)
class DocumentState:
    parser: PrefixParser | None = None
    # where each window (WINDOWS) started last: full, full without the block, short first
    window_lines: tuple[int | None, int | None, int | None] = (None, None, None)
    # the lines a window may start on (`statement_lines`) and the text before the cursor they
    # were read from, for the parser's grammar: a request's windows (up to three) read them once
    starts: tuple[str, StatementLines] | None = None


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
            self._put(document, replace(state, parser=p, starts=None))
        else:
            self._put(document, state)
        return p

    def anchor(self, document: str, window: str) -> int | None:
        """The line the document's last prompt window of that kind (WINDOWS) started at."""
        return self.get(document).window_lines[WINDOWS.index(window)]

    def keep_anchor(self, document: str, window: str, prompt: Prompt) -> None:
        state = self.get(document)
        lines = list(state.window_lines)
        lines[WINDOWS.index(window)] = prompt.window_line
        self._put(document, replace(state, window_lines=tuple(lines)))

    def starts(self, document: str, before: str) -> StatementLines | None:
        """The lines `keep_starts` kept for the document, where they were read from `before`."""
        kept = self.get(document).starts
        return kept[1] if kept is not None and kept[0] == before else None

    def keep_starts(self, document: str, before: str, lines: StatementLines) -> None:
        self._put(document, replace(self.get(document), starts=(before, lines)))

    def forget(self, document: str) -> None:
        self._states.pop(document, None)

    def _put(self, document: str, state: DocumentState) -> None:
        self._states[document] = state
        self._states.move_to_end(document)
        while len(self._states) > KEPT:
            self._states.popitem(last=False)
        if len(self._states) > PARSERS_KEPT:  # one document leaves the most recent ones per put
            leaving = list(self._states)[-PARSERS_KEPT - 1]
            self._states[leaving] = replace(self._states[leaving], parser=None, starts=None)


# ---------------------------------------------------------------------------- the engine's parts

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


# ---------------------------------------------------------------------------- the prompt window

def first_window_key(document: str) -> str:
    """The prompt cache's key for a document's short first window."""
    return document + "\x00first-window"


def plain_window_key(document: str) -> str:
    """The prompt cache's key for a document's full window without its context block."""
    return document + "\x00without-block"


def prompt_in_window(parts: EngineParts, request: CompletionRequest, before: str, after: str, opts: EngineOptions,
                     window: str = "full") -> Prompt:
    """The prompt of a request (its document split at the cursor: `before`, `after`) in a window
    (WINDOWS) of `context_tokens`, with the document's context block in front for "full"
    ("first": a short first window of `first_window_tokens`, without the block), the window
    kept as the document's next anchor of that kind."""
    budget, step = (opts.first_window_tokens, FIRST_WINDOW_STEP) if window == "first" else (opts.context_tokens,
                                                                                            WINDOW_STEP)
    prompt = build_prompt(parts.tokenizer, before, after, budget, parts.fim,
                          heal=opts.constrained, anchor=parts.documents.anchor(request.document, window),
                          heal_pretoken=parts.canonical_on(opts), workspace=request.workspace, step=step,
                          context=request.workspace.block if window == "full" else None, scopes=window == "first",
                          starts=statement_lines(parts, request, before, opts))
    parts.documents.keep_anchor(request.document, window, prompt)
    return prompt


def statement_lines(parts: EngineParts, request: CompletionRequest, before: str, opts: EngineOptions) -> StatementLines:
    """The lines of `before` a prompt window may start on (`window_starts`), from the document's
    parser, which reads `before` here (the request's own parse, of all but its healed bytes,
    then reads its last line again); kept for the document's next window of the same text; none
    known unconstrained (no parser)."""
    if not opts.constrained:
        return NO_STARTS
    documents = parts.documents
    parser = documents.parser(request.document, parts.grammars.for_document(request.document, opts))
    kept = documents.starts(request.document, before)
    if kept is not None:
        return kept
    data = before.encode()
    try:
        parser.parse(data)
    except (ParseError, LexError):
        pass  # the lines before the error are known; the request says the rest
    lines = StatementLines.of(data, parser.statement_gaps(data))
    documents.keep_starts(request.document, before, lines)
    return lines


def plain_window(parts: EngineParts, request: CompletionRequest, opts: EngineOptions) -> tuple[Prompt, str, int]:
    """(the request's full window without its context block, the key of its KV cache, how many
    of its tokens that cache lacks). A window computed under the document's own key before its
    block came is that window: it moves to the window's key (the window with the block has
    nothing to reuse in it)."""
    plain = prompt_in_window(parts, request, request.before, request.after, opts, window="plain")
    key, cache = plain_window_key(request.document), parts.prompt_cache
    if cache.missing(request.document, plain.ids) < cache.missing(key, plain.ids):
        cache.move(request.document, key)
    return plain, key, cache.missing(key, plain.ids)


def short_window_lacks(parts: EngineParts, short: Prompt, request: CompletionRequest) -> int | None:
    """How many tokens of the request's short first window `short` its KV cache lacks; None where
    nothing of it is computed (a window never preferred for what it reuses then)."""
    lacks = parts.prompt_cache.missing(first_window_key(request.document), short.ids)
    return None if lacks == len(short.ids) else lacks


def short_windows_on(opts: EngineOptions) -> bool:
    """Whether there are short first windows: the setting on and shorter than the full window."""
    return 0 < opts.first_window_tokens < opts.context_tokens


def may_be_short(request: CompletionRequest, opts: EngineOptions) -> bool:
    """Whether `request` may be answered from a short first window it computes (a request at
    the keystroke, not a prefetch; `short_windows_on`)."""
    return request.short_first and short_windows_on(opts)


def request_document(parts: EngineParts, request: CompletionRequest, before: str, after: str,
                     opts: EngineOptions) -> tuple[object, Prompt, str, PrefixParser | None]:
    """What the engine keeps for a request's document, as the request reads it: the compiled
    grammar of the Python version it targets, the request's prompt and the key of its KV cache
    (`request_window`), and (constrained) the document's parser."""
    compiled = parts.grammars.for_document(request.document, opts)
    prompt, cache_key = request_window(parts, request, before, after, opts)
    parser = parts.documents.parser(request.document, compiled) if opts.constrained else None
    return compiled, prompt, cache_key, parser


def request_window(parts: EngineParts, request: CompletionRequest, before: str, after: str,
                   opts: EngineOptions) -> tuple[Prompt, str]:
    """(the request's prompt, the key of its KV cache): the full window; the full window without
    the context block where the KV cache lacks fewer of its tokens (and at most
    `first_window_tokens` where the request may take a short window; a window with nothing
    computed yet is never preferred); the short first one (module docstring) where it lacks
    more than that of both, or where it lacks fewer tokens than the full window (the work ahead
    computed it first and had not finished the full one). A prefetch (`short_first` off) takes
    the short window only where it was computed and the full one lacks more than
    `first_window_tokens` (computing a whole window in chunks a keystroke cannot stop, a
    prefetch held the warm request that joined it 3.6 s). A request with the block on computes
    no more at the keystroke than it would with the block off (the window without the block is
    not taken where the short window lacks fewer of its tokens: a slow model's work ahead may
    have computed the short one and only part of the other); nor does a prefetch (a request
    for its cursor joins it and waits for all of it; another keystroke stops it between its
    prompt's chunks of AHEAD_CHUNK tokens: `CompletionRequest.ahead`)."""
    full = prompt_in_window(parts, request, before, after, opts)
    short_ok = may_be_short(request, opts)
    cache = parts.prompt_cache
    missing = cache.missing(request.document, full.ids)
    short = None  # the short first window, made once where it is asked about
    if full.context_sections and missing:
        plain, key, lacks = plain_window(parts, request, opts)
        missing = cache.missing(request.document, full.ids)  # (the document's entry may have moved)
        short_lacks = None
        if lacks and short_ok:
            short = prompt_in_window(parts, request, before, after, opts, window="first")
            short_lacks = short_window_lacks(parts, short, request)
        if (lacks < min(missing, len(plain.ids)) and (lacks <= opts.first_window_tokens or not short_ok)
                and (short_lacks is None or lacks <= short_lacks)):
            log.info("full window without the context block: %d prompt tokens (the window with it lacks %d of %d)",
                     len(plain.ids), missing, len(full.ids))
            return plain, key
    if not short_windows_on(opts):
        return full, request.document
    limit = opts.first_window_tokens
    key = first_window_key(request.document)
    if missing == 0:
        cache.forget(key)  # served by the full window now
        return full, request.document
    if not short_ok and missing <= limit:
        return full, request.document  # a prefetch computes at most `limit` of its tokens
    short = short or prompt_in_window(parts, request, before, after, opts, window="first")
    lacks = cache.missing(key, short.ids)
    # the full window where it computes no more at the keystroke; a short window with nothing
    # computed is never preferred to a full one that lacks at most `limit`, nor taken by a prefetch
    if lacks >= missing or (lacks == len(short.ids) and (missing <= limit or not short_ok)):
        if missing <= limit:
            cache.forget(key)
        return full, request.document
    log.info("first window: %d prompt tokens (the full window lacks %d of %d)", len(short.ids), missing,
             len(full.ids))
    return short, key
