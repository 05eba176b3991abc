"""The server's settings: the engine's options (lsp_server.options) under the camelCase names that
editors use, plus the options only the server has.

    opts, problems = ServerOptions().merged({"maxTokens": 32, "temperature": "hot"})
    # opts.engine.max_tokens == 32; temperature kept; problems == ["syntaxlock.temperature: ..."]

Settings come from `initializationOptions` and from `workspace/didChangeConfiguration`, either
flat or under a "syntaxlock" key. Each value is checked on its own: a bad one keeps the previous
setting and adds a line to `problems` (the server shows them with window/showMessage). Unknown
keys are ignored (editors send their own settings in the same section); `null` resets a key to
its default.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..decoding.repo_context.block import MAX_SHARE
from ..options import EngineOptions, OptionError

SECTION = "syntaxlock"

ENGINE_KEYS = {  # camelCase setting -> EngineOptions field
    "model": "model",
    "device": "device",
    "store": "store",
    "maxTokens": "max_tokens",
    "temperature": "temperature",
    "topP": "top_p",
    "seed": "seed",
    "constrained": "constrained",
    "mode": "mode",
    "speculative": "speculative",
    "canonical": "canonical",
    "draftModel": "draft_model",
    "contextTokens": "context_tokens",
    "firstWindowTokens": "first_window_tokens",
    "cacheMemoryMB": "cache_memory_mb",
    "pythonVersion": "python_version",
    "identifiers": "identifiers",
    "teamServer": "team_server",
}
SERVER_KEYS = {"enabled": "enabled", "completionItems": "completion_items", "workAhead": "work_ahead"}
SERVER_INT_KEYS = {"latencyBudgetMs": "latency_budget_ms"}  # camelCase -> field (its range: SERVER_INT_RANGES)
SERVER_INT_RANGES = {"latency_budget_ms": (0, 60_000)}
# camelCase -> field, and its range (docs/context.md)
SERVER_FLOAT_KEYS = {"contextShare": "context_share"}
SERVER_FLOAT_RANGES = {"context_share": (0.0, MAX_SHARE)}
_SERVER_FIELDS = SERVER_KEYS | SERVER_INT_KEYS | SERVER_FLOAT_KEYS
_INT_FIELDS = {"max_tokens", "context_tokens", "first_window_tokens", "seed", "cache_memory_mb"}


def _whole_float(value) -> bool:
    """JSON's 32.0: an integer a client meant (not 1e300, which is none)."""
    return isinstance(value, float) and value.is_integer() and abs(value) <= 2**53


def _int_in(value, lo: int, hi: int) -> bool:
    """An integer (not a bool) from `lo` to `hi`."""
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def _number_in(value, lo: float, hi: float) -> bool:
    """A number (not a bool) from `lo` to `hi`."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and lo <= value <= hi


def _server_value(name: str, value):
    """`value` as the server-only field `name` holds it (a bool, an integer or a number in its
    range), None where it is not one."""
    if name in SERVER_INT_RANGES:
        value = int(value) if _whole_float(value) else value
        return value if _int_in(value, *SERVER_INT_RANGES[name]) else None
    if name in SERVER_FLOAT_RANGES:
        return float(value) if _number_in(value, *SERVER_FLOAT_RANGES[name]) else None
    return value if isinstance(value, bool) else None


def _what_it_must_be(name: str) -> str:
    if name in SERVER_INT_RANGES:
        lo, hi = SERVER_INT_RANGES[name]
        return f"an integer from {lo} to {hi}"
    if name in SERVER_FLOAT_RANGES:
        lo, hi = SERVER_FLOAT_RANGES[name]
        return f"a number from {lo:g} to {hi:g}"
    return "true or false"


@dataclass(frozen=True)
class ServerOptions:
    enabled: bool = True  # False: no engine loaded, no completions (state "disabled")
    completion_items: bool = True  # also answer textDocument/completion with the suggestion
    work_ahead: bool = True  # prefill at the cursor when the user pauses, prefetch after an accept
    # a request's answer once this many ms have passed: the complete lines decoded so far, the rest
    # decoded in the background (0: no budget; decoding/budget.py, docs/latency.md)
    latency_budget_ms: int = 250
    # the share of `contextTokens` the context block (definitions used at the cursor, similar code of
    # other documents; decoding/repo_context, docs/context.md) may take; 0: no block; None (unset, the
    # default): the model decides (`repo_context.block_share`: 0.25 for a model that reads other files
    # as its repository's, Qwen2.5-Coder's `<|file_sep|>`; none for a plain model such as the default)
    context_share: float | None = None
    engine: EngineOptions = field(default_factory=EngineOptions)

    def merged(self, raw: Any) -> tuple[ServerOptions, list[str]]:
        """These options with the settings in `raw` applied, and the problems found."""
        if raw is None:
            return self, []
        if not isinstance(raw, dict):
            return self, [f"{SECTION} settings must be an object, not {type(raw).__name__}"]
        if SECTION in raw:
            raw = raw[SECTION]
            if raw is None:
                return self, []
            if not isinstance(raw, dict):
                return self, [f"{SECTION} settings must be an object, not {type(raw).__name__}"]
        problems: list[str] = []
        opts = self
        defaults_engine = EngineOptions()
        for key, value in raw.items():
            if key in _SERVER_FIELDS:
                name = _SERVER_FIELDS[key]
                if value is None:  # unset: the default
                    opts = replace(opts, **{name: getattr(ServerOptions, name)})
                    continue
                checked = _server_value(name, value)
                if checked is None:
                    problems.append(f"{SECTION}.{key} must be {_what_it_must_be(name)}, not {value!r}; "
                                    f"keeping {getattr(opts, name)!r}")
                    continue
                opts = replace(opts, **{name: checked})
            elif key in ENGINE_KEYS:
                name = ENGINE_KEYS[key]
                if value is None:
                    value = getattr(defaults_engine, name)
                if name in _INT_FIELDS and _whole_float(value):
                    value = int(value)
                try:
                    engine = opts.engine.updated(**{name: value})
                except OptionError as e:
                    problems.append(f"{SECTION}.{key}: {e}; keeping {getattr(opts.engine, name)!r}")
                    continue
                opts = replace(opts, engine=engine)
        return opts, problems

    def to_json(self) -> dict:
        """The settings under their camelCase names."""
        out = {key: getattr(self, name) for key, name in (SERVER_KEYS | SERVER_INT_KEYS | SERVER_FLOAT_KEYS).items()}
        out.update({key: getattr(self.engine, name) for key, name in ENGINE_KEYS.items()})
        return out

