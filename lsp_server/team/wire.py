"""What a team request carries to the grammar on the server: `TeamArgs`, one JSON string in
vLLM's per-request `extra_args` (sent over HTTP as `vllm_xargs: {"syntaxlock": "..."}`).

The server never parses the document. The local server has parsed the text before the cursor
already (its `PrefixParser`, kept per document and re-lexed only from the first changed byte),
so it sends the *parse state* the grammar starts from: the recognizer's configurations (their
LALR stacks as a small node table: state, attribute, context, bracket depth and indentation
stack of each node, shared parents sent once), the lexer state and bytes of the open lexeme,
and the open newline's width. That is O(nesting depth), not O(file): a 1,000-line file's
state is a stack of ~20 nodes, ~1 KB of JSON, where its text would be ~40 KB to send and
~50 ms of parsing on the server for every request. The matcher built from it is the very
matcher `GrammarMatcher.from_prefix` builds (tests/test_team_rows.py compares masks).

Beside the parse state: the healed bytes (token healing: the prompt's last token backed off,
the first tokens must spell it again), the canonical-tokenization state after the prompt, the
target Python version, and what the stop policy needs of the text after the cursor without
reading the whole file (the cursor's context: mode, infix, auto-closed brackets, the
following lines the echo rule compares with; the whole-file validity checks stay on the local
server). `replay`/`avoid` serve the local offer search's re-decoding passes (`model_pass.Tries`).

Hashes of the grammar (lexer automaton) and the tokenizer travel too: a server whose mask
store was built for another grammar or tokenizer refuses the request (HTTP 400) instead of
masking with the wrong rows.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

from grammar_tools.parsing.incremental import PrefixState
from grammar_tools.parsing.recognizer import Node

from mask_store.canonical import CanonicalState, Continuation

from ..decoding.stopping.rest_of_file import CursorContext, Start, FollowingText, RestOfFile

XARGS_KEY = "syntaxlock"  # the one key of `vllm_xargs` this project uses
VERSION = 1  # of the wire format: a server refuses another


class TeamArgsError(ValueError):
    """A request's arguments that the server can't use (the message says why)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


# ---------------------------------------------------------------------- parse state

def _flat_indent(indent) -> list[int]:
    """An indentation stack (col, altcol, parent) as a flat list of (col, altcol) pairs, top first."""
    out: list[int] = []
    while indent:
        col, alt, indent = indent
        out += [col, alt]
    return out


def _nested_indent(flat: list[int]):
    indent: tuple = ()
    for i in range(len(flat) - 2, -1, -2):
        indent = (flat[i], flat[i + 1], indent)
    return indent


def encode_nodes(configs) -> tuple[list[list], list[int]]:
    """The configurations' stacks as a node table (parents before children; each node
    [state, parent index or -1, attr, ctx, depth, flat indent]) and the top node of each."""
    index: dict[int, int] = {}
    table: list[list] = []

    def visit(node: Node) -> int:
        chain = []
        n = node
        while n is not None and id(n) not in index:
            chain.append(n)
            n = n.parent
        for m in reversed(chain):
            parent = -1 if m.parent is None else index[id(m.parent)]
            index[id(m)] = len(table)
            table.append([m.state, parent, m.attr, m.ctx, m.depth, _flat_indent(m.indent)])
        return index[id(node)]

    tops = [visit(c) for c in configs]
    return table, tops


def decode_nodes(table: list[list], tops: list[int]) -> tuple[Node, ...]:
    nodes: list[Node] = []
    for row in table:
        state, parent, attr, ctx, depth, indent = row
        if parent >= len(nodes):
            raise TeamArgsError("parse state: a node's parent comes after it")
        nodes.append(Node(int(state), nodes[parent] if parent >= 0 else None, int(attr), int(ctx), int(depth),
                          _nested_indent([int(v) for v in indent])))
    return tuple(nodes[i] for i in tops)


# ---------------------------------------------------------------------- the arguments

