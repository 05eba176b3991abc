"""Serving one client over a byte stream, stdio or one TCP connection, with the frame reader of
`framing` and the message handling of `protocol`.

    code = serve_stdio(protocol, sys.stdin.buffer, stdout)   # the process's exit status
    code = serve_tcp(protocol, "127.0.0.1", 2087)

The session ends at `exit` (0 after `shutdown`, else 1), at the end of the input (the same
codes) or when the output is lost (1): a write to a closed pipe or socket, or, on stdio, the
client closing its end of our stdout while we have nothing to say (watched by a thread).

Why not pygls' loops (JsonRPCServer.start_io / start_tcp): they read frames with pygls.io_ (see
`framing`), a write to a closed stdout raised BrokenPipeError inside whatever callback was
sending while the loop went on reading, and `exit` ended them through a SystemExit they
swallowed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import stat
import threading
from collections.abc import AsyncIterator, Callable
from typing import BinaryIO

from .framing import FrameParser
from .protocol import RobustProtocol

log = logging.getLogger(__name__)

CHUNK_BYTES = 64 * 1024
QUEUED_CHUNKS = 8  # read-ahead while the server is busy: at most this many chunks wait


class PipeWriter:
    """pygls' writer interface over a binary file; a failed write loses the connection instead of
    raising into the sender."""

    def __init__(self, file: BinaryIO, lost: Callable[[str], None]) -> None:
        self._file = file
        self._lost = lost
        self._broken = False

    def write(self, data: bytes) -> None:
        if self._broken:
            return
        try:
            self._file.write(data)
            self._file.flush()
        except (OSError, ValueError) as e:  # ValueError: a closed file
            self._broken = True
            self._lost(f"cannot write to the client: {e}")

    def close(self) -> None:
        try:
            self._file.close()
        except (OSError, ValueError):
            pass


class SocketWriter:
    """pygls' writer interface over an asyncio stream."""

    def __init__(self, writer: asyncio.StreamWriter, lost: Callable[[str], None]) -> None:
        self._writer = writer
        self._lost = lost

    def write(self, data: bytes) -> None:
        if self._writer.is_closing():
            self._lost("the client's connection is closed")
            return
        self._writer.write(data)

    def close(self) -> None:
        self._writer.close()


async def pump(protocol: RobustProtocol, chunks: AsyncIterator[bytes]) -> None:
    """Feed the protocol every frame of the input until it ends (or the session does); then end
    the session as the end of input does."""
    frames = FrameParser()
    async for chunk in chunks:
        for event in frames.feed(chunk):
            protocol.receive(event)
            if protocol.ended:
                return
            await asyncio.sleep(0)  # let handlers run between messages, as one message a read would
    for event in frames.close():
        protocol.receive(event)
    protocol.end_session(protocol.exit_code(), "the client closed its input without exit")


def serve_stdio(protocol: RobustProtocol, stdin: BinaryIO, stdout: BinaryIO) -> int:
    return asyncio.run(_serve_stdio(protocol, stdin, stdout))


async def _serve_stdio(protocol: RobustProtocol, stdin: BinaryIO, stdout: BinaryIO) -> int:
    loop = asyncio.get_running_loop()
    end = protocol.begin_session()
    queue: asyncio.Queue[bytes] = asyncio.Queue(QUEUED_CHUNKS)
    threading.Thread(target=_read_chunks, args=(stdin, loop, queue), name="lsp-stdin", daemon=True).start()

    def lost(reason: str) -> None:
        loop.call_soon_threadsafe(protocol.connection_lost, reason)

    writer = PipeWriter(stdout, protocol.connection_lost)
    protocol.set_writer(writer)
    _watch_pipe(stdout, lost)

    async def chunks():
        while data := await queue.get():
            yield data

    reading = asyncio.ensure_future(pump(protocol, chunks()))
    code, _ = await end
    reading.cancel()
    writer.close()
    return code


def _read_chunks(stdin: BinaryIO, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue) -> None:
    """The reader thread: chunks as they come, b"" at the end. The file descriptor is read
    directly where there is one: a thread blocked in a buffered read holds the buffer's lock,
    which the interpreter then can't take at exit."""
    try:
        fd = stdin.fileno()
    except (OSError, ValueError, AttributeError):
        fd = None
    while True:
        try:
            data = os.read(fd, CHUNK_BYTES) if fd is not None else stdin.read1(CHUNK_BYTES)
        except (OSError, ValueError) as e:
            log.warning("cannot read from the client: %s", e)
            data = b""
        try:
            asyncio.run_coroutine_threadsafe(queue.put(data), loop).result()
        except RuntimeError:  # the loop closed: the session is over
            return
        if not data:
            return


def _watch_pipe(stdout: BinaryIO, lost: Callable[[str], None]) -> None:
    """On a pipe, tell when the client closes its end even while we have nothing to write."""
    try:
        fd = stdout.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode) or not hasattr(select, "poll"):
            return
    except (OSError, ValueError, AttributeError):
        return

    def watch() -> None:
        poller = select.poll()
        poller.register(fd, 0)  # no events asked: poll reports POLLERR / POLLHUP only
        try:
            poller.poll()
        except (OSError, ValueError):
            return
        try:
            lost("the client closed our output")
        except RuntimeError:  # the loop closed: the session is over
            pass

    threading.Thread(target=watch, name="lsp-stdout-watch", daemon=True).start()


def serve_tcp(protocol: RobustProtocol, host: str, port: int) -> int:
    return asyncio.run(_serve_tcp(protocol, host, port))


async def _serve_tcp(protocol: RobustProtocol, host: str, port: int) -> int:
    end = protocol.begin_session()
    taken = asyncio.Event()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if taken.is_set():  # one client per server process
            writer.close()
            return
        taken.set()
        log.info("a client connected from %s", writer.get_extra_info("peername"))
        protocol.set_writer(SocketWriter(writer, protocol.connection_lost))

        async def chunks():
            while True:
                try:
                    data = await reader.read(CHUNK_BYTES)
                except (ConnectionError, OSError) as e:
                    log.warning("cannot read from the client: %s", e)
                    return
                if not data:
                    return
                yield data

        try:
            await pump(protocol, chunks())
        finally:
            writer.close()

    server = await asyncio.start_server(connection, host, port)
    log.info("serving on %s", ", ".join(str(s.getsockname()) for s in server.sockets))
    async with server:
        code, _ = await end
    return code
