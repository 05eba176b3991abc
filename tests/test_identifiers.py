"""Names that exist (lsp_server/decoding/identifiers, docs/identifiers.md): the analysis at a
cursor, the places identifiers are written, and completions of a scripted model whose first
choice is a name that does not exist, with and without the guide; then the server answering
them end to end (work ahead makes the analysis, the request uses it)."""

from __future__ import annotations


import asyncio

import numpy as np
import pytest
import torch

from lsp_server.decoding.engine import CompletionEngine, CompletionRequest
from lsp_server.decoding.identifiers.analysis import analyse
from lsp_server.decoding.identifiers.guide import BIAS_NATS, SURE_NATS, WANTED_NATS
from lsp_server.decoding.identifiers.slots import SlotKind, slot_at
from lsp_server.options import EngineOptions, OptionError

from scripted_model import ScriptedRuntime

pytestmark = pytest.mark.names
FLOOR = -10.0  # ScriptedRuntime's score of the tokens it does not favour
SURE = (BIAS_NATS + SURE_NATS) / 2  # a model surer of a name than BIAS_NATS, less than SURE_NATS


class LeaningRuntime:
    """A model torn between two scripts: the tokens `first` favours score `margin` (and a little
    by `first`'s own order) above those `second` favours (a near tie, which a bias of BIAS_NATS
    decides); where neither script applies, the floor."""

    def __init__(self, first: ScriptedRuntime, second: ScriptedRuntime, margin: float) -> None:
        self.first, self.second, self.margin = first, second, margin
        self.tokenizer, self.fim, self.name = first.tokenizer, first.fim, "leaning"
        self.device, self.load_seconds, self.prefill_chunk = torch.device("cpu"), 0.0, first.prefill_chunk

    @property
    def vocab_size(self) -> int:
        return self.first.vocab_size

    def forward(self, ids, past=None, keep=None, cancel=None, wanted=None):
        a, past = self.first.forward(ids, past, keep)
        past.n -= len(ids)
        b, _ = self.second.forward(ids, past, keep)
        second = torch.where(b > FLOOR, 50.0 + b / 1000, torch.full_like(b, FLOOR))
        return torch.where(a > FLOOR, 50.0 + self.margin + a / 1000, second), past


def engine_for(compiled, before: str, first: str, second: str | None = None, margin: float = 1000.0,
               **opts) -> CompletionEngine:
    comp, tok = compiled
    runtime = ScriptedRuntime(tok, (before + first).encode())
    if second is not None:
        runtime = LeaningRuntime(runtime, ScriptedRuntime(tok, (before + second).encode()), margin)
    # canonical off: a scripted model that leaves its script spells the other one by the longest
    # tokens (`cus` `tome` `rs`), which canonical tokenization forbids midway
    return CompletionEngine(EngineOptions(speculative=False, canonical=False, **opts), runtime, comp)


def complete(compiled, doc: str, first: str, second: str | None = None, margin: float = 1000.0,
             identifiers: str = "constrain", ready: bool = True):
    """Complete `doc` at its `|` with a model whose first choice writes `first` there."""
    off = doc.index("|")
    text = doc[:off] + doc[off + 1 :]
    before = text[:off]
    engine = engine_for(compiled, before, first, second, margin, identifiers=identifiers, mode="single")
    request = CompletionRequest.at(text, before.count("\n"), len(before) - before.rfind("\n") - 1, document="file:///t.py")
    if ready:
        engine.names_ahead(request, wait=120)
    return engine.complete(request)


SHOP = """import os


class Shop:
    def __init__(self, customers):
        self.customers = customers
        self.open = True

    def count(self):
        return len(self.|)
"""


def test_self_attributes_set_in_init_are_known_and_a_missing_one_is_masked(compiled):
    r = complete(compiled, SHOP, "custmers)\n", "customers)\n")
    assert r.figures.names_ready and r.figures.names_masked > 0
    assert r.text == "customers)"
    off = complete(compiled, SHOP, "custmers)\n", "customers)\n", identifiers="off")
    assert off.text == "custmers)" and not off.figures.names_ready


def test_a_module_attribute_that_does_not_exist_is_masked(compiled):
    doc = "import os\n\n\ndef here():\n    return os.|\n"
    r = complete(compiled, doc, "getcwdu()\n", "getcwd()\n")
    assert r.text == "getcwd()" and r.figures.names_masked > 0
    assert complete(compiled, doc, "getcwdu()\n", "getcwd()\n", identifiers="bias").text.startswith("getcwd")


def test_a_misspelled_local_loses_to_the_name_in_scope_under_bias(compiled):
    doc = "def total(prices):\n    subtotal = sum(prices)\n    return |\n"
    assert 1.0 < BIAS_NATS
    r = complete(compiled, doc, "subtotl * 2\n", "subtotal * 2\n", margin=1.0, identifiers="bias")
    assert r.text == "subtotal * 2" and r.figures.names_shaped > 0
    assert complete(compiled, doc, "subtotl * 2\n", "subtotal * 2\n", margin=1.0, identifiers="off").text == "subtotl * 2"


def test_a_name_defined_later_in_the_file_is_known(compiled):
    doc = "def main():\n    return |\n\n\ndef helper():\n    return 1\n"
    r = complete(compiled, doc, "helpr()\n", "helper()\n", margin=1.0, identifiers="bias")
    assert r.text == "helper()"
    assert b"helper" in analyse(doc.replace("|", ""), 1).names


