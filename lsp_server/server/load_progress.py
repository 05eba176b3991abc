"""The engine's loading as LSP work-done progress (`$/progress`), for a client that supports it:
a token is created at the first "loading" status, reported on while the engine loads, and ended
by the next status that is not "loading".

    progress = LoadProgress(server, last_status=lambda: server.last_status)
    progress.update(status)    # on the event loop, at each status
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable

from lsprotocol import types

from .engine_host import Status

log = logging.getLogger(__name__)


class LoadProgress:
    def __init__(self, server, last_status: Callable[[], Status | None]) -> None:
        self._server = server  # a pygls LanguageServer: its protocol and work_done_progress
        self._last_status = last_status
        self._numbers = itertools.count(1)
        self._tokens: dict[str, bool] = {}  # the token of the load being reported -> the client created it

    def _supported(self) -> bool:
        protocol = self._server.protocol
        caps = protocol.client_capabilities if hasattr(protocol, "client_capabilities") else None
        window = getattr(caps, "window", None)
        return bool(getattr(window, "work_done_progress", False))

    def update(self, status: Status) -> None:
        """Mirror a status in the work-done reports."""
        if not self._supported():
            return
        token = next(iter(self._tokens), None)
        progress = self._server.work_done_progress
        if status.state == "loading":
            if token is None:
                token = f"syntaxlock-load-{next(self._numbers)}"
                self._tokens[token] = False
                asyncio.ensure_future(self._create(token))
            elif self._tokens[token]:
                progress.report(token, types.WorkDoneProgressReport(message=status.message,
                                                                    percentage=status.percentage))
        elif token is not None and self._tokens.pop(token):
            progress.end(token, types.WorkDoneProgressEnd(message=status.message))

    async def _create(self, token: str) -> None:
        progress = self._server.work_done_progress
        try:
            await progress.create_async(token)
        except Exception as e:
            log.info("the client refused a progress token: %s", e)
            self._tokens.pop(token, None)
            return
        status = self._last_status() or Status("loading", "loading")
        progress.begin(
            token,
            types.WorkDoneProgressBegin(title="syntaxlock", message=status.message, percentage=status.percentage or 0,
                                        cancellable=False),
        )
        if token in self._tokens:
            self._tokens[token] = True
        else:  # loading finished before the client answered
            progress.end(token, types.WorkDoneProgressEnd(message=status.message))
