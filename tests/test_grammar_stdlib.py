"""The grammar parses the whole standard library of the running CPython."""

from __future__ import annotations

import pytest

from conftest import STDLIB, _is_test_file, read_source, stdlib_files

from grammar_tools.parsing.check import check_source
from grammar_tools.parsing.incremental import PrefixParser


@pytest.mark.slow
def test_parses_the_standard_library(recognizer, lexer):
    parser = PrefixParser(recognizer, lexer)
    results = {}
    for path in stdlib_files(include_tests=True):
        data = read_source(path)
        if data is None:
            continue  # CPython itself rejects it (deliberately broken test data)
        results[path] = check_source(data, PrefixParser(recognizer, lexer))
    failures = {p: r for p, r in results.items() if not r.ok}
    report = "\n".join(f"{p.relative_to(STDLIB)}: {r}" for p, r in sorted(failures.items()))
    non_test = [p for p in results if not _is_test_file(p)]
    non_test_failures = [p for p in failures if not _is_test_file(p)]
    assert len(non_test) >= 700
    assert not non_test_failures, report
    share = 1 - len(failures) / len(results)
    assert share >= 0.995, f"{len(failures)} of {len(results)} files fail:\n{report}"
    del parser