@pytest.mark.parametrize("doc, first, expected", [
    ("def f(items, |):\n    return items\n", "wantd):\n", "wantd"),  # a parameter
    ("def f(items):\n    for |\n", "itm in items: pass\n", "itm in items: pass"),  # a for target
    ("import json as |\n", "jsn\n", "jsn"),  # an import's as-name
    ("def f(items):\n    return sorted(items, |)\n", "revrse=True)\n", "revrse=True)"),  # a keyword argument
    ("class Shop:\n    def __init__(self):\n        self.|\n", "custmers = []\n", "custmers = []"),  # an attribute assigned
])
def test_a_binding_place_is_never_restricted(compiled, doc, first, expected):
    r = complete(compiled, doc, first)  # (a load after it, `in items`, may be masked towards known names)
    assert r.figures.names_ready
    assert r.text == expected


@pytest.mark.parametrize("doc", [
    "class Config:\n    def __getattr__(self, name):\n        return name\n\n    def get(self):\n        return self.|\n",
    "class Base:\n    def run(self):\n        return self.|\n\n\nclass Job(Base):\n    def __init__(self):\n        self.steps = []\n",
    "import os\n\n\nclass Path(os.PathLike):\n    def name(self):\n        return self.|\n",
])
def test_a_dynamic_object_is_never_masked(compiled, doc):
    r = complete(compiled, doc, "anything_at_all\n")
    assert r.figures.names_ready and r.figures.names_masked == 0
    assert r.text == "anything_at_all"


HELPER = "def helper(x):\n    return x\n\n\ndef f(items):\n"


def test_a_misspelled_function_read_outside_brackets_is_lowered(compiled):
    doc = HELPER + "    total = |\n"
    r = complete(compiled, doc, "helpr(items)\n", "helper(items)\n", margin=SURE)
    assert r.figures.names_ready and r.figures.names_shaped > 0 and r.figures.names_masked == 0
    assert r.text == "helper(items)"
    assert complete(compiled, doc, "helpr(items)\n", "helper(items)\n", margin=SURE, identifiers="bias").text == "helpr(items)"
    assert complete(compiled, doc, "helpr(items)\n", "helper(items)\n", margin=SURE, identifiers="off").text == "helpr(items)"


def test_an_unknown_name_in_a_parameters_default_is_lowered_as_outside_brackets(compiled):
    """A default is read where the function is defined: an unknown name there (a module the file
    never imports: stdlib's asyncio/staggered.py got `= asyncio.Future(None)`) is held back as a
    read outside brackets, where before the `def`'s parenthesis left it unrestricted."""
    doc = "import time\n\n\ndef wait(delay, *, clock=|\n    return clock() + delay\n"
    r = complete(compiled, doc, "timer.monotonic):\n", "time.monotonic):\n", margin=SURE)
    assert r.figures.names_ready and r.figures.names_shaped > 0
    assert r.text == "time.monotonic):"
    assert complete(compiled, doc, "timer.monotonic):\n", "time.monotonic):\n", margin=SURE,
                    identifiers="bias").text == "timer.monotonic):"


def test_an_unknown_name_at_a_statement_start_is_not_read_but_may_be_bound(compiled):
    doc = HELPER + "    |\n"
    r = complete(compiled, doc, "helpr(items)\n", "helpr = items\n", margin=SURE)
    assert r.figures.names_shaped > 0 and r.text == "helpr = items"
    assert complete(compiled, doc, "helpr(items)\n", "helpr = items\n", margin=SURE, identifiers="bias").text == "helpr(items)"
    # a new target: what follows the name while it is written may be held back (`helpr(`), the name is not
    assert complete(compiled, doc, "helpr = items\n", "helper(items)\n", margin=SURE).text == "helpr = items"
    assert complete(compiled, "def f(items):\n    |\n", "countr = len(items)\n").text == "countr = len(items)"


@pytest.mark.parametrize("doc, first, expected", [
    ("def f(items):\n    return [|\n", "itm for itm in items]\n", "itm for itm in items]"),  # a comprehension
    ("def f(items):\n    return sum(|\n", "itm for itm in items)\n", "itm for itm in items)"),
    ("def f(stream):\n    while |\n", "chunk := stream.read(): pass\n", "chunk := stream.read(): pass"),  # walrus
    ("def f(p):\n    match p:\n        case |\n", "pt: return pt\n", "pt: return pt"),  # a capture
    ("def f(x):\n    return f'{|\n", "[c for c in x]}'\n", "[c for c in x]}'"),  # an f-string's field
    ("from os.path import *\n\n\ndef f():\n    return |\n", "joinx(1)\n", "joinx(1)"),  # a star import
    ("def f():\n    return |\n\n\ndef g():\n    later = 1\n", "later\n", "later"),  # any scope's name
    ("def f():\n    return |\n", "__name__\n", "__name__"),
])
def test_a_name_that_may_exist_is_never_masked(compiled, doc, first, expected):
    r = complete(compiled, doc, first)  # the guide masks towards the names it knows, never away from these
    assert r.figures.names_ready
    assert r.text == expected


def test_without_a_ready_analysis_the_request_decodes_without_it(compiled):
    r = complete(compiled, SHOP, "custmers)\n", "customers)\n", ready=False)
    assert not r.figures.names_ready and r.text == "custmers)"


