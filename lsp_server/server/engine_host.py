"""The engine's home in the server: background loading, one completion at a time on a worker
thread, stopping.

    host = EngineHost(on_status)              # on_status(Status) may be called from any thread
    host.configure(options, enabled=True)     # loads (or reloads) in the background
    result = await host.complete(request, stop)   # None: not ready, or stopped before it ran

    done = await host.background(job, uri)    # work ahead: job(engine, options, cancel) when idle

A request runs with the stop signal of its run (`runs.py`: the suggester's run of the document,
stopped by the client's `$/cancelRequest` or superseded by a newer request); cancelling the task
that awaits `complete` stops it too. Background work (a prefill or a prefetch made ahead of the
user) runs only while no request is queued or running, one job at a time (a new one supersedes
the previous), and a request stops it at once (its `cancel()` turns true), so the request waits
at most for one decoder layer of it. The engine polls the stop signal between decoding steps, so
a stopped request ends within one step. While a new model loads, the
previous engine keeps answering; if the new one fails to load, the previous one stays and the
status says why.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields, replace
from collections.abc import Callable

from ..decoding.results import CompletionRequest, CompletionResult
from ..model.memory_parts import array_bytes, heap_usage, mapped_parts, model_bytes, process_memory
from ..options import EngineOptions
from .runs import CANCELLED, Runs, StopSignal

log = logging.getLogger(__name__)

BACKGROUND = "background work"  # the one key of the host's background runs: one job at a time
STATES = ("loading", "ready", "error", "disabled")


@dataclass(frozen=True)
class Status:
    state: str  # one of STATES
    message: str
    percentage: int | None = None
    reverted: EngineOptions | None = None  # a load failed: the options in use again (the previous model)

    def to_json(self) -> dict:
        return {"state": self.state, "message": self.message, "percentage": self.percentage}


Loader = Callable[[EngineOptions, Callable[[str, float | None], None]], object]


def load_engine(options: EngineOptions, progress: Callable[[str, float | None], None]):
    if options.team_server:  # the model runs on a team server (lsp_server/team, docs/team.md)
        from ..team.remote_engine import TeamEngine

        return TeamEngine.load(options, progress=progress)
    from ..decoding.engine import CompletionEngine

    return CompletionEngine.load(options, progress=progress)


def freeze_loaded() -> None:
    """Keep what a loaded engine is made of (the model's and the mask store's objects, the
    libraries they imported: ~190,000 objects) out of the cycle collector's way: every full
    collection walked them, ~135 ms of the 0.2-0.5 s it holds the interpreter on this machine
    once jedi's trees are in memory, and such a collection may start on any thread (the names
    analysis's allocations set it off) while a request is read or decoded. Frozen objects are
    still freed when nothing refers to them; the previous engine's are unfrozen first, so that a
    reload frees them (`gc.freeze`, as CPython documents for long-lived servers)."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def load_error_message(e: BaseException) -> str:
    """The message of a failed load: the known errors carry a clear one already."""
    from mask_store.store import MaskStoreError

    from ..model.runtime import ModelLoadError

    if isinstance(e, (ModelLoadError, MaskStoreError)):
        return str(e)
    return f"{type(e).__name__}: {e}"


def _without_reload(current: EngineOptions, wanted: EngineOptions) -> EngineOptions:
    """`wanted` except the values that would need another load (model, device, store, ...)."""
    out = current
    for f in fields(EngineOptions):
        candidate = replace(out, **{f.name: getattr(wanted, f.name)})
        if not current.needs_reload(candidate):
            out = candidate
    return out


