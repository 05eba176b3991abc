"""What surrounds the cursor, as far as stopping is concerned: the mode (single-line or
multi-line), whether code follows on the cursor's line (infix) or the cursor is at its start
(lines: the answer is whole lines above it), the auto-closed brackets after the cursor, and
whether the next line of code continues the cursor's statement (deeper)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from grammar_tools.parsing.incremental import line_indent

CLOSERS = frozenset(")]}\"'")
_OPENER_END = re.compile(rb":[ \t]*(#[^\n]*)?\r?$")


def opens_block(line: bytes) -> bool:
    """Whether `line` (one physical line, no newline) ends like a block header: a colon, then
    at most a comment (its body must follow). The one block-opener rule: the cursor's context
    and the stop policy's lines ask it."""
    return bool(_OPENER_END.search(line))


class Start(Enum):
    """Where an answer at a line start writes its first code."""

    CURSOR_LINE = "cursor line"  # on the cursor's line, after the blanks before it
    NEXT_LINE = "next line"  # on a line of its own: the answer ends the cursor's line first (its indentation stays, blank)


@dataclass(frozen=True)
class CursorContext:
    """What surrounds the cursor, as far as stopping is concerned."""

    mode: str  # "single" | "multi"
    infix: bool  # the rest of the line holds code the completion must join
    covered: str  # auto-closed brackets/quotes after the cursor that the completion supplies
    continued: bool = False  # the next line of code is indented deeper than the cursor's statement
    lines: bool = False  # the cursor is at or inside the leading whitespace of a non-blank line: insert whole lines above it


def continues_deeper(text: str, indent: int) -> bool:
    """Whether the first line of code after the first line of `text` (what follows the
    completion) is indented deeper than `indent` (the cursor's statement): its continuation
    lines, or the body of a block the completion must open."""
    for ln in text.split("\n")[1:]:
        s = ln.strip()
        if s and not s.startswith("#"):
            return line_indent(ln) > indent
    return False


def cursor_context(before: str, after: str, mode: str = "auto") -> CursorContext:
    nl = after.find("\n")
    rest = after if nl < 0 else after[:nl]
    stripped = rest.strip()
    covered = ""
    infix = False
    line_before = before[before.rfind("\n") + 1 :]
    if stripped and not line_before.strip():
        # a line start of existing code (its closing bracket too: not auto-closed, the line's own)
        return CursorContext("single", False, "", continues_deeper(after, line_indent(line_before)), lines=True)
    if stripped and all(ch in CLOSERS or ch in " \t" for ch in stripped):
        covered = rest[: len(rest.rstrip())]
    elif stripped:
        infix = not stripped.startswith("#")
    # the statement at the cursor is indented as its line (or up to the cursor on a blank line)
    continued = continues_deeper(after[len(covered) :], line_indent(line_before))
    if mode == "auto":
        mode = "single"
        if not infix and not rest.strip():
            if opens_block(line_before.encode()):
                mode = "multi"
            elif not line_before.strip():
                above = [ln for ln in before.split("\n")[:-1][-50:] if ln.strip() and not ln.lstrip().startswith("#")]
                inside_block = bool(line_before) or (above and opens_block(above[-1].encode()))
                mode = "multi" if inside_block else "single"
    if infix:
        mode = "single"
    return CursorContext(mode, infix, covered, continued)