@pytest.mark.parametrize("text, kind, partial, receiver", [
    ("x = os.pa", SlotKind.ATTRIBUTE, b"pa", b"os"),
    ("x = os.path.jo", SlotKind.ATTRIBUTE, b"jo", b"os.path"),
    ("    self.", SlotKind.ATTRIBUTE_TARGET, b"", b"self"),
    ("    if self.", SlotKind.ATTRIBUTE, b"", b"self"),
    ("    if ok: self.", SlotKind.ATTRIBUTE_TARGET, b"", b"self"),  # a one-line body: maybe assigned
    ("    else: self.", SlotKind.ATTRIBUTE_TARGET, b"", b"self"),
    ("    self.kind: types.Pa", SlotKind.ATTRIBUTE, b"Pa", b"types"),  # an annotation reads
    ("f = lambda: types.", SlotKind.ATTRIBUTE, b"", b"types"),
    ("d = {1: types.", SlotKind.ATTRIBUTE, b"", b"types"),
    ("def f(a, b", SlotKind.PARAMETER, b"b", b""),  # a parameter's name
    ("    def f(\n        self,\n        *na", SlotKind.PARAMETER, b"na", b""),
    ("def f(a: int = 1, b", SlotKind.PARAMETER, b"b", b""),
    ("def f(a=b", SlotKind.LOAD, b"b", b""),  # a default reads, where the function is defined
    ("def f(a, x=2 *", SlotKind.LOAD, b"", b""),
    ("def f(a, *, loop: asyncio.Abs", SlotKind.ATTRIBUTE, b"Abs", b"asyncio"),  # an annotation reads
    ("def f(\n    a,\n    b: int = ", SlotKind.LOAD, b"", b""),
    ("def f(a: Dict[str, ", SlotKind.LOAD, b"", b""),  # a deeper bracket as any bracket: a subscript reads
    ("def f(a=g(", SlotKind.ARGUMENT, b"", b""),
    ("def f(a) -> Tuple[int, ", SlotKind.LOAD, b"", b""),
    ("    return rows[ro", SlotKind.LOAD, b"ro", b""),  # a subscript: no comprehension binds there
    ("x = table[k][", SlotKind.LOAD, b"", b""),
    ("x = f()[", SlotKind.LOAD, b"", b""),
    ("    return [ro", SlotKind.NAME, b"ro", b""),  # a list: maybe a comprehension's variable
    ("    if x in[ro", SlotKind.NAME, b"ro", b""),
    ("class Box[T", SlotKind.NAME, b"T", b""),  # type parameters, not a subscript
    ("x = f'{a[i", SlotKind.NAME, b"i", b""),
    ("def f(a=lambda x", SlotKind.FREE, b"x", b""),  # a lambda's parameter
    ("def f(a='x=y', b", SlotKind.PARAMETER, b"b", b""),  # a string's `=`
    ("def f(a={1: 2}, b", SlotKind.PARAMETER, b"b", b""),  # a dict's `:`
    # a parameter's name after a comment is free (not told from a read), never a read: not after
    # a comment's `:`, nor after a string that ends in an escaped backslash
    ("def f(\n    a,  # the size: in bytes\n    b", SlotKind.FREE, b"b", b""),
    ("def f(\n    a='\\\\',  # a\n    b", SlotKind.FREE, b"b", b""),
    ("for x", SlotKind.BINDING, b"x", b""),
    ("    for k, v", SlotKind.BINDING, b"v", b""),
    ("class Sh", SlotKind.BINDING, b"Sh", b""),
    ("import json as js", SlotKind.BINDING, b"js", b""),
    ("    x = [a for a", SlotKind.FREE, b"a", b""),  # in a bracket
    ("for x in ite", SlotKind.LOAD, b"ite", b""),
    ("    x = [it", SlotKind.NAME, b"it", b""),  # maybe a comprehension's variable
    ("if n", SlotKind.NAME, b"n", b""),  # maybe a walrus target
    ("    while chunk", SlotKind.NAME, b"chunk", b""),
    ("    case poi", SlotKind.FREE, b"poi", b""),  # a capture pattern
    ("type Ali", SlotKind.FREE, b"Ali", b""),
    ("del x, ", SlotKind.FREE, b"", b""),
    ("    global co", SlotKind.FREE, b"co", b""),
    ("x = f'{na", SlotKind.NAME, b"na", b""),  # an f-string's field
    ("    return helper(x) + ", SlotKind.LOAD, b"", b""),
    ("x = foo(a, ", SlotKind.ARGUMENT, b"", b""),
    ("x = foo(\n    a,\n    b", SlotKind.ARGUMENT, b"b", b""),
    ("    ret", SlotKind.STATEMENT, b"ret", b""),
    ("@dec", SlotKind.FREE, b"dec", b""),
    ("a, ", SlotKind.FREE, b"", b""),
    ("    (a, ", SlotKind.FREE, b"", b""),  # maybe targets
    ("    if x not in (EXT", SlotKind.NAME, b"EXT", b""),
    ("    return 1 + (a, ", SlotKind.NAME, b"", b""),
    ("x = 12", SlotKind.NONE, b"", b""),
    ("x = f().", SlotKind.NONE, b"", b""),
    ("from a import b", SlotKind.BINDING, b"b", b""),
    ("from a", SlotKind.FREE, b"a", b""),
    ("lambda a", SlotKind.FREE, b"a", b""),
    ("x = \"a(\" + fo", SlotKind.LOAD, b"fo", b""),
])
def test_slots(text, kind, partial, receiver):
    slot = slot_at(text.encode())
    assert (slot.kind, slot.partial) == (kind, partial)
    assert slot.receiver == receiver


def test_the_analysis_knows_modules_classes_and_self():
    doc = SHOP.replace("|", "")
    scope = analyse(doc, 9)
    assert {b"os", b"self"} <= set(scope.receivers)
    assert scope.receivers[b"os"].closed and b"getcwd" in scope.receivers[b"os"].attributes
    own = scope.receivers[b"self"]
    assert own.closed and {b"customers", b"open", b"count"} <= set(own.attributes)
    assert b"Shop" in scope.names and b"len" in scope.names


def test_the_option_is_checked():
    assert EngineOptions(identifiers="bias").validated().identifiers == "bias"
    with pytest.raises(OptionError, match="identifiers"):
        EngineOptions(identifiers="strict").validated()