@dataclass(frozen=True)
class TeamArgs:
    """One completion's arguments for the grammar on the team server (module docstring)."""

    configs: tuple  # the recognizer's configurations after the text before the cursor (Nodes)
    lexer_state: int  # the open lexeme's lexer state
    held: bytes  # the open lexeme's bytes (the healed bytes left out)
    newline_width: tuple[int, int] | None  # the open newline's indentation so far
    heal: bytes  # bytes the first tokens must spell again (token healing)
    canonical: CanonicalState  # canonical tokenization's state after the prompt (OFF: not filtered)
    python_version: tuple[int, int]
    # the stop policy's view of the text after the cursor (RestOfFile without the whole-file check)
    ctx: CursorContext
    follow: FollowingText
    tail: bytes
    line_col: int
    line_blank: bool
    cursor_depth: int
    code_col: int
    start_depth: int  # bracket depth where `held` starts
    start: Start = Start.CURSOR_LINE
    replay: tuple[int, ...] = ()  # tokens taken before the first decided step (appended to the prompt)
    avoid: frozenset[int] = frozenset()  # banned at the first decided step
    grammar_hash: str = ""
    tokenizer_hash: str = ""
    end_token: int = -1  # the token forced where the stop policy ends the answer
    extra: dict = field(default_factory=dict)

    @classmethod
    def build(cls, state: PrefixState, held: bytes, heal: bytes, canonical: CanonicalState, python_version,
              rest: RestOfFile, start_depth: int, start: Start, replay=(), avoid=frozenset(),
              grammar_hash: str = "", tokenizer_hash: str = "", end_token: int = -1) -> TeamArgs:
        return cls(tuple(state.configs), state.lexer_state, held, state.newline_width, heal, canonical,
                   tuple(python_version), rest.ctx, rest.follow, rest.tail, rest.line_col, rest.line_blank,
                   rest.cursor_depth, rest.code_col, start_depth, start, tuple(replay), frozenset(avoid),
                   grammar_hash, tokenizer_hash, end_token)

    def rest_of_file(self, compat=None) -> RestOfFile:
        """The stop policy's `RestOfFile` (`compat`: the validity check; the server passes one
        that accepts every cut: the whole-file checks are the local server's)."""
        return RestOfFile(self.ctx, self.follow, compat, self.tail, self.line_col, self.line_blank,
                          self.cursor_depth, self.code_col)

    def prefix_state(self) -> PrefixState:
        return PrefixState(self.configs, self.lexer_state, 0, len(self.held), self.newline_width)

    def to_json(self) -> str:
        table, tops = encode_nodes(self.configs)
        c, f = self.ctx, self.follow
        return json.dumps({
            "v": VERSION,
            "nodes": table, "tops": tops, "lexer_state": self.lexer_state, "held": _b64(self.held),
            "newline_width": list(self.newline_width) if self.newline_width is not None else None,
            "heal": _b64(self.heal),
            "canonical": [self.canonical.last, int(self.canonical.continuation)],
            "python": list(self.python_version),
            "ctx": [c.mode, c.infix, c.covered, c.continued, c.lines],
            "follow": [_b64(f.line_before), _b64(f.line_rest), [_b64(x) for x in f.lines]],
            "tail": _b64(self.tail), "line_col": self.line_col, "line_blank": self.line_blank,
            "cursor_depth": self.cursor_depth, "code_col": self.code_col, "start_depth": self.start_depth,
            "start": self.start.name, "replay": list(self.replay), "avoid": sorted(self.avoid),
            "grammar": self.grammar_hash, "tokenizer": self.tokenizer_hash, "end": self.end_token,
        }, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> TeamArgs:
        """The arguments from their JSON (TeamArgsError naming what is wrong)."""
        try:
            d = json.loads(text)
            if not isinstance(d, dict):
                raise TeamArgsError("the syntaxlock argument must be a JSON object")
            if d.get("v") != VERSION:
                raise TeamArgsError(f"wire format {d.get('v')!r}; this server reads version {VERSION}")
            mode, infix, covered, continued, lines = d["ctx"]
            if mode not in ("single", "multi"):
                raise TeamArgsError(f"mode must be single or multi, not {mode!r}")
            lb, lr, fl = d["follow"]
            nw = d["newline_width"]
            return cls(
                configs=decode_nodes(d["nodes"], d["tops"]),
                lexer_state=int(d["lexer_state"]), held=_unb64(d["held"]),
                newline_width=(int(nw[0]), int(nw[1])) if nw is not None else None,
                heal=_unb64(d["heal"]),
                canonical=CanonicalState(int(d["canonical"][0]), Continuation(int(d["canonical"][1]))),
                python_version=(int(d["python"][0]), int(d["python"][1])),
                ctx=CursorContext(mode, bool(infix), str(covered), bool(continued), bool(lines)),
                follow=FollowingText(_unb64(lb), _unb64(lr), tuple(_unb64(x) for x in fl)),
                tail=_unb64(d["tail"]), line_col=int(d["line_col"]), line_blank=bool(d["line_blank"]),
                cursor_depth=int(d["cursor_depth"]), code_col=int(d["code_col"]),
                start_depth=int(d["start_depth"]), start=Start[d["start"]],
                replay=tuple(int(t) for t in d["replay"]), avoid=frozenset(int(t) for t in d["avoid"]),
                grammar_hash=str(d["grammar"]), tokenizer_hash=str(d["tokenizer"]), end_token=int(d["end"]),
            )
        except TeamArgsError:
            raise
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise TeamArgsError(f"malformed syntaxlock argument: {type(e).__name__}: {e}") from None
