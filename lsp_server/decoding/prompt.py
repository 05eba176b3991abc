"""What the model sees: the text before the cursor within a token budget (plus the suffix for
models with fill-in-the-middle tokens).

The nearest lines are kept; the file's imports are put back in front when they fall outside the
window. The window's first line moves in steps of `WINDOW_STEP` lines, so that typing doesn't
change the start of the prompt and the KV cache of the previous request stays usable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mask_store.healing import back_off
from mask_store.vocabulary import LoadedTokenizer

from ..model.runtime import FimTokens

WINDOW_STEP = 16
IMPORT_LINE = re.compile(r"^(import\s|from\s+\S+\s+import\s)")


@dataclass(frozen=True)
class Prompt:
    ids: list[int]  # the whole prompt (FIM tokens included)
    prefix_ids: int  # how many ids spell the prefix text (they end the prompt, or come before SUF)
    text: str  # the prefix text the ids spell (healed bytes included)
    truncated: bool
    healed_ids: tuple[int, ...] = ()  # prompt tokens backed off (token healing)
    healed: bytes = b""  # their bytes: the completion's first tokens must spell them again
    window_start: int = 0  # characters of the text before the cursor that the window leaves out


def _tokens(tok: LoadedTokenizer, text: str) -> int:
    return len(tok.encode(text)) if text else 0


def window(tok: LoadedTokenizer, before: str, budget: int) -> tuple[str, bool, int]:
    """The text before the cursor cut to at most `budget` tokens at a line start (the file's
    imports put back in front when they fit), whether it was cut, and where the kept lines start."""
    if _tokens(tok, before) <= budget:
        return before, False, 0
    lines = before.splitlines(keepends=True)
    # the shortest tail that fits, then rounded to a stable start
    lo, hi = 0, len(lines) - 1
    while lo < hi:  # smallest start index whose tail fits
        mid = (lo + hi) // 2
        if _tokens(tok, "".join(lines[mid:])) <= budget:
            hi = mid
        else:
            lo = mid + 1
    start = min(-(-lo // WINDOW_STEP) * WINDOW_STEP, len(lines) - 1)
    kept = "".join(lines[start:])
    offset = len(before) - len(kept)
    imports = [ln for ln in lines[:start] if IMPORT_LINE.match(ln)]
    header = "".join(imports)
    if header and _tokens(tok, header + kept) <= budget:
        kept = header + kept
    return kept, True, offset


def build_prompt(tok: LoadedTokenizer, before: str, after: str, budget: int, fim: FimTokens | None,
                 heal: bool = False) -> Prompt:
    """The prompt for a cursor; with `heal`, the last prefix token is backed off (token healing,
    unless it is all the prefix has) so that the model may spell the typed text its own way."""
    text, truncated, window_start = window(tok, before, budget)
    ids = tok.encode(text)
    healed_ids: tuple[int, ...] = ()
    healed = b""
    if heal:
        h = back_off(tok.vocab.token_bytes, text.encode(), ids)
        ids, healed_ids, healed = h.kept, h.healed_ids, h.healed
    if not ids:  # an empty document: a newline is the most neutral start a model knows
        ids = tok.encode("\n")
    if fim is None:
        return Prompt(ids, len(ids), text, truncated, healed_ids, healed, window_start)
    suffix_text, _, _ = window(tok, after[: 4 * budget], max(budget // 4, 16)) if after else ("", False, 0)
    suffix_ids = tok.encode(suffix_text[: 2000])
    if fim.style == "deepseek" or fim.style == "starcoder" or fim.style == "qwen":
        full = [fim.prefix] + ids + [fim.suffix] + suffix_ids + [fim.middle]
    else:  # codellama: <PRE> prefix <SUF> suffix <MID>
        full = [fim.prefix] + ids + [fim.suffix] + suffix_ids + [fim.middle]
    return Prompt(full, len(ids), text, truncated, healed_ids, healed, window_start)


def lookup_reference(tok: LoadedTokenizer, before: str, after: str, prompt: Prompt,
                     chars: int = 6000) -> list[int]:
    """The document's text that the prompt leaves out, as tokens, for the speculator's lookup:
    the text after the cursor (its first `chars` characters), then the text before the prompt's
    window (its last `chars`)."""
    ids = tok.encode(after[:chars]) if after.strip() else []
    left_out = before[max(0, prompt.window_start - chars) : prompt.window_start]
    if left_out.strip():
        ids += tok.encode(left_out)
    return ids