@pytest.mark.parametrize("doc, first, expected, margin", [
    (SHOP, "custmers)", "customers)", 1000.0),  # an attribute that does not exist: masked
    ("def helper(x):\n    return x\n\n\ndef f(items):\n    total = |\n", "helpr(items)", "helper(items)", SURE),  # a load
    # the lines below read `characters` where nothing binds it: favoured where the line binds
    ("def other(characters):\n    return characters\n\n\ndef render(width):\n    c|\n    return characters * width\n",
     "ell_size = width", "haracters = width", 1.0),
])
async def test_the_server_answers_with_the_analysis_work_ahead_made(compiled, doc, first, expected, margin):
    """In the server's own parts (documents, engine host, work-ahead, suggester): the cursor's
    pause makes the analysis, and the request after it holds back the name that does not exist
    (or favours the one the lines below read unbound)."""
    from lsprotocol import types

    from lsp_server.server.documents import DocumentStore
    from lsp_server.server.engine_host import EngineHost
    from lsp_server.server.suggester import Suggester
    from lsp_server.server.telemetry import Telemetry
    from lsp_server.server.work_ahead import WorkAhead

    off = doc.index("|")
    text = doc[:off] + doc[off + 1 :]
    line, ch = doc[:off].count("\n"), off - doc[:off].rfind("\n") - 1
    engines = []

    def loader(options, progress):
        comp, tok = compiled
        runtime = LeaningRuntime(ScriptedRuntime(tok, (doc[:off] + first + "\n").encode()),
                                 ScriptedRuntime(tok, (doc[:off] + expected + "\n").encode()), margin)
        engines.append(CompletionEngine(options, runtime, comp))
        return engines[-1]

    host = EngineHost(lambda status: None, loader=loader)
    host.configure(EngineOptions(model="scripted", speculative=False, canonical=False, mode="single",
                                 identifiers="constrain"))
    while not host.ready:
        await asyncio.sleep(0.01)
    docs = DocumentStore()
    ahead = WorkAhead(docs, host, enabled=lambda: True, pause_s=0.01)
    suggester = Suggester(docs, host, Telemetry(), lambda message, kind: None, lambda: True, work_ahead=ahead)
    uri = "file:///shop.py"
    docs.open(uri, "python", 1, text)
    ahead.cursor(uri, 1, line, ch)
    for _ in range(12000):  # a guard against hangs, not a timing check (jedi starts cold)
        if engines[0].names.ready(uri, text, line) is not None:
            break
        await asyncio.sleep(0.01)
    assert engines[0].names.ready(uri, text, line) is not None
    got = await suggester.suggest(uri, types.Position(line, ch), None, None)
    assert got is not None and got.text == expected
    host.shutdown()


def test_at_a_statement_start_only_reading_an_unknown_name_is_held_back(compiled):
    """After `helpr` at a line start, `(` would read a name nothing defines: it loses BIAS_NATS
    (bias) or SURE_NATS (constrain: the document's names are closed; never masked, a later
    walrus may bind it), ` =` (binding it) is untouched; after `helper` (defined) nothing is."""
    from mask_store.matcher import GrammarMatcher

    from lsp_server.decoding.identifiers.guide import IdentifierGuide
    from lsp_server.decoding.identifiers.modes import IdentifierMode
    from lsp_server.decoding.identifiers.token_index import IdentifierTokens

    comp, tok = compiled
    vocab = tok.vocab
    tokens = IdentifierTokens(comp.tokens[: comp.V], vocab.by_bytes, frozenset(vocab.special))
    doc = "def helper(x):\n    return x\n\n\ndef f(items):\n    "
    scope = analyse(doc + "pass\n", 5)
    paren, equals = vocab.by_bytes[b"("], vocab.by_bytes[b" ="]
    for mode in (IdentifierMode.BIAS, IdentifierMode.CONSTRAIN):
        for written, held in ((b"helpr", {paren}), (b"helper", set())):
            before = doc.encode() + written
            guide = IdentifierGuide(mode, scope, tokens, comp, before)
            matcher = GrammarMatcher.from_prefix(comp, before)
            mask = matcher.next_token_mask()
            assert mask[paren] and mask[equals]
            shaped, kept = guide.shape(torch.zeros(comp.V), mask, matcher, b"")
            lowered = {int(i) for i in torch.nonzero(shaped < 0)} | {int(i) for i in np.flatnonzero(mask & ~kept)}
            assert {paren, equals} & lowered == held, (mode, written)
            assert (kept == mask).all()  # nothing masked: lowered
            if held:
                expected = BIAS_NATS if mode is IdentifierMode.BIAS else SURE_NATS
                assert float(shaped[paren]) == -expected and float(shaped[equals]) == 0.0


@pytest.mark.parametrize("doc, first, expected", [
    # the body of a conditional expression is read after its test: a walrus there binds what it reads
    ("import re\n\n\ndef f(s):\n    x = |\n    return x\n",
     "m.group(1) if (m := re.match('a', s)) else None\n", "m.group(1) if (m := re.match('a', s)) else None"),
    ("def f(g):\n    return |\n", "n + 1 if (n := g()) else 0\n", "n + 1 if (n := g()) else 0"),
    ("def f(g):\n    |\n", "n.close() if (n := g()) else None\n", "n.close() if (n := g()) else None"),
])
def test_a_name_a_later_walrus_binds_is_never_masked(compiled, doc, first, expected):
    r = complete(compiled, doc, first)  # (`re.` is closed: its attributes may be masked)
    assert r.figures.names_ready and r.figures.names_shaped > 0
    assert r.text == expected


SHOP_USER = SHOP.replace("|", "customers)") + "\n\ndef main():\n    shop = Shop([])\n    return shop.|\n"


def test_an_instance_of_a_closed_class_of_the_file_is_a_closed_receiver(compiled):
    r = complete(compiled, SHOP_USER, "custmers\n", "customers\n")
    assert r.figures.names_ready and r.figures.names_masked > 0
    assert r.text == "customers"
    assert complete(compiled, SHOP_USER, "custmers\n", "customers\n", identifiers="off").text == "custmers"


