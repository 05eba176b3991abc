"""Line endings as LSP has them (issue 22, finding 6): "\\n", "\\r\\n" and a lone "\\r" each end a
line, nothing else does. Positions are checked against a plain definition on random texts,
mirrored edits keep the server's copy equal to the client's (CR-only and mixed documents, edits
that join or split a "\\r\\n"), and the engine's cursor follows: a completion in a CR-only or
mixed document is the one the same document with "\\n" gets, written with the document's line
end."""

from __future__ import annotations

import random
import re

import pytest
from lsprotocol import types

from lsp_server.decoding.results import CompletionResult, Figures
from lsp_server.options import EngineOptions
from lsp_server.positions import PositionError, line_end_of, line_starts, offset_at, position_of, to_lf
from lsp_server.server.documents import DocumentStore
from lsp_server.server.engine_host import EngineHost
from lsp_server.server.suggester import Suggester
from lsp_server.server.telemetry import Telemetry
from raw_lsp import RawServer, lsp_lines, lsp_offset, text_digest
from wait_support import until

PIECES = ["a", "b", " ", "é", "😀", "\n", "\r", "\r\n", "\u2028", "\x0c", "\x0b", "\x85", "("]


def random_text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(PIECES) for _ in range(n))


def test_positions_follow_the_lsp_rule():
    rng = random.Random(6)
    for _ in range(300):
        text = random_text(rng, rng.randint(0, 40))
        lines = lsp_lines(text)
        assert line_starts(text) == [s for s, _ in lines]
        for line, (start, end) in enumerate(lines):
            width = sum(2 if ord(c) > 0xFFFF else 1 for c in text[start:end])
            for character in range(width + 3):  # past the end: clamped to the line's end
                off = offset_at(text, line, character)
                assert off == lsp_offset(text, line, character)
                if character <= width and (character == 0 or off > start):
                    assert position_of(text, off)[0] == line
        with pytest.raises(PositionError):
            offset_at(text, len(lines), 0)
        lf = to_lf(text)
        assert len(lsp_lines(lf)) == len(lines)  # the engine's text: the same lines
        assert [lf[s:e] for s, e in lsp_lines(lf)] == [text[s:e] for s, e in lines]  # and the same characters
    assert line_end_of("a\r\nb\nc") == "\r\n" and line_end_of("a\rb") == "\r" and line_end_of("ab") == "\n"


def _random_edit(rng: random.Random, text: str):
    lines = lsp_lines(text)
    l0 = rng.randrange(len(lines))
    l1 = min(len(lines) - 1, l0 + rng.choice([0, 0, 1, 2]))
    c0 = rng.randint(0, lines[l0][1] - lines[l0][0] + 1)
    c1 = rng.randint(0, lines[l1][1] - lines[l1][0] + 1) if l1 > l0 else rng.randint(c0, c0 + 3)
    new = rng.choice(["", "x", "\n", "\r", "\r\n", "\n\r", "😀\r", "ab\r\ncd", "é"])
    a, b = lsp_offset(text, l0, c0), lsp_offset(text, l1, c1)
    return ((l0, c0), (l1, c1)), new, text[:a] + new + text[max(a, b):]


def test_mirrored_edits_in_the_document_store():
    rng = random.Random(66)
    store = DocumentStore()
    for k, start in enumerate(["a\rb\rc\r", "x = 1\r\ny = 2\rz = 3\n", "\r\n\r\r\n\n"]):
        uri = f"file:///d{k}.py"
        client = start
        store.open(uri, "python", 1, client)
        for v in range(2, 500):
            rng_range, new, client = _random_edit(rng, client)
            doc = store.change(uri, v, [(rng_range, new)])
            assert doc.text == client and doc.refused is None
            assert doc.starts == line_starts(client)


def test_mirrored_edits_over_the_wire():
    """300 random edits to a CR-only and a mixed document, sent as the client would: the
    server's copy (its digest in syntaxlock.status) is the client's, no change is refused."""
    rng = random.Random(606)
    docs = {"file:///cr.py": "import os\rx = os.path\rdef f():\r    return 1\r",
            "file:///mixed.py": "import os\r\nx = 1\ry = 2\n\r\n\rz = [\r    1,\n]\r\n"}
    with RawServer() as s:
        s.initialize({"enabled": False}, wait="disabled")
        for uri, text in docs.items():
            s.open(uri, text)
        version = 1
        for _ in range(300):
            uri = rng.choice(list(docs))
            version += 1
            ((l0, c0), (l1, c1)), new, docs[uri] = _random_edit(rng, docs[uri])
            change = {"range": {"start": {"line": l0, "character": c0}, "end": {"line": l1, "character": c1}},
                      "text": new}
            s.notify("textDocument/didChange",
                     {"textDocument": {"uri": uri, "version": version}, "contentChanges": [change]})
        held = s.call("workspace/executeCommand", {"command": "syntaxlock.status"})["result"]["documents"]
        for uri, text in docs.items():
            assert held[uri]["blake2b"] == text_digest(text), uri
            assert held[uri]["lines"] == len(lsp_lines(text)) and held[uri]["refused"] is None
        assert "not applied" not in s.log_text() and "outside the document" not in s.log_text()


class EchoEngine:
    """Stands in for the engine: records the request and answers two lines after the cursor."""

    def __init__(self, options) -> None:
        self.options, self.requests = options, []

    def complete(self, request, cancel, options=None):
        self.requests.append(request)
        pos = request.cursor
        return CompletionResult("x)\nnext(", pos, pos, "line-end", "multi", True, figures=Figures(tokens_generated=3))

    def forget(self, uri) -> None:
        pass

    def describe(self) -> dict:
        return {"model": "echo", "device": "cpu", "store": "memory"}


