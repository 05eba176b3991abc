"""f-/t-string replacement fields that CPython accepts or refuses, by version (the oracle is
CPython's own `compile`: tests/test_fstring_fields.py)."""

# each case is an expression; it is compiled as `x = CASE` at module level, in a function and
# in an async function
FIELD_CASES = [
    r'''f"{a}"''',
    r'''f"{a[}"''',
    r'''f"{a +}"''',
    r'''f"{a b}"''',
    r'''f"{}"''',
    r'''f"{ }"''',
    r'''f"{a!x}"''',
    r'''f"{a!}"''',
    r'''f"{a!ra}"''',
    r'''f"{a!r}"''',
    r'''f"{a!r }"''',
    r'''f"{a = }"''',
    r'''f"{a=!r:>{w}}"''',
    r'''f"{a==b}"''',
    r'''f"{a!=b}"''',
    r'''f"{a<=b}"''',
    r'''f"{a+=1}"''',
    r'''f"{a:=10}"''',
    r'''f"{(a:=10)}"''',
    r'''f"{lambda a: 1}"''',
    r'''f"{(lambda a: 1)(2)}"''',
    r'''f"{a if b else c}"''',
    r'''f"{a if b}"''',
    r'''f"{*a}"''',
    r'''f"{*a, b}"''',
    r'''f"{a, b}"''',
    r'''f"{a for a in b}"''',
    r'''f"{[a for a in b]}"''',
    r'''f"{a[1:2]}"''',
    r'''f"{a[1:2:]}"''',
    r'''f"{a(b=1)}"''',
    r'''f"{a(b=)}"''',
    r'''f"{a(]}"''',
    r'''f"{a)}"''',
    r'''f"{a:{b}}"''',
    r'''f"{a:{b:{c}}}"''',
    r'''f"{a:{b:>3}}"''',
    r'''f"{a:{b:}}"''',
    r'''f"{a:{b:0}.{c:1}}"''',
    r'''f"{a:{b!r}}"''',
    r'''f"{a:>{w}.{p}f}"''',
    r'''f"{a:{}}"''',
    r'''f"{a:{b +}}"''',
    r'''f"{'a' 'b'}"''',
    r'''f"{'#'}"''',
    r'''f"{yield}"''',
    r'''f"{(yield)}"''',
    r'''f"{yield a}"''',
    r'''f"{await a}"''',
    r'''f"{not a}"''',
    r'''f"{not}"''',
    r'''f"{a.}"''',
    r'''f"{a.b}"''',
    r'''f"{1 if}"''',
    r'''f"{import}"''',
    r'''f"{a; b}"''',
    r'''f"{{a}}"''',
    r'''f"{{{a}}}"''',
    r'''f"{a}}"''',
    r'''rf"\{a}"''',
    r'''f"\{a}"''',
    r'''f"{'x'!r:^10}"''',
    r'''f"{f'{a}'}"''',
    r'''f"{f'{a +}'}"''',
    r'''f"{f'{a[}'}"''',
    r'''f"{ {1: 2}[1] }"''',
    r'''f"{ {a} }"''',
    r'''f"{x:=}"''',
    r'''f"""{
a
}"""''',
    r'''f"""{
a +
}"""''',
    r'''f"""{a:{
b}}"""''',
    r'''F"{a}" f'{b!s}' rf'{c!a}' fR"{d}"''',
    r'''f"{a}" "b" f"{c +}"''',
    r'''f"{a:%H:%M}"''',
    r'''f"{a!r:}"''',
    r'''f"{a=:}"''',
    r'''f"{match}"''',
    r'''f"{type}"''',
    r'''f"{a.match}"''',
]

CONTEXTS = ("module", "def", "async")


def wrap(case, where):
    if where == "module":
        return "x = " + case + "\n"
    head = "async def f():" if where == "async" else "def f():"
    return head + "\n    x = " + case.replace("\n", "\n    ") + "\n"