@pytest.mark.parametrize("doc, closed", [
    (SHOP_USER, True),
    (SHOP_USER.replace("    return shop.|", "    shop.extra = 1\n    return shop.|"), False),  # added from outside
    (SHOP_USER.replace("    return shop.|", "    setattr(shop, 'x', 1)\n    return shop.|"), False),
    (SHOP_USER.replace("    shop = Shop([])", "    shop = Shop([])\n    shop = make()"), None),  # bound otherwise
    (SHOP_USER.replace("def main():\n    shop = Shop([])", "def main(shop: Shop):"), None),  # a parameter: any subclass
    (SHOP_USER.replace("class Shop:", "class Shop(Base):"), False),  # a class that is not closed
])
def test_which_instances_are_closed_receivers(doc, closed):
    off = doc.index("|")
    scope = analyse(doc[:off] + doc[off + 1 :], doc[:off].count("\n"))
    receiver = scope.receivers.get(b"shop")
    assert (None if receiver is None else receiver.closed) is closed
    if receiver is not None:
        assert {b"customers", b"count", b"open"} <= set(receiver.attributes)


@pytest.mark.parametrize("doc, first, second, expected", [
    # the line being rewritten bound what the rest reads: the names read and defined nowhere are favoured
    ("def f(items):\n    total = 0\n    for |\n        total += item\n    return total\n",
     "x in items:\n", "item in items:\n", "item in items:"),
    ("def f(items):\n    |\n    return count\n", "n = len(items)\n", "count = len(items)\n", "count = len(items)"),
])
def test_a_name_the_file_reads_and_defines_nowhere_is_favoured_where_it_is_bound(compiled, doc, first, second, expected):
    assert 1.0 < BIAS_NATS
    for mode in ("bias", "constrain"):
        assert complete(compiled, doc, first, second, margin=1.0, identifiers=mode).text == expected
    assert complete(compiled, doc, first, second, margin=1.0, identifiers="off").text == first.rstrip("\n")


OTHER_SCOPE = ("def other(characters):\n    return characters\n\n\n"
               "def render(width):\n    c|\n    return characters * width\n")


@pytest.mark.parametrize("doc, first, second, expected", [
    # `characters` is bound in another function: not in the scope the lines below read it from
    (OTHER_SCOPE, "ell_size = width\n", "haracters = width\n", "haracters = width"),
    # a parameter the body reads (the header is being written: the body reads `value` unbound)
    ("import re\n\n\ndef count_lines(|\n    return len(re.findall('\\n', value))\n", "text):\n", "value):\n",
     "value):"),
])
def test_the_name_the_rest_of_its_scope_reads_unbound_is_favoured_where_it_is_bound(compiled, doc, first, second,
                                                                                     expected):
    """A near tie (1 nat) between a fresh name and the one the lines below read where nothing
    binds it: the guide writes the second; without it, the model's first choice stays."""
    assert 1.0 < BIAS_NATS
    for mode in ("bias", "constrain"):
        r = complete(compiled, doc, first, second, margin=1.0, identifiers=mode)
        assert r.figures.names_ready and r.text == expected
    assert complete(compiled, doc, first, second, margin=1.0, identifiers="off").text == first.rstrip("\n")


def test_a_fresh_name_still_comes_through_where_another_is_wanted(compiled):
    """The wanted name is favoured, never forced: a model surer of its own new name than the
    favour (BIAS_NATS at a statement's start, WANTED_NATS at a sure binding place) writes it."""
    surer = WANTED_NATS + 1.0
    assert BIAS_NATS <= WANTED_NATS < surer
    assert complete(compiled, OTHER_SCOPE, "ell_size = width\n", "haracters = width\n", margin=surer).text \
        == "ell_size = width"
    doc = "def f(items):\n    for |\n        print(y)\n"
    assert complete(compiled, doc, "item in items:\n", "y in items:\n", margin=surer).text == "item in items:"
    assert complete(compiled, doc, "item in items:\n", "y in items:\n", margin=WANTED_NATS - 1.0).text == "y in items:"
    doc = "def count_lines(|\n    return len(value)\n"
    assert complete(compiled, doc, "text):\n", "value):\n", margin=surer).text == "text):"


def test_the_names_a_binding_at_the_cursor_would_bind():
    from lsp_server.decoding.identifiers.unbound import unbound_at

    src = ("import os\n\n\nclass Box:\n    size = 1\n\n    def area(self):\n        pass\n"
           "        return size * width + os.sep.count(depth) + sorted(x, key=len)[0]\n\n\n"
           "def other(width):\n    return [w for w in width if w] + f'{width!r}'\n")
    # `size` is the class's (a method does not see it), `width` another function's parameter;
    # attributes, keyword names, comprehension variables, `!r` and builtins are not wanted
    assert unbound_at(src, 7) == ["size", "width", "depth", "x"]
    assert unbound_at(src.replace("        pass\n", "        x = 1\n        pass\n"), 8) == ["size", "width", "depth"]
    # the class body's line does not reach a method's reads; a module line does (called later)
    assert unbound_at(src.replace("    size = 1", "    pass"), 4) == []
    module_line = "def f():\n    return later\n\n\npass\n"
    assert unbound_at(module_line, 4) == ["later"]
    # a read before the cursor's line in the same function is not the line's to bind
    assert unbound_at("def f():\n    print(n)\n    pass\n", 2) == []
    # `global` binds at the module; an import's module path reads nothing
    assert unbound_at("def f():\n    global seen\n    seen = 1\n\n\npass\nprint(seen)\nfrom a.b import c\n", 5) == []


