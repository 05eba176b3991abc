"""The `syntaxlock` command line: check a file against the grammar (more commands follow)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise SystemExit(f"syntaxlock: cannot read {path}: {e.strerror}") from None


def cmd_check(args) -> int:
    from grammar_tools.check import check_source

    status = 0
    for name in args.files:
        raw = _read(name)
        try:
            data = raw.decode("utf-8").encode()
        except UnicodeDecodeError as e:
            print(f"{name}: not UTF-8 (byte {e.start})")
            status = 1
            continue
        result = check_source(data)
        print(f"{name}: {result}")
        status |= 0 if result.ok else 1
    return status


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="syntaxlock", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check", help="check that files parse with syntaxlock's Python grammar")
    p.add_argument("files", nargs="+")
    p.set_defaults(func=cmd_check)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
