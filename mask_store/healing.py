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
