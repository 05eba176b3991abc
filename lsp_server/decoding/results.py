"""What goes in and out of the engine: the request, the answer an editor needs, and the request's
figures apart from it (with where its time went, `RequestTimes`).

    request = CompletionRequest(text, cursor=120, document="file:///a.py")
    result = engine.complete(request)
    result.text, result.start, result.end   # insert `text` in place of text[start:end]
    result.figures.prompt_ms                # how it was made: times and counts (`Figures`)

The answer (`CompletionResult`) is what the server turns into an inline item and what the work
ahead decides on (a budget cut, a short first window); the figures (`Figures`) are for logs,
telemetry and benchmarks. `CompletionResult.to_json` gives both in one flat record.

Where a request's time in the engine went (`RequestTimes`): named parts that add up to its wall
time.

    times = RequestTimes()
    times.add("model", ms)            # each part measured where it is spent
    parts = times.split(total_ms)     # {"lock": ..., ..., "unaccounted": total - the parts}

The parts (`PARTS`), each measured once, none inside another:
- `lock`: waiting for the engine, which serves one request at a time (`CompletionEngine._lock`:
  a prefill or another request holds it);
- `setup`: before the prompt is run: the prompt built and tokenized, the text before the cursor
  parsed (the grammar matcher), the names guide made, the first line's steering;
- `prefill`: the prompt through the model (what the KV cache did not hold), every pass's;
- `model`: the decoding passes' forward passes (speculation's verifications included);
- `mask`: the grammar's masks of every step (the drafted positions' included);
- `checks`: edits checked against the whole rest of the file (`Compatibility.ms`: its set-up,
  the stop policy's checks and the offer's search);
- `names`: the names guide reshaping steps (`IdentifierGuide.shape`) and the names cut of a
  multi-line answer (pyflakes over the file; the checks it asks are `checks`);
- `gate`: CPython's compiler over the file with the answer (`request.compiler_gate`);
- `unaccounted`: the rest of the wall time: sampling, the stop policy's line scanning,
  drafting, building the result, and a thread switch or a collection that held the interpreter
  meanwhile (those land in whichever part was running). On CUDA, where `model` is the device's
  time and the masks are computed while it runs (loop.py), the two overlap: there the rest may
  come out below zero by the overlap.

Beside the parts, `RequestTimes.off_cpu` says how much of the request's time its thread was not
running (the wall time of the Python parts and of the model's passes less the thread's CPU
time in each): in the Python parts, the waits for the interpreter lock (the server's event loop
reading a keystroke, the work ahead) and for a core; in the model's, the kernels' barriers.

Why: a warm request's p90 (issue 44: 387 ms on a machine that decodes at 14 ms per token) must
be split before it can be cut; `bench/lsp_latency.py` reads the parts off the server's log.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, asdict, dataclass, field, fields, replace

from ..options import EngineOptions
from ..positions import PositionError, offset_at
from .budget import NO_BUDGET, Budget
from .stopping.policy import StopReason
from .workspace_context import NO_CONTEXT, WorkspaceContext


# ---------------------------------------------------------------------------- where the time went

PARTS = ("lock", "setup", "prefill", "model", "mask", "checks", "names", "gate")
LOGGED = re.compile(r"parts \(ms\): ((?:\w+=-?[\d.]+ ?)+)")
LOGGED_OFF_CPU = re.compile(r"off the CPU \(ms\): ((?:\w+=-?[\d.]+ ?)+)")


class RequestTimes:
    """The milliseconds of one request's parts, added as they are measured. `arrived`: when the
    request reached the engine, `started`: when it held the engine's lock (`time.perf_counter`
    seconds; the wait between them is the `lock` part), which `stamped` measures from. Made in
    the thread that serves the request, whose CPU time it reads (`off_cpu`)."""

    def __init__(self, arrived: float = 0.0, started: float = 0.0) -> None:
        self.ms = dict.fromkeys(PARTS, 0.0)
        self.ms["lock"] = (started - arrived) * 1000
        self.arrived, self.started = arrived, started
        self.cpu_started = time.thread_time()
        self.model_cpu_ms = 0.0  # the thread's CPU time inside the model's passes (prefill, model)

    def add(self, part: str, ms: float) -> None:
        self.ms[part] += ms

    def model_ran(self, cpu_ms: float) -> None:
        """The serving thread spent `cpu_ms` of CPU time in a model pass (counted in `prefill`
        or `model`)."""
        self.model_cpu_ms += cpu_ms

    def off_cpu(self, engine_ms: float) -> dict[str, float]:
        """How much of the request's `engine_ms` (its wall time since it held the lock) the
        serving thread was not running: `python`, in the Python parts (everything but `prefill`
        and `model`: waiting for the interpreter lock another thread held, or for a core the OS
        gave to another thread), and `model`, in the model's passes (waiting at the kernels'
        barriers for their other threads, or for a core). Wall less the thread's CPU time, part
        by part, never below zero."""
        cpu_ms = (time.thread_time() - self.cpu_started) * 1000
        model_ms = self.ms["prefill"] + self.ms["model"]
        python = (engine_ms - model_ms) - (cpu_ms - self.model_cpu_ms)
        return {"python": round(max(0.0, python), 2), "model": round(max(0.0, model_ms - self.model_cpu_ms), 2)}

    def split(self, total_ms: float) -> dict[str, float]:
        """The parts, and `unaccounted` = `total_ms` (the request's wall time in the engine, its
        wait for the lock included) less their sum."""
        return {part: round(ms, 2) for part, ms in self.ms.items()} | {
            "unaccounted": round(total_ms - sum(self.ms.values()), 2)}


    def stamped(self, result: CompletionResult) -> CompletionResult:
        """`result` with the request's time in the engine till now: `engine_ms` since it held
        the lock, and the wall time since it arrived split into the parts (`times_ms`)."""
        done = time.perf_counter()
        engine_ms = (done - self.started) * 1000
        return replace(result, figures=replace(result.figures, engine_ms=round(engine_ms, 2),
                                               times_ms=self.split((done - self.arrived) * 1000),
                                               off_cpu_ms=self.off_cpu(engine_ms)))


def log_text(parts: dict[str, float], off_cpu: dict[str, float] | None = None) -> str:
    """`parts` (and the serving thread's time off the CPU) as the server's log gives them
    (`parts_in`, `off_cpu_in` read them back)."""
    text = "parts (ms): " + " ".join(f"{part}={ms:.2f}" for part, ms in parts.items())
    if off_cpu:
        text += "; off the CPU (ms): " + " ".join(f"{part}={ms:.2f}" for part, ms in off_cpu.items())
    return text


def _logged(pattern: re.Pattern, line: str) -> dict[str, float] | None:
    m = pattern.search(line)
    return None if m is None else {part: float(ms) for part, ms in (kv.split("=") for kv in m.group(1).split())}


def parts_in(line: str) -> dict[str, float] | None:
    """The parts a log line gives (`log_text`), None where it gives none."""
    return _logged(LOGGED, line)


def off_cpu_in(line: str) -> dict[str, float] | None:
    """The serving thread's time off the CPU a log line gives (`log_text`), None where it gives none."""
    return _logged(LOGGED_OFF_CPU, line)


# ---------------------------------------------------------------------------- the request and its answer

Cancel = Callable[[], bool]  # polled by the request's steps: True stops it


@dataclass(frozen=True)
class CompletionRequest:
    text: str  # the whole document ("\n" line ends)
    _: KW_ONLY
    cursor: int  # offset of the cursor in `text` (code points)
    document: str = "untitled"  # key of the per-document caches (KV cache, prefix parser)
    max_tokens: int | None = None  # overrides the engine's option for this request
    mode: str | None = None  # overrides the engine's option (auto | single | multi)
    workspace: WorkspaceContext = NO_CONTEXT  # other open documents (for models that read them)
    budget: Budget = NO_BUDGET  # the request's latency budget (decoding/budget.py)
    resume: tuple[int, ...] = ()  # the tokens of an answer the budget cut, decoded on from (background)
    # may be answered from a short first window (`parts.request_window`); False: work ahead,
    # which has the time to compute the full window (and is there to compute it)
    short_first: bool = True
    # work ahead of the user (a prefetch): its prompt runs in chunks of AHEAD_CHUNK tokens that
    # a keystroke stops between (`PromptCache.prefill(ahead=True)`), not in a request's
    # PREFILL_CHUNK ones that nothing stops
    ahead: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.cursor <= len(self.text):
            raise PositionError(f"cursor offset {self.cursor} is outside the document ({len(self.text)} characters)")

    @classmethod
    def at(cls, text: str, line: int, character: int, **fields) -> CompletionRequest:
        """The request at an LSP position (0-based line, UTF-16 code units; PositionError when
        it is outside the text)."""
        return cls(text, cursor=offset_at(text, line, character), **fields)

    @property
    def line(self) -> int:
        """The cursor's 0-based line (logs, and the names analysis, which works per line)."""
        return self.text.count("\n", 0, self.cursor)

    @property
    def before(self) -> str:
        return self.text[: self.cursor]

    @property
    def after(self) -> str:
        return self.text[self.cursor :]


@dataclass(frozen=True)
class Figures:
    """How one answer was made: counts and times (logs, telemetry, benchmarks)."""

    tokens_generated: int = 0  # sampled from the model
    tokens_forced: int = 0  # appended by fast-forward without sampling
    tokens_healed: int = 0  # prompt tokens backed off and re-created
    prompt_tokens: int = 0
    prompt_reused: int = 0  # prompt tokens served from the KV cache
    prompt_ms: float = 0.0
    decode_ms: float = 0.0
    mask_ms: list[float] = field(default_factory=list)  # per decoding step
    speculation: dict | None = None  # draft statistics when speculative decoding ran
    canonical: bool = False  # canonical tokenization applied (mask_store.canonical)
    canonical_fallbacks: int = 0  # steps where it left nothing and the grammar's mask was used alone
    check_ms: float = 0.0  # spent checking edits against the whole file: set-up, the stop policy's checks, the search
    names_ready: bool = False  # the names analysis was ready and guided the decoding (decoding/identifiers)
    names_shaped: int = 0  # steps whose logits or mask it reshaped (a step shaped again after a token there is banned: twice)
    names_masked: int = 0  # of those, the ones where it masked (a closed receiver, `identifiers: constrain`)
    names_ms: float = 0.0  # spent reshaping the steps (the analysis itself is made ahead)
    gate_ms: float = 0.0  # spent in the compiler gate after decoding (`request.compiler_gate`)
    engine_ms: float = 0.0  # wall time in `complete` once it held the engine (the request's wait before it: the caller's)
    times_ms: dict[str, float] = field(default_factory=dict)  # the wall time in `complete` (the lock's wait included) in parts: `RequestTimes`
    off_cpu_ms: dict[str, float] = field(default_factory=dict)  # of `engine_ms`, the serving thread's time off the CPU: `RequestTimes.off_cpu`


NO_FIGURES = Figures()


@dataclass(frozen=True)
class CompletionResult:
    """The answer: what to insert where, why it ended, and what the work ahead needs to know."""

    text: str  # what to insert
    start: int  # replace range, offsets in the request's text; start is the cursor
    end: int  # past the auto-closed brackets/quotes the text supplies again
    stop_reason: StopReason  # see STOP_REASONS
    mode: str  # single | multi
    constrained: bool
    offer_path: str = "empty"  # which search step gave the text (decoding.offer.PATHS)
    python_version: str = ""  # the Python the document targets, whose syntax the masks allowed ("3.12")
    recovery: str | None = None  # how a syntax error before the cursor was skipped
    typed_through: int = 0  # > 0: the rest of the previous suggestion, of which this many characters were typed
    prefetched: bool = False  # made ahead of the request (after an accepted suggestion), no model call now
    budget_cut: bool = False  # the latency budget ended it early: the rest is worth decoding in the background
    short_window: bool = False  # answered from the short first window: the full one is worth computing in the background
    without_block: bool = False  # (and short_window) from the full window without the context block (parts.request_window)
    token_ids: list[int] = field(default_factory=list)  # the tokens generated (the healed ones included): decoded on from
    figures: Figures = NO_FIGURES

    def to_json(self) -> dict:
        """The answer and its figures in one flat record."""
        answer = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "figures"}
        return asdict(self.figures) | answer | {"stop_reason": str(self.stop_reason)}


STOP_REASONS = {str(r): r.description for r in StopReason}


def nothing(request: CompletionRequest, reason: StopReason, opts: EngineOptions) -> CompletionResult:
    """No completion, for `reason`."""
    return CompletionResult("", request.cursor, request.cursor, reason, request.mode or opts.mode, opts.constrained)
