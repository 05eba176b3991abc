"""Acceptance telemetry, local only: how many suggestions were shown, accepted and dismissed.

    t = Telemetry()
    sid = t.shown(latency_ms=180.0)      # a new suggestion id for the editor to report back
    t.accepted(sid) / t.dismissed(sid)   # each id counts once; unknown ids are ignored (False)
    t.stats()                            # {"shown", "accepted", "dismissed", "acceptRate", "meanLatencyMs", ...}
    t.flush()                            # add this session's counts to <cache>/telemetry.json

Nothing leaves the machine: the counts live in memory and in one JSON file in the cache
directory, which `syntaxlock stats` prints.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import secrets
import threading
import time
from collections import OrderedDict
from pathlib import Path

from ..decoding.model_pass import PATHS as OFFER_PATHS  # which step of the validity search gave a completion

log = logging.getLogger(__name__)

COUNTS = ("shown", "accepted", "dismissed", "requests", "cancelled", "superseded", "budget_cut") + tuple(
    f"offer:{p}" for p in OFFER_PATHS)
PENDING_LIMIT = 4096  # suggestions remembered for an accept/dismiss report


def telemetry_path() -> Path:
    from grammar_tools.cache import cache_dir

    return cache_dir() / "telemetry.json"


def summary(counts: dict) -> dict:
    """The reported form of raw counts (which carry latency_ms_sum)."""
    shown = counts.get("shown", 0)
    out = {k: int(counts.get(k, 0)) for k in ("shown", "accepted", "dismissed")}
    out["acceptRate"] = round(out["accepted"] / shown, 4) if shown else 0.0
    out["meanLatencyMs"] = round(counts.get("latency_ms_sum", 0.0) / shown, 1) if shown else 0.0
    for k in ("requests", "cancelled", "superseded"):
        out[k] = int(counts.get(k, 0))
    out["budgetCut"] = int(counts.get("budget_cut", 0))  # answers the latency budget cut (docs/latency.md)
    out["offeredBy"] = {p: int(counts.get(f"offer:{p}", 0)) for p in OFFER_PATHS}
    return out


class Telemetry:
    """Counts for one server session. Thread-safe."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._session = secrets.token_hex(4)
        self._next = 0
        self._pending: OrderedDict[str, None] = OrderedDict()  # shown, not yet reported
        self._counts = dict.fromkeys(COUNTS, 0) | {"latency_ms_sum": 0.0}
        self._flushed = dict(self._counts)
        self._last_flush = time.monotonic()

    def count(self, name: str) -> None:
        """One more request / cancelled / superseded request / completion offered by a path."""
        with self._lock:
            self._counts[name] += 1

    def shown(self, latency_ms: float) -> str:
        with self._lock:
            self._next += 1
            sid = f"{self._session}-{self._next}"
            self._pending[sid] = None
            if len(self._pending) > PENDING_LIMIT:
                self._pending.popitem(last=False)
            self._counts["shown"] += 1
            self._counts["latency_ms_sum"] += float(latency_ms)
            return sid

    def pending(self, sid: str) -> bool:
        """Whether a shown suggestion is still waiting for its accept/dismiss report."""
        with self._lock:
            return sid in self._pending

    def _report(self, sid: object, what: str) -> bool:
        with self._lock:
            if not isinstance(sid, str) or sid not in self._pending:
                return False
            del self._pending[sid]
            self._counts[what] += 1
            return True

    def accepted(self, sid: object) -> bool:
        return self._report(sid, "accepted")

    def dismissed(self, sid: object) -> bool:
        return self._report(sid, "dismissed")

    def stats(self) -> dict:
        with self._lock:
            return summary(self._counts)

    def flush_every(self, seconds: float) -> None:
        """Flush if the last flush is older than `seconds`."""
        if time.monotonic() - self._last_flush >= seconds:
            self.flush()

    def flush(self) -> None:
        """Add the counts since the last flush to the telemetry file (file-locked, so that
        several servers can share it). Errors are logged, never raised."""
        path = self._path or telemetry_path()
        with self._lock:
            self._last_flush = time.monotonic()
            delta = {k: self._counts[k] - self._flushed[k] for k in self._counts}
            if not any(delta.values()):
                return
            self._flushed = dict(self._counts)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path.with_name(path.name + ".lock"), "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    total = json.loads(path.read_text(encoding="utf-8"))
                except FileNotFoundError:
                    total = {}
                except (json.JSONDecodeError, UnicodeDecodeError):
                    log.warning("%s was not valid JSON; starting the counts again", path)
                    total = {}
                counts = total.get("counts", {}) if isinstance(total, dict) else {}
                for k, v in delta.items():
                    counts[k] = counts.get(k, 0) + v
                tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps({"counts": counts}, indent=1))
                os.replace(tmp, path)
        except OSError as e:
            log.warning("cannot write telemetry to %s: %s", path, e)


def read_totals(path: Path | None = None) -> dict:
    """The counts of all sessions flushed to the telemetry file, summarised."""
    path = path or telemetry_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        counts = data.get("counts", {}) if isinstance(data, dict) else {}
    except (OSError, json.JSONDecodeError):
        counts = {}
    return summary(counts)
