"""Where a mask store's rows are: per terminal, full vs streamlined (prints JSON).

    .venv/bin/python bench/store_rows.py FULL_STORE STREAMLINED_STORE [--model default]

The row count is the seed's: each NFA state q = (X, d) counts the rows of its own group and of
its boundary group (`mask-store info`'s logical rows). Per terminal X: NFA states, rows in both
stores, the states at the floor of one row (a state whose only row is `()`, the tokens that
stay inside its lexeme: no analysis can merge a state's only row) and the rows above that floor
in the states inside the lexeme; the same for the f-/t-string terminals together, and the
reduction without them or with all their inside states at the floor.

`per_terminal_classes`: the same counts with the NFA states of each terminal X merged by class
of the lexer seen from X (`mask_store.nfa_states`, what the builder does since store format 5;
on stores built with `--no-merge-states` this shows what the merge gives): `identical_rows`
checks that the groups, the boundary groups and the dead sets of every state are its class's
first state's, on both stores (on merged stores every class has one state).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grammar_tools.lexing.lexer_automaton import load_lexer_automaton  # noqa: E402
from mask_store.loading import open_store  # noqa: E402
from mask_store.nfa_states import terminal_classes  # noqa: E402
from mask_store.vocabulary import load_tokenizer  # noqa: E402

FIELD_STRINGS = ("FSTRING", "LONG_FSTRING", "TSTRING", "LONG_TSTRING")


def _rows(store):
    def group(gid: int):
        lo, hi = int(store.group_start[gid]), int(store.group_start[gid + 1])
        return tuple(sorted((store.row_seq(r), int(store.row_mask[r])) for r in range(lo, hi)))

    def content(q: int):
        b = int(store.q_boundary[q])
        return group(int(store.q_group[q])), group(b) if b >= 0 else None, int(store.d_dead[int(store.q_state[q])])

    def count(q: int) -> int:
        gid, b = int(store.q_group[q]), int(store.q_boundary[q])
        n = int(store.group_start[gid + 1] - store.group_start[gid])
        return n + (int(store.group_start[b + 1] - store.group_start[b]) if b >= 0 else 0)

    return count, content


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("full", type=Path)
    ap.add_argument("streamlined", type=Path)
    ap.add_argument("--model", default="default")
    args = ap.parse_args()
    tok = load_tokenizer(args.model)
    lexer = load_lexer_automaton()
    g = lexer.grammar
    stores = {"full": open_store(args.full, tok), "streamlined": open_store(args.streamlined, tok)}
    full = stores["full"]
    by_term: dict[int, list[int]] = defaultdict(list)
    for q in range(full.n_states):
        by_term[int(full.q_term[q])].append(q)
    for s in stores.values():
        if [(int(x), int(d)) for x, d in zip(s.q_term, s.q_state)] != [(int(x), int(d)) for x, d in
                                                                      zip(full.q_term, full.q_state)]:
            raise SystemExit("the two stores have different NFA states: not of one build")
    counters = {k: _rows(s) for k, s in stores.items()}
    per_term = {}
    classes_out = {k: 0 for k in stores}
    mismatches = {k: 0 for k in stores}
    n_classes = 0
    for x, qs in sorted(by_term.items()):
        cls = terminal_classes(lexer, x)
        entry = {"states": len(qs)}
        first: dict[int, int] = {}
        for q in qs:
            first.setdefault(cls[int(full.q_state[q])], q)
        n_classes += len(first)
        entry["classes"] = len(first)
        for k, (count, content) in counters.items():
            entry[k] = sum(count(q) for q in qs)
            classes_out[k] += sum(count(q) for q in first.values())
            mismatches[k] += sum(content(q) != content(first[cls[int(full.q_state[q])]]) for q in qs)
        entry["streamlined_one_row_states"] = sum(counters["streamlined"][0](q) == 1 for q in qs)
        # rows above that floor in the states inside the lexeme (X not accepted yet there)
        entry["streamlined_inside_above_one_row"] = sum(
            counters["streamlined"][0](q) - 1 for q in qs if not lexer.accepting[int(full.q_state[q])] >> x & 1)
        per_term[g.terminals[x]] = entry
    total = {k: sum(e[k] for e in per_term.values()) for k in stores}
    fs = {k: sum(per_term[n][k] for n in FIELD_STRINGS if n in per_term) for k in ("states", "full", "streamlined")}
    for key in ("streamlined_one_row_states", "streamlined_inside_above_one_row"):
        fs[key] = sum(per_term[n][key] for n in FIELD_STRINGS if n in per_term)
    out = {
        "benchmark": "store_rows",
        "nfa_states": full.n_states,
        "rows": total,
        "reduction": round(total["full"] / total["streamlined"], 3),
        "field_strings": fs,
        "reduction_without_field_strings": round(
            (total["full"] - fs["full"]) / (total["streamlined"] - fs["streamlined"]), 3),
        # if every state inside a field string were at the floor of one row
        "reduction_field_strings_inside_at_one_row": round(
            total["full"] / (total["streamlined"] - fs["streamlined_inside_above_one_row"]), 3),
        "per_terminal_classes": {
            "nfa_states": n_classes,
            "rows": classes_out,
            "reduction": round(classes_out["full"] / classes_out["streamlined"], 3),
            "identical_rows": {k: v == 0 for k, v in mismatches.items()},
        },
        "per_terminal": dict(sorted(per_term.items(), key=lambda kv: -kv[1]["streamlined"])),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
