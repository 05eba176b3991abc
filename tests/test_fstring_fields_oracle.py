"""Run by another CPython (tests/test_fstring_fields.py): its verdicts on the field cases.
Must stay importable by Python 3.8 (no test functions here)."""

from fstring_field_cases import FIELD_CASES

CONTEXTS = ("module", "def", "async")


def wrap(case, where):
    if where == "module":
        return "x = " + case + "\n"
    head = "async def f():" if where == "async" else "def f():"
    return head + "\n    x = " + case.replace("\n", "\n    ") + "\n"


def verdicts():
    out = {}
    for case in FIELD_CASES:
        for where in CONTEXTS:
            try:
                compile(wrap(case, where), "case", "exec")
                out[where + "|" + case] = True
            except SyntaxError:
                out[where + "|" + case] = False
    return out
