"""Token healing: the prompt's last token is backed off, and the completion's first tokens must
spell its bytes again.

A prompt ending in `os.pa` is tokenized with `pa` as its last token, yet the model has only ever
seen the name written as one token `path` (or `.path`); continuing after `pa` would force it to
spell the rest in pieces it never saw together. Backing off the last token lets the first
generated token be `path` itself: the matcher (`GrammarMatcher.from_prefix(..., heal=...)`)
then allows only tokens that start with the backed-off bytes or are a prefix of them, and the
grammar still constrains everything after.
"""

from __future__ import annotations

from dataclasses import dataclass

PRETOKEN_SCAN = 1024  # characters at the end of a prompt in which its last pre-token is looked for


@dataclass(frozen=True)
class Healing:
    kept: list[int]  # the prompt ids that stay
    healed_ids: tuple[int, ...]  # the ids backed off
    healed: bytes  # their bytes: the completion must spell them again first


def back_off(token_bytes: list[bytes], text: bytes, ids: list[int], n: int = 1) -> Healing:
    """Back off the last `n` of `ids` (the tokenization of `text`), unless they are all the
    prompt has or do not spell the end of `text` exactly (a prompt that is not the text's own
    tokens: nothing is healed)."""
    k = max(0, min(n, len(ids) - 1))
    tail = b"".join(token_bytes[i] for i in ids[len(ids) - k :])
    if not k or not tail or not text.endswith(tail):
        return Healing(list(ids), (), b"")
    return Healing(list(ids[: len(ids) - k]), tuple(ids[len(ids) - k :]), tail)


def last_pretoken_tokens(token_bytes: list[bytes], pre_tokenizer, text: str, ids: list[int]) -> int:
    """How many of the last `ids` (the tokenization of `text`) spell the text's last pre-token
    (1 where the tokenizer has no pre-tokenizer or the tokens do not end on its start).

    With canonical tokenization (mask_store.canonical) the whole last pre-token must be backed
    off, not only its last token: its encoding depends on what follows it. A prompt ending in a
    blank line and an indentation, `x\\n\\n        `, is `x` `\\n` `\\n        ` at the end of the
    text, but `x` `\\n\\n       ` ` #` once a comment follows: after the kept `\\n` no canonical
    continuation exists (every step falls back to the grammar's mask), while with both newline
    tokens backed off the model writes `\\n\\n       ` ` #` itself. Likewise ` retu` is ` ret` `u`
    and only ` return` continues it canonically."""
    if pre_tokenizer is None or not ids or not text:
        return 1
    tail = text[-PRETOKEN_SCAN:]  # the scan of a tail finds the same cuts a few pieces in
    pieces = pre_tokenizer.pre_tokenize_str(tail)
    start = pieces[-1][1][0] if pieces else 0
    if start == 0 and len(tail) < len(text):
        return 1  # a pre-token longer than the scan: its last token only
    want = len(tail[start:].encode())
    n = total = 0
    while total < want and n < len(ids):
        n += 1
        total += len(token_bytes[ids[-n]])
    return n if total == want and n else 1


def token_healing(token_bytes: list[bytes], pre_tokenizer, text: str, ids: list[int]) -> Healing:
    """Token healing of a prompt: `ids` (the tokenization of `text`) less the tokens the model
    writes again, their bytes left for the grammar to re-create: every token of the text's last
    pre-token with a `pre_tokenizer` (canonical tokenization: `last_pretoken_tokens`), else the
    last token."""
    return back_off(token_bytes, text.encode(), ids, last_pretoken_tokens(token_bytes, pre_tokenizer, text, ids))
