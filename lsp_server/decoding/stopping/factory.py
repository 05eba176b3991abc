"""Stopping built in one place: from the document around the cursor, the cursor's context, the
compatibility check with the rest of the file and the stop policy, every field set at
construction."""

from __future__ import annotations

from dataclasses import replace

from grammar_tools.incremental import PrefixParser
from grammar_tools.indentation import line_indent

from .compatibility import Compatibility, following_lines
from .context import cursor_context
from .line_scanner import LineScanner
from .policy import StopPolicy


def stop_policy(before: str, after: str, mode: str, scanner: LineScanner, held: bytes, heal: bytes,
                depth: int, parser: PrefixParser | None = None, parsed_before: bytes = b"") -> StopPolicy:
    """The stop policy for a completion between `before` and `after` (the document split at the
    cursor; `mode`: auto | single | multi). `held` is the open lexeme before the cursor (which
    starts at bracket `depth`), `heal` the typed bytes the first tokens re-create. With a
    `parser` (constrained decoding), every stop must keep the file valid: `parsed_before` is
    the text before the cursor as the parser reads it (recovery rewrites a broken line);
    without one (unconstrained), stops follow the lines alone."""
    ctx = cursor_context(before, after, mode, scanner.lexer)
    cursor_depth = scanner.depth_after(held + heal, depth)
    if ctx.mode == "multi" and (cursor_depth > 0 or scanner.inside_string(held + heal)):
        # inside brackets or a string, lines end where the physical line does
        ctx = replace(ctx, mode="single")
    line_before = before[before.rfind("\n") + 1 :]
    compat = None
    bracket_continues = False
    if parser is not None:
        head_depth = 0
        if cursor_depth == 0 and "\n" in ctx.follow:
            # the head's last byte starts a lexeme the parser does not read yet
            head = ctx.follow.rsplit("\n", 1)[-1].lstrip(" \t\f").encode()[:-1]
            head_depth = scanner.depth_after(head)
        rest, rest_ends_file = following_lines(after[len(ctx.covered) :]) if cursor_depth > 0 else (None, False)
        compat = Compatibility(parser, parsed_before, ctx, top_level=cursor_depth == 0, head_depth=head_depth,
                               rest=rest, rest_ends_file=rest_ends_file)
        # the file goes on inside the brackets open at the cursor (a multi-line call, list...)
        bracket_continues = cursor_depth > 0 and compat.goes_on_with(b"")
    return StopPolicy(ctx, scanner, compat, held, heal, depth, line_indent(line_before), not line_before.strip(),
                      cursor_depth, bracket_continues)
