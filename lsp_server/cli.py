"""The `syntaxlock` command line: `complete`, `serve`, `stats` and `check`."""

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
    from grammar_tools.parsing.check import check_source

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


def _setup_logging(level: str, log_file: str | None) -> None:
    """Logs go to stderr or a file, never to stdout (stdout may be the LSP channel)."""
    import logging

    handler = logging.FileHandler(log_file, encoding="utf-8") if log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    lvl = getattr(logging, level.upper())
    root.setLevel(lvl)
    # pygls logs every message it sends at INFO: only show that when debugging
    logging.getLogger("pygls").setLevel(lvl if lvl <= logging.DEBUG else max(lvl, logging.WARNING))


def cmd_serve(args) -> int:
    import os

    _setup_logging(args.log_level, args.log_file)
    from lsp_server.server.server import create_server

    server = create_server()
    if args.team:  # the default of the `teamServer` setting (an editor's own setting overrides it)
        server.options = server.options.merged({"teamServer": args.team})[0]
    if args.tcp:
        host, _, port = args.tcp.rpartition(":")
        return server.start_tcp(host or "127.0.0.1", int(port))
    # stdout is the protocol channel: give the protocol its own copy of the descriptor and
    # send anything else that writes to stdout (print, C libraries) to stderr
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    return server.start_io(sys.stdin.buffer, channel)


def cmd_stats(args) -> int:
    import json

    from lsp_server.server.telemetry import read_totals, telemetry_path

    print(json.dumps({"file": str(telemetry_path()), **read_totals()}, indent=1))
    return 0


def _host_port(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, not {value!r}")
    return value


def _team_url(value: str) -> str:
    from .options import team_url_problem

    problem = team_url_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(f"--team {problem}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from .cli_complete import add_complete_parser

    ap = argparse.ArgumentParser(prog="syntaxlock", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check", help="check that files parse with syntaxlock's Python grammar")
    p.add_argument("files", nargs="+")
    p.set_defaults(func=cmd_check)
    add_complete_parser(sub)
    p = sub.add_parser("serve", help="run the language server (stdio unless --tcp)")
    transport = p.add_mutually_exclusive_group()
    transport.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout (the default)")
    transport.add_argument("--tcp", metavar="HOST:PORT", type=_host_port, help="listen on a TCP port instead")
    p.add_argument("--log-file", help="write the log here instead of stderr")
    p.add_argument("--log-level", default="INFO", type=str.upper,
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="default INFO")
    p.add_argument("--team", metavar="URL", type=_team_url,
                   help="ask this team server (syntaxlock team-serve) for the model's part; the teamServer setting")
    p.set_defaults(func=cmd_serve)
    from .team.serve_cli import add_team_serve_parser

    add_team_serve_parser(sub)
    p = sub.add_parser("stats", help="print the local acceptance counts of all server sessions")
    p.set_defaults(func=cmd_stats)
    return ap


def main(argv: list[str] | None = None) -> int:
    from .allocator import give_back_freed_memory
    from .threads import use_fair_threads

    if "torch" not in sys.modules:  # a caller that imported torch already keeps its own settings
        use_fair_threads()
    give_back_freed_memory()  # freed tensors' memory goes back to the system (docs/memory.md)
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
