"""The request's prompt window: the full window of `context_tokens`, or on a first request a
short one of the lines nearest the cursor.

The full window starts where the document's last one did while it fits (`DocumentStates`
anchors), so the KV cache keeps serving it. When that cache lacks more than
`first_window_tokens` of it (the first request in a document, a jump far from the cached
prompt, work ahead that has not got far yet) and the request may be answered from a short one,
the prompt is the lines nearest the cursor in at most that many tokens, with a KV cache of its
own (`first_window_key`) kept while the user types on; the full window is left to the work ahead
(`CompletionResult.short_window`). The first answer then costs a short window's prefill on any
machine, not a whole one's. The grammar reads the whole document either way: only the model's
prompt is short.
"""

from __future__ import annotations

import logging

from ..options import EngineOptions
from .parts import EngineParts
from .prompt import FIRST_WINDOW_STEP, WINDOW_STEP, Prompt, build_prompt
from .results import CompletionRequest

log = logging.getLogger(__name__)


def first_window_key(document: str) -> str:
    """The prompt cache's key for a document's short first window."""
    return document + "\x00first-window"


def prompt_in_window(parts: EngineParts, request: CompletionRequest, before: str, after: str, opts: EngineOptions,
                     first_window: bool = False) -> Prompt:
    """The prompt of a request (its document split at the cursor: `before`, `after`) in a window
    of `context_tokens` (`first_window`: a short first window of `first_window_tokens`), the
    window kept as the document's next anchor."""
    budget, step = (opts.first_window_tokens, FIRST_WINDOW_STEP) if first_window else (opts.context_tokens,
                                                                                        WINDOW_STEP)
    prompt = build_prompt(parts.tokenizer, before, after, budget, parts.fim,
                          heal=opts.constrained, anchor=parts.documents.anchor(request.document, first_window),
                          heal_pretoken=parts.canonical_on(opts), workspace=request.workspace, step=step,
                          context=request.workspace.block)
    parts.documents.keep_anchor(request.document, first_window, prompt)
    return prompt


def _may_be_short(request: CompletionRequest, opts: EngineOptions) -> bool:
    limit = opts.first_window_tokens
    return request.short_first and bool(limit) and limit < opts.context_tokens


def request_window(parts: EngineParts, request: CompletionRequest, before: str, after: str,
                   opts: EngineOptions) -> tuple[Prompt, str]:
    """(the request's prompt, the key of its KV cache): the full window, or the short first one
    (module docstring)."""
    full = prompt_in_window(parts, request, before, after, opts)
    if not _may_be_short(request, opts):
        return full, request.document
    cache = parts.prompt_cache
    missing = cache.missing(request.document, full.ids)
    if missing <= opts.first_window_tokens:
        cache.forget(first_window_key(request.document))  # served by the full window now
        return full, request.document
    short = prompt_in_window(parts, request, before, after, opts, first_window=True)
    key = first_window_key(request.document)
    if cache.missing(key, short.ids) >= missing:
        return full, request.document
    log.info("first window: %d prompt tokens (the full window lacks %d of %d)", len(short.ids), missing,
             len(full.ids))
    return short, key
