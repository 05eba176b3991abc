"""What surrounds the cursor, as far as stopping is concerned: the mode (single-line or
multi-line), whether code follows on the cursor's line (infix), the auto-closed brackets after
the cursor, and the text the parser must be able to read after a completion."""

from __future__ import annotations

import re
from dataclasses import dataclass

from grammar_tools.parsing.indentation import line_indent
from grammar_tools.lexing.lexer_automaton import START, LexError, LexerAutomaton

CLOSERS = frozenset(")]}\"'")
_FIRST_WORD = re.compile(r"[ \t\f]*(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+|\S)")
_OPENER_END = re.compile(r":[ \t]*(#.*)?$")


@dataclass(frozen=True)
class CursorContext:
    """What surrounds the cursor, as far as stopping is concerned."""

    mode: str  # "single" | "multi"
    infix: bool  # the rest of the line holds code the completion must join
    covered: str  # auto-closed brackets/quotes after the cursor that the completion supplies
    follow: str  # the text the parser must be able to read after the completion
    at_eof: bool  # nothing but blank lines/comments follow: the completion may end the file
    continued: bool = False  # `follow` holds lines indented deeper than the cursor's statement


FOLLOW_LINES = 60  # at most this many lines of a statement's continuation are checked


def first_words(text: str, lexer: LexerAutomaton | None = None, lexemes: int = 2,
                indent: int | None = None) -> tuple[str, bool, bool]:
    """`text` (what follows the completion) cut after the rest of its first line, then every
    line indented deeper than `indent` (the cursor's statement: its continuation lines, or the
    body of a block the completion must open; up to FOLLOW_LINES), then the next line's
    indentation and first `lexemes` lexemes (closed, so that the parser reads them: the start
    of the one after is kept); whether no such line exists; and whether deeper lines were kept."""
    lines = text.split("\n")
    out = [lines[0]]
    deeper = 0
    for ln in lines[1:]:
        s = ln.strip()
        if not s or s.startswith("#"):
            out.append("")
            continue
        if indent is not None and line_indent(ln) > indent and deeper < FOLLOW_LINES:
            out.append(ln)
            deeper += 1
            continue
        out.append(_line_head(ln, lexer, lexemes))
        return "\n".join(out), False, deeper > 0
    if deeper:
        return "\n".join(out).rstrip(" \t\n") + "\n", True, True
    return lines[0], True, False


def _line_head(line: str, lexer: LexerAutomaton | None, lexemes: int) -> str:
    indent = len(line) - len(line.lstrip(" \t\f"))
    if lexer is not None:
        data = line[indent:].encode()
        try:
            found, _, _ = lexer.lex(data + b"\n", START, 0)
        except LexError:
            # the line can't be read on its own (`it's` in a docstring's text): only a completion
            # that opens what the line goes on with (the string) is compatible, so keep it all
            return line + "\n"
        if found is not None:
            words = [(a, b) for a, b, d in found if data[a:b].strip()]
            if len(words) > lexemes:
                return line[:indent] + data[: words[lexemes][0] + 1].decode("utf-8", errors="ignore")
            return line + "\n"
    m = _FIRST_WORD.match(line)
    return line[: m.end()] + " "


def cursor_context(before: str, after: str, mode: str = "auto", lexer: LexerAutomaton | None = None) -> CursorContext:
    nl = after.find("\n")
    rest = after if nl < 0 else after[:nl]
    stripped = rest.strip()
    covered = ""
    infix = False
    if stripped and all(ch in CLOSERS or ch in " \t" for ch in stripped):
        covered = rest[: len(rest.rstrip())]
    elif stripped:
        infix = not stripped.startswith("#")
    line_before = before[before.rfind("\n") + 1 :]
    # the statement at the cursor is indented as its line (or up to the cursor on a blank line)
    follow, at_eof, continued = first_words(after[len(covered) :], lexer, indent=line_indent(line_before))
    if mode == "auto":
        mode = "single"
        if not infix and not rest.strip():
            if _OPENER_END.search(line_before):
                mode = "multi"
            elif not line_before.strip():
                above = [ln for ln in before.split("\n")[:-1][-50:] if ln.strip() and not ln.lstrip().startswith("#")]
                inside_block = bool(line_before) or (above and _OPENER_END.search(above[-1]))
                mode = "multi" if inside_block else "single"
    if infix:
        mode = "single"
    return CursorContext(mode, infix, covered, follow, at_eof, continued)
