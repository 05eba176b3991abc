"""Stopping built in one place: from the document around the cursor, the cursor's context, the
compatibility check with the rest of the file and the stop policy, every field set at
construction."""

from __future__ import annotations

from dataclasses import replace

from grammar_tools.parsing.incremental import PrefixParser
from grammar_tools.parsing.indentation import line_indent

from .compatibility import Compatibility
from .context import cursor_context
from .echo import following_text
from .line_scanner import LineScanner
from .policy import StopPolicy


def stop_policy(before: str, after: str, mode: str, scanner: LineScanner, held: bytes, heal: bytes,
                depth: int, parser: PrefixParser | None = None, parsed_before: bytes = b"",
                compat: Compatibility | None = None) -> StopPolicy:
    """The stop policy for a completion between `before` and `after` (the document split at the
    cursor; `mode`: auto | single | multi). `held` is the open lexeme before the cursor (which
    starts at bracket `depth`), `heal` the typed bytes the first tokens re-create. With a
    `parser` (constrained decoding), every stop must keep the file valid: `parsed_before` is
    the text before the cursor as the parser reads it (recovery rewrites a broken line), and
    the check reads the whole rest of the file (`Compatibility`, over `EditCheck`);
    without one (unconstrained), stops follow the lines alone. A re-decoding at the same cursor
    passes the first policy's `compat` (its set-up and verdicts are the same)."""
    ctx = cursor_context(before, after, mode, scanner.lexer)
    cursor_depth = scanner.depth_after(held + heal, depth)
    if ctx.mode == "multi" and (cursor_depth > 0 or scanner.inside_string(held + heal)):
        # inside brackets or a string, lines end where the physical line does
        ctx = replace(ctx, mode="single")
    line_before = before[before.rfind("\n") + 1 :]
    if parser is not None:
        # the whole rest of the file is read (raises ParseError/LexError when `parsed_before`
        # does not parse)
        compat = compat or Compatibility(parser, parsed_before, after.encode(), ctx.covered.encode())
    return StopPolicy(ctx, scanner, compat, held, heal, depth, line_indent(line_before), not line_before.strip(),
                      cursor_depth, following_text(before, after, ctx.infix))