class EngineHost:
    def __init__(self, on_status: Callable[[Status], None], loader: Loader = load_engine) -> None:
        self._on_status = on_status
        self._loader = loader
        self._lock = threading.Lock()
        self._status_lock = threading.RLock()
        self._engine = None
        self._active: EngineOptions | None = None  # the options the engine was loaded with
        self._desired: EngineOptions | None = None  # the options asked for
        self._enabled = True
        self._gen = 0  # bumped by every configure(): a load of an older generation is stale
        self._loading = False
        self._status = Status("loading", "starting", None)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="syntaxlock-complete")
        self._foreground = 0  # requests queued or running (changed on the event loop only)
        self._background = Runs()  # the background job queued or running, under BACKGROUND
        self._idle_listeners: list[Callable[[], None]] = []

    # --- state -------------------------------------------------------------------------------
    @property
    def status(self) -> Status:
        return self._status

    @property
    def desired(self) -> EngineOptions | None:
        """The options asked for last (after a failed load: the ones in use again)."""
        return self._desired

    @property
    def ready(self) -> bool:
        return self._engine is not None

    @property
    def fim(self):
        """The loaded model's fill-in-the-middle tokens (`FimTokens`; None: a plain model, or
        none loaded)."""
        engine = self._engine
        return getattr(engine.runtime, "fim", None) if engine is not None else None

    def _set_status(self, status: Status, gen: int | None = None) -> None:
        """Report a status; one from a load of an older generation (`gen`) is dropped, so that
        a late "ready" can't hide the load the newer settings started."""
        with self._status_lock:
            if gen is not None and gen != self._gen:
                return
            self._status = status
            try:
                self._on_status(status)
            except Exception:  # a reporting problem must not break loading
                log.exception("status callback failed")

    def describe(self) -> dict:
        opts = self._active or self._desired or EngineOptions()
        out = {"model": opts.model, "device": opts.device, "store": opts.store}
        engine = self._engine
        if engine is not None:
            try:
                out.update({k: v for k, v in engine.describe().items() if k in ("model", "device", "store")})
            except Exception:
                log.exception("engine.describe() failed")
        return {"state": self._status.state, "message": self._status.message} | out

    # --- loading -----------------------------------------------------------------------------
    def configure(self, options: EngineOptions, enabled: bool = True) -> None:
        """Use these options: load the engine in the background when the model, device or store
        changed (or none is loaded), unload it when disabled."""
        same = False
        with self._lock:
            self._gen += 1
            self._desired = options
            self._enabled = enabled
            if not enabled:
                engine, self._engine, self._active = self._engine, None, None
                start = False
            else:
                engine = None
                same = self._loaded_for(options)
                if same:
                    self._active = options  # takes effect with the next completion
                start = not same and not self._loading
                if start:
                    self._loading = True
        if not enabled:
            del engine
            gc.collect()
            self._set_status(Status("disabled", "syntaxlock is disabled (setting enabled: false)"))
            return
        if same and self._status.state != "ready":
            self._set_status(Status("ready", self._describe_short(), 100))
        if not same:
            self._set_status(Status("loading", f"loading model {options.model!r} on {options.device}", None))
        if start:
            threading.Thread(target=self._load_loop, name="syntaxlock-load", daemon=True).start()

    def _load_loop(self) -> None:
        while True:
            with self._lock:
                gen, options = self._gen, self._desired
                if not self._enabled or options is None:
                    self._loading = False
                    return
                if self._loaded_for(options):
                    self._active = options
                    self._loading = False
                    return

            def progress(message: str, fraction: float | None = None, gen=gen) -> None:
                # the engine's last report ("ready", 100%) is left to the ready status itself
                if not (fraction is not None and fraction >= 1.0):
                    pct = None if fraction is None else max(0, min(100, int(round(fraction * 100))))
                    self._set_status(Status("loading", str(message), pct), gen)

            try:
                engine = self._loader(options, progress)
                error = None
            except Exception as e:  # load errors become a status, never a crash
                engine, error = None, load_error_message(e)
                if not isinstance(e, (RuntimeError, OSError, ValueError)):
                    log.exception("unexpected error while loading the engine")
            with self._lock:
                desired = self._desired
                if not self._enabled or desired is None:
                    self._loading = False
                    return
                # loaded, and still what is wanted: settings that came meanwhile and need no reload just apply
                wanted = gen == self._gen or not options.needs_reload(desired)
                if error is None and wanted:
                    old, self._engine, self._active = self._engine, engine, desired
                    self._loading = False
                    gen = self._gen
                elif gen != self._gen:
                    del engine
                    continue  # the model, device or store changed while loading: load again
                else:
                    old = None
                    self._loading = False
                    kept = self._active
                    if kept is not None:  # keep the model in use, with the other new options
                        kept = self._active = self._desired = _without_reload(kept, options)
            del old  # the engine replaced (None when none was): freed by the collection below
            if error is None:
                freeze_loaded()
                self._set_status(Status("ready", self._describe_short(), 100), gen)
            elif kept is not None:
                self._set_status(
                    Status("ready", f"cannot load model {options.model!r} ({error}); still using {kept.model!r}", None,
                           reverted=kept),
                    gen,
                )
            else:
                self._set_status(Status("error", f"cannot load model {options.model!r}: {error}", None), gen)
            return

    def _loaded_for(self, options: EngineOptions) -> bool:
        """An engine is loaded that `options` can use without a reload (under `_lock`)."""
        return self._engine is not None and self._active is not None and not self._active.needs_reload(options)

    def _describe_short(self) -> str:
        d = self.describe()
        return f"model {d['model']} on {d['device']}"

    # --- completions -------------------------------------------------------------------------
    async def complete(self, request: CompletionRequest, stop: StopSignal,
                       on_start: Callable[[], None] = lambda: None) -> CompletionResult | None:
        """Run the request on the worker thread (`on_start()` there when the thread takes it up)
        until `stop` is set. None when no engine is ready or it was stopped before the engine
        started; asyncio cancellation stops it."""
        engine, options = self._engine, self._active
        if engine is None or stop.is_set():
            return None
        # the rest of a suggestion being typed through needs no model: answered here, at once,
        # not behind the worker's background chunk
        quick = getattr(engine, "typed_through_answer", None)
        typed = quick(request, options) if quick is not None else None
        if typed is not None:
            return typed

        def work() -> CompletionResult | None:
            on_start()
            if stop.is_set():
                return None
            result = engine.complete(request, cancel=stop.is_set, options=options)
            self._engine_health(engine)
            return result

        self._foreground += 1
        self.stop_background()  # the request comes first
        try:
            fut = asyncio.get_running_loop().run_in_executor(self._executor, work)
            try:
                return await fut
            except asyncio.CancelledError:
                stop.stop(CANCELLED)
                raise
        finally:
            self._foreground -= 1
            if self._foreground == 0:
                for listener in list(self._idle_listeners):
                    listener()

    def _engine_health(self, engine) -> None:
        """Report a change of the engine's own health (a team engine's server stopped or started
        answering: `TeamEngine.status_change`) as the status."""
        change = getattr(engine, "status_change", None)
        if change is None or engine is not self._engine:
            return
        changed = change()
        if changed is not None:
            state, message = changed
            self._set_status(Status(state, message, 100 if state == "ready" else None))

    @property
    def busy(self) -> bool:
        """A request is queued or running."""
        return self._foreground > 0

    @property
    def working(self) -> bool:
        """A request is queued or running, or work ahead holds the engine (a prefill)."""
        engine = self._engine
        return self._foreground > 0 or (engine is not None and engine.working)

    def on_idle(self, listener: Callable[[], None]) -> None:
        """Call `listener()` (on the event loop) whenever the last request queued has finished."""
        self._idle_listeners.append(listener)

    async def background(self, job: Callable[[object, EngineOptions, Callable[[], bool]], object],
                         uri: str) -> object | None:
        """Run `job(engine, options, cancel)` on the worker thread unless a request is queued or
        running (then None); a request made meanwhile, or another background job, stops it
        (`cancel()` turns true: the engine stops between decoder layers and keeps what it
        computed). Its result, or None when it did not run."""
        engine, options = self._engine, self._active
        ready_and_idle = engine is not None and options is not None and not self._foreground
        if not ready_and_idle:
            return None
        loop = asyncio.get_running_loop()

        def work(stop: StopSignal):
            def cancel() -> bool:
                return stop.is_set() or self._foreground > 0

            return None if cancel() else job(engine, options, cancel)

        run = self._background.start(BACKGROUND, uri, lambda stop: loop.run_in_executor(self._executor, work, stop))
        try:
            return await run.task
        except asyncio.CancelledError:
            run.signal.stop(CANCELLED)  # the task is cancelled (done): the worker thread's job is not
            raise

    def stop_background(self) -> None:
        self._background.stop(BACKGROUND)

    def cache_report(self) -> dict:
        """The KV caches held: documents, megabytes, tokens reused and computed so far."""
        engine = self._engine
        cache = getattr(engine, "prompt_cache", None)
        if cache is None:
            return {}
        return {"documents": len(cache.documents()), "memory_mb": round(cache.memory_bytes() / (1 << 20), 1),
                **cache.stats}

    def memory_report(self) -> dict:
        """The process's resident memory (KiB, `memory_parts`), what the engine holds (bytes):
        the model's weights by dtype, the mask store's tables; and the names analysis's jedi
        process (its KiB and the source lines of the modules it keeps parsed) once started."""
        out = {"process_kib": process_memory(), "parts_kib": mapped_parts(), "heap_bytes": heap_usage()}
        engine = self._engine
        jedi = getattr(getattr(engine, "names", None), "jedi", None)
        pid = jedi.pid if jedi is not None else None
        if pid is not None:
            try:
                out["names_process"] = {"pid": pid, "kib": process_memory(pid), "parsed_lines": jedi.parsed_lines}
            except OSError:  # it ended meanwhile
                pass
        model = getattr(getattr(engine, "runtime", None), "model", None)
        compiled = getattr(engine, "compiled", None)
        if model is not None:
            out["model_bytes"] = model_bytes(model)
        if compiled is not None:
            out["mask_store_bytes"] = array_bytes(compiled.store)
            out["mask_cache_bytes"] = compiled.cache_bytes()
        return out

    def forget(self, uri: str) -> None:
        """The document closed: the engine drops what it keeps for it."""
        engine = self._engine
        if engine is not None:
            try:
                engine.forget(uri)
            except Exception:
                log.exception("engine.forget(%s) failed", uri)

    def shutdown(self) -> None:
        with self._lock:
            self._gen += 1
            self._enabled = False
        self.stop_background()
        self._executor.shutdown(wait=False, cancel_futures=True)