def _guide_tokens(compiled, replaced: dict[bytes, int] | None = None):
    """The vocabulary read as identifier pieces, with `replaced` tokens given other bytes."""
    from lsp_server.decoding.identifiers.token_index import IdentifierTokens

    comp, tok = compiled
    token_bytes, by_bytes = list(comp.tokens[: comp.V]), dict(tok.vocab.by_bytes)
    for b, t in (replaced or {}).items():
        by_bytes.pop(token_bytes[t], None)
        token_bytes[t], by_bytes[b] = b, t
    return IdentifierTokens(token_bytes, by_bytes, frozenset(tok.vocab.special))


def test_an_attribute_written_with_its_dot_in_one_token_is_held_back(compiled):
    """A vocabulary that spells `os.find` as ` os` `.find` (Qwen's byte-level BPE does; SmolLM2's
    has no such tokens, so two of its tokens are given those bytes here): after `os`, the token
    `.find` writes an attribute `os` does not have and is masked as `find` after `os.` would be;
    `.fork` goes on towards one and is kept."""
    from mask_store.matcher import GrammarMatcher

    from lsp_server.decoding.identifiers.guide import IdentifierGuide
    from lsp_server.decoding.identifiers.modes import IdentifierMode

    comp, _ = compiled
    find, fork = comp.V - 3, comp.V - 4
    tokens = _guide_tokens(compiled, {b".find": find, b".fork": fork})
    doc = "import os\n\n\ndef here():\n    return os\n"
    scope = analyse(doc, 4)
    assert scope.receivers[b"os"].closed
    before = doc[:-1].encode()
    matcher = GrammarMatcher.from_prefix(comp, before)
    mask = np.ones(comp.V, dtype=bool)
    guide = IdentifierGuide(IdentifierMode.CONSTRAIN, scope, tokens, comp, before)
    _, kept = guide.shape(torch.zeros(comp.V), mask, matcher, b"")
    assert not kept[find] and kept[fork]
    bias = IdentifierGuide(IdentifierMode.BIAS, scope, tokens, comp, before)
    shaped, kept = bias.shape(torch.zeros(comp.V), mask, matcher, b"")
    assert kept.all() and float(shaped[find]) == -BIAS_NATS and float(shaped[fork]) == 0.0


def _guide_at_end(compiled, doc: str, line: int):
    """The names guide (constrain), grammar matcher and mask at the end of `doc` less its last
    newline (the cursor on line `line`), under canonical tokenization."""
    from mask_store.matcher import GrammarMatcher

    from lsp_server.decoding.identifiers.guide import IdentifierGuide
    from lsp_server.decoding.identifiers.modes import IdentifierMode

    comp, tok = compiled
    assert comp.canonical is not None
    before = doc[:-1].encode()
    state = comp.canonical.state_after(tok.encode(doc[:-1]))
    matcher = GrammarMatcher.from_prefix(comp, before, canonical=state)
    guide = IdentifierGuide(IdentifierMode.CONSTRAIN, analyse(doc, line), _guide_tokens(compiled), comp, before)
    return guide, matcher, matcher.next_token_mask()


@pytest.mark.parametrize("doc, line, receiver, dead, live", [
    ("import sys\n\n\ndef here():\n    return sys.\n", 4, b"sys", b"f", b"flags"),
    ("class Locks:\n    ThreadLock = 1\n\n\ndef here():\n    return Locks.Thread\n", 5, b"Locks", b"L", b"Lock"),
])
def test_a_token_after_which_no_known_name_is_spelled_canonically_is_masked(compiled, doc, line, receiver, dead, live):
    """After `sys.`, `f` goes on towards `flags` and `float_info`, but canonical tokenization
    spells those `flags` and `float...`: after `f` nothing known can be written, and the mask
    would fall back to the model's own name (`sys.f` `inally`: `sys.finally_context` got
    through so). `Locks.Thread` towards `ThreadLock`: after `L`, canonical tokenization forbids
    `ock` (`L` + `ock` would have been the token `Lock`) but allows `ocker`, which starts with
    the rest yet writes `ThreadLocker`, a name the class lacks (multiprocessing's
    `util.ForkAwareThreadL` + `ocker` got through so). Such a token is masked while a
    better-scored one leads somewhere."""
    comp, tok = compiled
    assert [tok.vocab.token_bytes[i] for i in tok.encode(" Locks.ThreadLocker")][-2:] == [b"L", b"ocker"]
    guide, matcher, mask = _guide_at_end(compiled, doc, line)
    assert guide.scope.receivers[receiver].closed
    dead, live = tok.vocab.by_bytes[dead], tok.vocab.by_bytes[live]
    assert mask[dead] and mask[live]
    row = torch.zeros(comp.V)
    row[dead] = 5.0  # the model's first choice
    _, kept = guide.shape(row, mask, matcher, b"")
    assert not kept[dead] and kept[live]


def test_an_attribute_after_a_blank_is_held_back_as_an_unknown_one(compiled):
    """`Locks.` then ` Thread` or a tab: Python allows blanks (and a line's continuation) after
    the dot, no one writes them, and the name after them is the receiver's all the same: they
    leave every known name and are masked after a closed receiver (Qwen2.5-Coder wrote rich's
    `box. thematic` and packaging's `Specifier. or_ | or_ | ...`, then `box.\\` + newline +
    `border_style`)."""
    comp, tok = compiled
    guide, matcher, mask = _guide_at_end(compiled, "class Locks:\n    ThreadLock = 1\n\n\ndef here():\n    return Locks.\n", 5)
    spaced, plain = tok.vocab.by_bytes[b" Thread"], tok.vocab.by_bytes[b"Thread"]
    blank = tok.vocab.by_bytes[b"\t"]  # blanks alone: the name comes with the next token
    assert mask[spaced] and mask[plain] and mask[blank]
    for first in (spaced, blank):
        row = torch.zeros(comp.V)
        row[first] = 5.0  # the model's first choice
        _, kept = guide.shape(row, mask, matcher, b"")
        assert not kept[first] and kept[plain]


