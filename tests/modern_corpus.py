"""A corpus of modern Python (3.8-3.14 syntax), generated, each section checked by an oracle.

    python tests/modern_corpus.py OUT_DIR [--tokens 24000] [--seed 0] [--beyond]

Sections are filled from templates with random names and values: the walrus and positional-only
parameters (3.8), PEP 614 decorators and parenthesized with-items (3.9), every kind of match
pattern (3.10), `except*` and PEP 646 stars (3.11), PEP 695 type parameters and aliases (3.12),
PEP 696 defaults (3.13), PEP 758 `except A, B:` and PEP 750 template strings (3.14), f-strings
(nested specs, conversions, `=`), PEP 701 f-strings (the same quote inside a field, backslashes,
comments and line breaks there, nested f-strings, set and dict displays) and the soft keywords
used as names. With `--beyond`, also what the lexer does not accept (`BEYOND`): f-strings nested
three deep, past the f-string automaton's bounds (string_automata.FIELD_LIMITS).

Each section is checked before it is used: with CPython's own `compile` when it is 3.11 syntax,
else with libcst's parser for 3.14 (it must also be refused by CPython 3.11, so that the section
does exercise newer syntax). A section an oracle refuses is a bug here: it raises.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable
from pathlib import Path

from grammar_tools.parsing.cpython_check import compiles

WORDS = ("alpha", "beta", "gamma", "delta", "item", "value", "count", "total", "node", "left", "right",
         "point", "user", "name", "data", "result", "key", "entry", "buffer", "size", "limit", "path")
TYPES = ("int", "str", "float", "bytes", "bool", "list[int]", "dict[str, int]", "tuple[int, ...]", "None")


class _Gen:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.n = 0

    def name(self) -> str:
        self.n += 1
        return f"{self.rng.choice(WORDS)}_{self.n}"

    def word(self) -> str:
        return self.rng.choice(WORDS)

    def type(self) -> str:
        return self.rng.choice(TYPES)

    def num(self) -> int:
        return self.rng.randint(0, 999)


def walrus_posonly(g: _Gen) -> str:
    f, a, b, c = g.name(), g.word(), g.word() + "2", g.word() + "3"
    return (f"def {f}({a}, /, {b}: {g.type()} = {g.num()}, *, {c}=None):\n"
            f"    if (n := len(str({a}))) > {g.num()}:\n"
            f"        return [y for x in range(n) if (y := x * {g.num()}) % 3]\n"
            f"    while (chunk := {a}[:{g.num()}]):\n"
            f"        {a} = {a}[len(chunk):]\n"
            f"    return f\"{{{a}=}} {{{b}!r:>{{{g.num() % 20}}}}}\"\n\n\n")


def decorators_with(g: _Gen) -> str:
    f, a, b = g.name(), g.word(), g.word() + "_b"
    return (f"@handlers[{g.num() % 4}].register\n"
            f"@(lambda fn: fn)\n"
            f"@registry.get('{g.word()}', default).wrap(level={g.num()})\n"
            f"def {f}({a}, {b}):\n"
            f"    with (\n"
            f"        open({a}) as src,\n"
            f"        open({b}, 'w') as dst,\n"
            f"    ):\n"
            f"        dst.write(src.read())\n"
            f"    with (open({a}) as one, open({b}) as two):\n"
            f"        return one.read() + two.read()\n\n\n")


def match_patterns(g: _Gen) -> str:
    f, s = g.name(), g.word()
    n = g.num()
    return (f"def {f}({s}, other):\n"
            f"    match {s}:\n"
            f"        case 0 | 1 | -{n}:\n"
            f"            return 'small'\n"
            f"        case {n}.5 | -1.5j | 3 + 4j:\n"
            f"            return 'numbers'\n"
            f"        case 'text' | b'bytes' | None | True | False:\n"
            f"            return 'constants'\n"
            f"        case Color.RED | Color.GREEN:\n"
            f"            return 'colour'\n"
            f"        case [first, *rest] if len(rest) > {n % 7}:\n"
            f"            return first\n"
            f"        case (x, y, _):\n"
            f"            return x + y\n"
            f"        case {{'kind': 'point', 'x': int(px), **extra}}:\n"
            f"            return px, extra\n"
            f"        case Point(x=0, y=py) | Point(py, 0):\n"
            f"            return py\n"
            f"        case [Point(x=a), Point(x=b)] as pair:\n"
            f"            return pair, a, b\n"
            f"        case str() as text if text:\n"
            f"            return text\n"
            f"        case _:\n"
            f"            pass\n"
            f"    match {s}, other:\n"
            f"        case [int(), int()]:\n"
            f"            return 'ints'\n"
            f"        case _:\n"
            f"            return None\n\n\n")


def soft_keywords_as_names(g: _Gen) -> str:
    v = g.name()
    return (f"match = re.match(r'\\w+', '{g.word()}')\n"
            f"case = [match, {g.num()}]\n"
            f"type = type(case)\n"
            f"{v} = match(case) if callable(match) else case[0]\n"
            f"print(match.group(0), type.__name__, _ := {g.num()})\n\n\n")


def except_star_pep646(g: _Gen) -> str:
    f, a = g.name(), g.word()
    return (f"def {f}(*args: *Ts) -> tuple[*Ts]:\n"
            f"    try:\n"
            f"        {a} = args[*indices]\n"
            f"    except* ValueError as group:\n"
            f"        raise RuntimeError({g.num()}) from group\n"
            f"    except* (TypeError, KeyError):\n"
            f"        pass\n"
            f"    return args\n\n\n"
            f"array: Array[*Shape, int] = make_{a}()\n\n\n")


def pep695(g: _Gen) -> str:
    f, c, t = g.name(), g.name().title().replace("_", ""), g.name().title().replace("_", "")
    return (f"type {t} = dict[str, list[{g.type()}]]\n"
            f"type Pair[T] = tuple[T, T]\n"
            f"type Handler[**P, R] = Callable[P, R]\n\n\n"
            f"def {f}[T: (int, str), *Ts, **P](first: T, *rest: *Ts) -> T:\n"
            f"    return first\n\n\n"
            f"class {c}[K: Hashable, V](Mapping[K, V]):\n"
            f"    def get[D](self, key: K, default: D = None) -> V | D:\n"
            f"        return default\n\n"
            f"    type Inner = list[V]\n\n\n"
            f"print(type({f}), type)\n\n\n")


def pep696(g: _Gen) -> str:
    c = g.name().title().replace("_", "")
    return (f"class {c}[T = int, *Ts = *tuple[str, ...], **P = [int, str]]:\n"
            f"    value: T\n\n\n"
            f"def {g.name()}[T: float = float, U = list[T]](x: T) -> U:\n"
            f"    return [x] * {g.num()}\n\n\n"
            f"type Mapping{g.num()}[K, V = {g.type()}] = dict[K, V]\n\n\n")


def pep758(g: _Gen) -> str:
    f = g.name()
    return (f"def {f}(job):\n"
            f"    try:\n"
            f"        return job()\n"
            f"    except ValueError, TypeError:\n"
            f"        return {g.num()}\n"
            f"    except (KeyError, IndexError) as e:\n"
            f"        return e\n"
            f"    try:\n"
            f"        job()\n"
            f"    except* OSError, RuntimeError:\n"
            f"        pass\n\n\n")


def template_strings(g: _Gen) -> str:
    n, w = g.word(), g.num() % 30
    return (f"{g.name()} = t\"hello {{{n}}} and {{{n}!r:>{w}}}\"\n"
            f"{g.name()} = rt'\\d+ {{{n}.count}}'\n"
            f"{g.name()} = t'{{{n}=}}'\n"
            f"{g.name()} = T\"\"\"\n    {{{n}:{{width}}.{{precision}}}}\n    {{[x for x in {n}]}}\n\"\"\"\n"
            f"render(t'{{{n}!s}}', Rt\"{{{g.num()}:{{spec}}}}\")\n\n\n")


def fstrings_311(g: _Gen) -> str:
    a, b = g.word(), g.word()
    return (f"{g.name()} = f\"{{{a}!r}} {{{b}:>{{width}}.{{prec}}f}} {{{a}=}} {{{a} + {b} = !s:^20}}\"\n"
            f"{g.name()} = f'{{\"quoted\"}} {{{a}[\"key\"]}} {{{{braces}}}}'\n"
            f"{g.name()} = rf\"\\w{{{a}}}\" F'''\n    {{{b}!a}}\n    {{{a}:{{'<' if {b} else '>'}}{{{g.num()}}}}}\n'''\n"
            f"{g.name()} = f\"{{(lambda x: x)({g.num()})}}\"\n\n\n")


def fstrings_pep701(g: _Gen) -> str:
    a = g.word()
    return (f"{g.name()} = f\"{{{a}[\"key\"]}} {{\", \".join(parts)}}\"\n"
            f"{g.name()} = f\"{{\"\\n\".join(lines)}}\"\n"
            f"{g.name()} = f\"{{\n    {a}  # the {a}\n    + {g.num()}\n}}\"\n"
            f"{g.name()} = f\"{{f\"{{{a}!r:>{g.num() % 9}}}\"}}\"\n"
            f"{g.name()} = f'{{{a}:{{\"<\"}}{{{g.num() % 9}}}}}'\n"
            f"{g.name()} = f\"{{ {{1, 2}} }} {{ {{'k': {a}}}['k'] }}\"  # set and dict displays (3.8 on)\n\n\n")


def fstrings_nested_deep(g: _Gen) -> str:
    """Three levels of nested f-strings: valid 3.12, past the lexer's bound (two levels:
    string_automata.FIELD_LIMITS)."""
    return f"{g.name()} = f\"{{f\"{{f\"{{{g.word()}}}\"}}\"}}\"\n\n\n"


SECTIONS: dict[str, tuple[Callable[[_Gen], str], tuple[int, int]]] = {  # generator, the version it needs
    "walrus, positional-only, f-string =": (walrus_posonly, (3, 8)),
    "PEP 614 decorators, parenthesized with": (decorators_with, (3, 9)),
    "match statement": (match_patterns, (3, 10)),
    "soft keywords as names": (soft_keywords_as_names, (3, 8)),
    "except*, PEP 646": (except_star_pep646, (3, 11)),
    "f-strings (3.11 rules)": (fstrings_311, (3, 8)),
    "PEP 695": (pep695, (3, 12)),
    "PEP 696": (pep696, (3, 13)),
    "PEP 758": (pep758, (3, 14)),
    "PEP 750 template strings": (template_strings, (3, 14)),
    "PEP 701 f-strings, displays in fields": (fstrings_pep701, (3, 12)),
}
# what the lexer does not accept (`string_automata.FIELD_LIMITS`, its bounds): `--beyond` adds them
BEYOND = {"PEP 701 f-strings nested three deep": (fstrings_nested_deep, (3, 12))}


def libcst_accepts(src: str) -> bool:
    import libcst

    try:
        libcst.parse_module(src, config=libcst.PartialParserConfig(python_version="3.14"))
        return True
    except (libcst.ParserSyntaxError, Exception):  # libcst raises its own errors for some inputs
        return False


def checked(name: str, src: str, since: tuple[int, int]) -> str:
    """`src` if its oracle accepts it (and CPython 3.11 refuses 3.12+ syntax), else ValueError."""
    if since <= (3, 11):
        ok = compiles(src)
    else:
        ok = libcst_accepts(src) and not compiles(src)
    if not ok:
        raise ValueError(f"the corpus template {name!r} made invalid Python:\n{src}")
    return src


def generate(tokens: int, encode, seed: int = 0, beyond: bool = False, per_file: int = 12) -> dict[str, str]:
    """{file name: text} of at least `tokens` tokens (`encode(text) -> ids`), every section at
    least once per file, in random order."""
    rng = random.Random(seed)
    g = _Gen(rng)
    sections = dict(SECTIONS, **(BEYOND if beyond else {}))
    files: dict[str, str] = {}
    total = 0
    while total < tokens:
        names = list(sections) + [rng.choice(list(sections)) for _ in range(max(0, per_file - len(sections)))]
        rng.shuffle(names)
        parts = ["import re\nfrom collections.abc import Callable, Hashable, Mapping\n\n\n"]
        for name in names:
            make, since = sections[name]
            parts.append(checked(name, make(g), since))
        text = "".join(parts)
        files[f"modern_{len(files):03d}.py"] = text
        total += len(encode(text))
    return files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--tokens", type=int, default=24_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--beyond", action="store_true", help="also what the lexer does not accept (BEYOND)")
    args = ap.parse_args()
    from mask_store.vocabulary import load_tokenizer

    tok = load_tokenizer("default")
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in generate(args.tokens, tok.encode, args.seed, args.beyond).items():
        (args.out / name).write_text(text)
    print(f"wrote {len(list(args.out.glob('modern_*.py')))} files to {args.out}")


if __name__ == "__main__":
    main()