async def _echo_suggester():
    """(the echo engines made, their host once ready, a document store, a suggester over both)."""
    engines = []
    host = EngineHost(
        lambda status: None, loader=lambda options, progress: engines.append(EchoEngine(options)) or engines[-1]
    )
    host.configure(EngineOptions(model="echo"))
    await until(lambda: host.ready)
    docs = DocumentStore()
    return engines, host, docs, Suggester(docs, host, Telemetry(), lambda message, kind: None, lambda: True)


async def test_the_engine_reads_lf_text_with_the_client_cursor():
    """What the engine gets for a CR-only, CRLF and mixed document: "\n" line ends, the cursor on
    the same character; what the client gets back: the document's own line end."""
    engines, host, docs, suggester = await _echo_suggester()
    for name, text, eol in (("cr", "a = 1\rb = f(\rc = 2\r", "\r"), ("crlf", "a = 1\r\nb = f(\r\nc = 2", "\r\n"),
                            ("mixed", "a = 1\r\rb = f(\nc = 2\r\n", "\r")):  # its first line end
        uri = f"file:///{name}.py"
        docs.open(uri, "python", 1, text)
        line = next(i for i, (s, e) in enumerate(lsp_lines(text)) if text[s:e] == "b = f(")
        got = await suggester.suggest(uri, types.Position(line, 6), None, None)
        request = engines[0].requests[-1]
        assert "\r" not in request.text
        assert request.text[: request.cursor].endswith("\nb = f(")  # the cursor's offset in the "\n" text
        assert request.line == line
        assert got.text == "x)" + eol + "next(" and got.range.start == types.Position(line, 6)
    host.shutdown()


async def test_a_lone_surrogate_reaches_the_engine_as_one_replacement_character():
    """A JSON string may hold a lone surrogate, which UTF-8 cannot: the engine gets U+FFFD in its
    place (the same characters before the cursor), and the answer lands where it was asked."""
    engines, host, docs, suggester = await _echo_suggester()
    text = 's = "\ud800"\r\nb = f('
    docs.open("file:///s.py", "python", 1, text)
    got = await suggester.suggest("file:///s.py", types.Position(1, 6), None, None)
    request = engines[0].requests[-1]
    assert request.text == 's = "\ufffd"\nb = f(' and request.text.encode("utf-8")
    assert request.cursor == len(request.text) and request.line == 1
    assert got.range.start == types.Position(1, 6)
    assert to_lf("a\ud83d\udc00b") == "a\ufffd\ufffdb" and to_lf("a😀b") == "a😀b"  # only lone ones
    host.shutdown()


def mixed_line_ends(text: str, rng: random.Random) -> str:
    """`text` with each "\n" replaced by "\n", "\r" or "\r\n" at random, never a "\n" right
    after a "\r" (that would join two line ends into one)."""
    parts = text.split("\n")
    out = parts[0]
    for part in parts[1:]:
        out += rng.choice(["\r", "\r\n"] if out.endswith("\r") else ["\n", "\r", "\r\n"]) + part
    return out


def _json_decoder_cuts() -> tuple[list[str], list[tuple[int, int]]]:
    """json/decoder.py's lines, and cursors right after the first name of `return NAME` /
    `x = NAME` statements (as test_server_completion has them)."""
    import json.decoder

    with open(json.decoder.__file__, encoding="utf-8") as f:
        lines = f.read().splitlines(keepends=True)
    cuts = []
    for i, ln in enumerate(lines):
        m = re.match(r"^(\s{4,}(?:return |\w+ = ))([A-Za-z_]\w*)\b", ln)
        if m:
            cuts.append((i, m.end()))
    return lines, cuts


@pytest.mark.slow
def test_the_engine_cursor_follows_the_lsp_lines(tiny_model_dir):
    """The same cursor in the same file written with "\n", "\r", "\r\n" and mixed line ends
    gets the same completion from the real server (the tiny model decodes greedily)."""
    rng = random.Random(60)
    lines, cuts = _json_decoder_cuts()
    compared = 0
    with RawServer() as s:
        # no latency budget: on a loaded machine it would cut answers at different points
        s.initialize({"model": str(tiny_model_dir), "maxTokens": 6, "mode": "single", "contextTokens": 256,
                      "latencyBudgetMs": 0})
        for n, (line, character) in enumerate(cuts[1::3]):
            lf = "".join(lines[:line]) + lines[line][:character] + "\n" + "".join(lines[line + 1 :])
            ref = _items(s, f"file:///lf_{n}.py", lf, line, character)
            if not ref:
                continue
            variants = {"cr": lf.replace("\n", "\r"), "crlf": lf.replace("\n", "\r\n"),
                        "mixed": mixed_line_ends(lf, rng)}
            for name, text in variants.items():
                items = _items(s, f"file:///{name}_{n}.py", text, line, character)
                got = [(i["range"], to_lf(i["insertText"])) for i in items]
                assert got == [(i["range"], i["insertText"]) for i in ref], name
            compared += 1
            if compared == 2:
                break
        assert compared, "no cursor got a suggestion"
        assert "outside the document" not in s.log_text()


def _items(s: RawServer, uri: str, text: str, line: int, character: int) -> list[dict]:
    s.open(uri, text)
    r = s.response(s.inline(uri, line, character))
    return r["result"]["items"]