def test_a_dead_end_below_a_banned_token_is_masked(compiled):
    """The dead ends are walked from the best token the step can take: where a search pass bans
    the earlier passes' choice (`Lock`, towards `ThreadLock`), the next best (`L`, after which
    no known name is spelled canonically) is masked, not taken (rich's `box.` + `M` + `Box`
    after the search banned `Box`)."""
    comp, tok = compiled
    doc = "class Locks:\n    ThreadLock = 1\n    ThreadPool = 2\n\n\ndef here():\n    return Locks.Thread\n"
    guide, matcher, mask = _guide_at_end(compiled, doc, 6)
    big_l, lock, pool = (tok.vocab.by_bytes[b] for b in (b"L", b"Lock", b"Pool"))
    row = torch.zeros(comp.V)
    row[lock], row[big_l], row[pool] = 9.0, 5.0, 1.0  # the model's order
    _, kept = guide.shape(row, mask, matcher, b"")
    assert kept[lock] and kept[big_l] and kept[pool]  # `Lock` leads somewhere: the walk stops there
    _, kept = guide.shape(row, mask, matcher, b"", banned={lock})
    assert not kept[big_l] and not kept[lock] and kept[pool] and not (kept & ~mask).any()
    assert mask[lock] and mask[big_l] and mask[pool]  # the step's own mask is left as it was


def test_a_written_wanted_name_keeps_the_models_order_of_what_follows_it(compiled):
    """`test` is written where the line below reads it unbound: every token that ends the name
    gains the same favour, the spaced ones (` in`) as much as `,` or `(`, so the model's own
    choice of what follows stays first. (Canonical tokenization on: ` in` was read as going on
    to `testin`, and `test,` won by the favour; `for item in tests:` came out.)"""
    from mask_store.matcher import GrammarMatcher

    from lsp_server.decoding.identifiers.guide import IdentifierGuide
    from lsp_server.decoding.identifiers.modes import IdentifierMode

    comp, tok = compiled
    assert comp.canonical is not None
    doc = "def f(tests):\n    for test\n        run(test)\n"
    scope = analyse(doc, 1)
    assert b"test" in scope.wanted
    before = doc[: doc.index("\n        run")]
    state = comp.canonical.state_after(tok.encode(before))
    matcher = GrammarMatcher.from_prefix(comp, before.encode(), canonical=state)
    mask = matcher.next_token_mask()
    spaced_in, comma = tok.vocab.by_bytes[b" in"], tok.vocab.by_bytes[b","]
    assert mask[spaced_in] and mask[comma]
    row = torch.zeros(comp.V)
    row[spaced_in], row[comma] = 2.0, 1.0  # the model: `for test in`
    for mode in (IdentifierMode.BIAS, IdentifierMode.CONSTRAIN):
        guide = IdentifierGuide(mode, scope, _guide_tokens(compiled), comp, before.encode())
        shaped, kept = guide.shape(row.clone(), mask, matcher, b"")
        assert kept[spaced_in] and float(shaped[spaced_in]) - float(shaped[comma]) == 1.0


LATER = "def a():\n    width = 1\n    return width\n\n\ndef b(items):\n    |\n"


@pytest.mark.parametrize("identifiers", ["bias", "constrain"])
def test_a_later_line_that_reads_a_name_bound_nowhere_is_cut(compiled, identifiers):
    """The guide knows `width` (a local of another function: the name set holds every scope's);
    the completion's second line reads it where nothing binds it: the answer ends before it."""
    off = doc_complete(compiled, LATER, "n = len(items)\n    return n + width\n", identifiers="off")
    assert off.text.startswith("n = len(items)\n    return n + width")
    r = doc_complete(compiled, LATER, "n = len(items)\n    return n + width\n", identifiers=identifiers)
    assert r.text.rstrip() == "n = len(items)"
    # a name the completion binds itself (`for`), and one of the enclosing scopes, are read freely
    ok = "for item in items:\n        print(item, width)\n"
    assert doc_complete(compiled, LATER.replace("def b(items):", "width = 2\n\n\ndef b(items):"), ok,
                        identifiers=identifiers).text.rstrip() == ok.rstrip()


def doc_complete(compiled, doc: str, first: str, identifiers: str):
    """`complete` in multi-line mode."""
    off = doc.index("|")
    text = doc[:off] + doc[off + 1 :]
    before = text[:off]
    engine = engine_for(compiled, before, first, identifiers=identifiers, mode="multi")
    request = CompletionRequest.at(text, before.count("\n"), len(before) - before.rfind("\n") - 1, document="file:///t.py")
    engine.names_ahead(request, wait=120)
    return engine.complete(request)


def test_a_step_both_favoured_and_held_back_is_counted_once(compiled):
    """At a statement's start after `cou` (not a known name; `count` is read below and bound
    nowhere): the tokens towards `count` are favoured and `(` (reading `cou`) is lowered, in one
    step: `stats["shaped"]` counts the step once."""
    from mask_store.matcher import GrammarMatcher

    from lsp_server.decoding.identifiers.guide import IdentifierGuide
    from lsp_server.decoding.identifiers.modes import IdentifierMode

    comp, tok = compiled
    doc = "def f(items):\n    pass\n    return count\n"
    scope = analyse(doc, 1)
    assert b"count" in scope.wanted
    before = b"def f(items):\n    cou"
    matcher = GrammarMatcher.from_prefix(comp, before)
    mask = matcher.next_token_mask()
    nt, paren = tok.vocab.by_bytes[b"nt"], tok.vocab.by_bytes[b"("]
    guide = IdentifierGuide(IdentifierMode.CONSTRAIN, scope, _guide_tokens(compiled), comp, before)
    shaped, _ = guide.shape(torch.zeros(comp.V), mask, matcher, b"")
    assert float(shaped[nt]) == BIAS_NATS and float(shaped[paren]) == -SURE_NATS
    assert guide.stats["shaped"] == 1 and guide.stats["lowered"] == 1


