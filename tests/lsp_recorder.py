"""A recording pass-through for a language server over stdio: `python lsp_recorder.py RECORD -- CMD...`
runs CMD, copies the client's bytes to it and its bytes back unchanged, and appends every
message of both directions to RECORD as one JSON line `{"from": "client"|"server", "message": …}`.

The real-editor test puts it between VS Code and `syntaxlock serve --stdio`, so that it knows
what the server offered independently of what the editor shows. Written by hand: pygls and
pytest-lsp speak LSP themselves but have no pass-through that leaves the byte stream alone, and
the framing (`Content-Length` headers, then the body) is all it needs to know.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import BinaryIO


def read_message(stream: BinaryIO) -> tuple[bytes, bytes] | None:
    """One framed message: (its raw bytes, headers and body, as they came; the body), or None at EOF."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        line = stream.readline()
        if not line:
            return None
        head += line
    length = None
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    if length is None:
        raise ValueError(f"an LSP message without Content-Length: {head!r}")
    body = stream.read(length)
    return head + body, body


def relay(source: BinaryIO, sink: BinaryIO, side: str, record, lock: threading.Lock) -> None:
    """Copies messages from `source` to `sink` until EOF, recording each; closes `sink` at the end."""
    try:
        while (msg := read_message(source)) is not None:
            raw, body = msg
            sink.write(raw)
            sink.flush()
            try:
                message = json.loads(body)
            except ValueError:
                message = {"unparsed": body.decode("utf-8", "replace")}
            with lock:
                record.write(json.dumps({"from": side, "message": message}) + "\n")
                record.flush()
    except (BrokenPipeError, ValueError):
        pass
    finally:
        try:
            sink.close()
        except BrokenPipeError:
            pass


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: lsp_recorder.py RECORD -- CMD [ARGS...]", file=sys.stderr)
        return 2
    record_path, cmd = argv[0], argv[2:]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    lock = threading.Lock()
    with open(record_path, "a", encoding="utf-8") as record:
        to_server = threading.Thread(
            target=relay, args=(sys.stdin.buffer, proc.stdin, "client", record, lock), daemon=True
        )
        to_server.start()
        relay(proc.stdout, sys.stdout.buffer, "server", record, lock)
        return proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