def _shaped_after_receiver(compiled, before: str, receiver: bytes, leaving: bytes, toward: bytes):
    """The names guide (constrain) at the end of `before`, just after `receiver.`: the receiver
    as analysed, the guide's tallies, and what became of the token `leaving` (no attribute starts
    so): None where masked, else its logit's change; the token `toward` (an attribute starts so)
    is kept untouched."""
    from mask_store.matcher import GrammarMatcher

    from lsp_server.decoding.identifiers.guide import IdentifierGuide
    from lsp_server.decoding.identifiers.modes import IdentifierMode

    comp, tok = compiled
    scope = analyse(before + "\n", before.count("\n"))
    found = scope.receivers[receiver]
    assert not any(a.startswith(leaving) for a in found.attributes)
    matcher = GrammarMatcher.from_prefix(comp, before.encode())
    mask = matcher.next_token_mask()
    out, keep = tok.vocab.by_bytes[leaving], tok.vocab.by_bytes[toward]
    assert mask[out] and mask[keep]
    guide = IdentifierGuide(IdentifierMode.CONSTRAIN, scope, _guide_tokens(compiled), comp, before.encode())
    shaped, kept = guide.shape(torch.zeros(comp.V), mask, matcher, b"")
    assert kept[keep] and float(shaped[keep]) == 0.0
    return found, guide.stats, float(shaped[out]) if kept[out] else None


def test_after_a_closed_receiver_at_a_statements_start_what_leaves_its_attributes_is_lowered(compiled):
    """`json.` read in an expression: a token no attribute of json starts with is masked; at a
    statement's start (where `json.extra = 1` would add one) it loses SURE_NATS, not the mask;
    after `self.` there nothing is held back (constrain)."""
    for line, masked in (("    y = json.", True), ("    json.", False)):
        # no attribute of json starts with x; dumps with d
        found, stats, x = _shaped_after_receiver(compiled, f"import json\n\n\ndef f():\n{line}", b"json", b"x", b"d")
        assert found.closed
        if masked:
            assert x is None and stats["masked"] == 1
        else:
            assert x == -SURE_NATS and stats["lowered"] == 1


@pytest.mark.parametrize("decorator, closed, decorated", [
    ("", True, False),
    ("@dataclass\n", True, False),
    ("@register\n", False, True),  # may add attributes (rich's `@rich_repr class Style`): lowered, not masked
])
def test_a_class_closed_but_for_a_decorator_has_what_leaves_its_attributes_lowered(compiled, decorator, closed,
                                                                                    decorated):
    """`Shape.` read in an expression: after a closed class a token no attribute starts with is
    masked; after one whose only open door is a decorator other than `dataclass` it loses
    SURE_NATS, not the mask."""
    before = (f"from dataclasses import dataclass\n\n\ndef register(cls):\n    return cls\n\n\n{decorator}"
              "class Shape:\n    area = 0\n\n\ndef f():\n    y = Shape.")
    found, stats, x = _shaped_after_receiver(compiled, before, b"Shape", b"x", b"a")  # area with a
    assert (found.closed, found.decorated) == (closed, decorated)
    if closed:
        assert x is None and stats["masked"] == 1
    else:
        assert x == -SURE_NATS and stats["lowered"] == 1


def test_the_first_later_line_that_reads_a_name_bound_nowhere():
    from lsp_server.decoding.identifiers.later_lines import first_unbound_line, line_start

    before = "def a():\n    width = 1\n\n\ndef b(items):\n    "
    assert first_unbound_line(before, "n = len(items)\n    m = n\n    return n + width\n", "") == 2
    assert first_unbound_line(before, "return width", "") is None  # the first line is the guide's
    assert first_unbound_line(before, "for w in items:\n        print(w)\n", "") is None  # bound by itself
    # a name the lines after the completion read (a binding it replaced) is not the completion's
    assert first_unbound_line(before, "n = 1\n    ", "return n + count\n") is None
    assert first_unbound_line(before, "n = (\n", "") is None  # does not compile: the compile check's business
    assert line_start(b"n = 1\n    m = n\n    return m", 2) == len(b"n = 1\n    m = n")


def test_a_wanted_name_at_a_statement_start_is_bound_not_read(compiled):
    """`count` is bound in another function only, and the lines below read it unbound: at a
    statement's start after `count`, `(`/`.` (reading it where nothing binds it) lose SURE_NATS
    against ` =` (binding it) (constrain); nothing is masked."""
    from mask_store.matcher import GrammarMatcher

    from lsp_server.decoding.identifiers.guide import IdentifierGuide
    from lsp_server.decoding.identifiers.modes import IdentifierMode

    comp, tok = compiled
    doc = "def g(count):\n    return count\n\n\ndef f(items):\n    pass\n    return count\n"
    scope = analyse(doc, 5)
    assert b"count" in scope.wanted and b"count" in scope.names
    before = b"def g(count):\n    return count\n\n\ndef f(items):\n    count"
    matcher = GrammarMatcher.from_prefix(comp, before)
    mask = matcher.next_token_mask()
    paren, dot, eq = tok.vocab.by_bytes[b"("], tok.vocab.by_bytes[b"."], tok.vocab.by_bytes[b" ="]
    guide = IdentifierGuide(IdentifierMode.CONSTRAIN, scope, _guide_tokens(compiled), comp, before)
    shaped, kept = guide.shape(torch.zeros(comp.V), mask, matcher, b"")
    # (every token that ends the wanted name is favoured first: the reads then lose SURE_NATS)
    assert float(shaped[eq] - shaped[paren]) == SURE_NATS and float(shaped[eq] - shaped[dot]) == SURE_NATS
    assert float(shaped[eq]) >= 0.0 and kept[eq] and kept[paren]
