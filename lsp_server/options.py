"""The engine's options: one typed object with defaults, shared by the CLI and the server."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from grammar_tools.parsing.versions import VersionError, parse_version

MODES = ("auto", "single", "multi")
IDENTIFIER_MODES = ("off", "bias", "constrain")  # `decoding.identifiers.modes.IdentifierMode`'s values
DEVICES = ("auto", "cpu", "cuda")

# Ranges, where a value outside breaks or wastes decoding (editor settings mirror them):
INT_RANGES = {
    # 4096 tokens ran 41 s on the default model and ended empty (cut at the token limit): a block
    # of 1,024 tokens is ~80 lines
    "max_tokens": (1, 1024),
    "context_tokens": (16, 131072),
    # 0: off (every answer from the full window)
    "first_window_tokens": (0, 131072),
    # torch's generator takes 64 bits; JSON clients (JavaScript numbers) hold integers exactly to 2^53 - 1
    "seed": (0, 2**53 - 1),
    # the documents' KV caches: ~60 MB each for a full 1,024-token window (kv_cache.PromptCache)
    "cache_memory_mb": (16, 1 << 20),
}
# temperature: 0 is greedy; below MIN_TEMPERATURE the logits divided by it overflow float32
# (1e-300 gave inf, then NaN probabilities), and the distribution is greedy's anyway
MIN_TEMPERATURE = 0.01
MAX_TEMPERATURE = 5.0


class OptionError(ValueError):
    """An option value that can't be used; the message says which and why."""


@dataclass(frozen=True)
class EngineOptions:
    model: str = "default"  # "default", a Hugging Face model directory, or a .gguf file
    device: str = "auto"  # auto (cuda when present), cpu, cuda
    store: str | None = None  # mask store path; None: the per-user cache (built on first use)
    max_tokens: int = 64  # guard on generated tokens per completion
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    seed: int | None = None  # sampling seed (None: fresh randomness)
    constrained: bool = True  # False: no grammar mask (same code path, for comparison)
    mode: str = "auto"  # auto: single-line unless the cursor opens a block; single; multi
    speculative: bool = True
    canonical: bool = True  # only token sequences the tokenizer itself would produce (mask_store.canonical)
    draft_model: str | None = None  # a small model with the same tokenizer, as a draft source
    context_tokens: int = 1024  # prompt budget
    # the first answer in a document (or far from its cached prompt) comes from a window of at
    # most this many tokens when the KV cache lacks more of the full one (0: always the full
    # window; windows.request_window, docs/latency.md)
    first_window_tokens: int = 256
    # the documents' KV caches, least recently used out first past this: 96 keeps the last three
    # documents' full windows (~30 MB each with SmolLM2-135M's float16 cache on the CPU; docs/memory.md)
    cache_memory_mb: int = 96
    # the Python the documents target ("3.8".."3.14"): the syntax the masks allow; None: each
    # document's project says (decoding/parts.py: `target_version`), else the newest
    python_version: str | None = None
    # names that exist (decoding/identifiers, docs/identifiers.md): off | bias | constrain
    identifiers: str = "constrain"
    # a team completion server (vLLM with the grammar inside, `syntaxlock team-serve`; docs/team.md):
    # its URL ("http://host:8000"); None: the model runs in this process
    team_server: str | None = None

    def validated(self) -> EngineOptions:
        """Self, or OptionError naming the first bad value."""
        if not isinstance(self.model, str) or not self.model:
            raise OptionError("model must be 'default', a model directory or a .gguf file")
        if self.device not in DEVICES:
            raise OptionError(f"device must be one of {', '.join(DEVICES)}, not {self.device!r}")
        if self.identifiers not in IDENTIFIER_MODES:
            raise OptionError(f"identifiers must be one of {', '.join(IDENTIFIER_MODES)}, not {_shown(self.identifiers)}")
        if self.mode not in MODES:
            raise OptionError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        for name, (lo, hi) in INT_RANGES.items():
            v = getattr(self, name)
            if v is None and name == "seed":
                continue
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                null = " or null" if name == "seed" else ""
                raise OptionError(f"{name} must be an integer in [{lo}, {hi}]{null}, not {_shown(v)}")
        t = self.temperature
        if not _is_number(t) or not (t == 0 or MIN_TEMPERATURE <= t <= MAX_TEMPERATURE):
            raise OptionError(f"temperature must be 0 (greedy) or a number in "
                              f"[{MIN_TEMPERATURE}, {MAX_TEMPERATURE:g}], not {_shown(t)}")
        if not _is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise OptionError(f"top_p must be a number in (0, 1], not {_shown(self.top_p)}")
        for name in ("constrained", "speculative", "canonical"):
            if not isinstance(getattr(self, name), bool):
                raise OptionError(f"{name} must be true or false, not {getattr(self, name)!r}")
        if self.draft_model is not None and not isinstance(self.draft_model, str):
            raise OptionError(f"draft_model must be a model directory or null, not {self.draft_model!r}")
        if self.store is not None and not isinstance(self.store, str):
            raise OptionError(f"store must be a path or null, not {self.store!r}")
        if self.team_server is not None:
            problem = team_url_problem(self.team_server)
            if problem:
                raise OptionError(f"team_server {problem}")
        if self.python_version is not None:
            if not isinstance(self.python_version, str):
                raise OptionError(f"python_version must be a string such as \"3.12\" or null, not {_shown(self.python_version)}")
            try:
                parse_version(self.python_version)
            except VersionError as e:
                raise OptionError(f"python_version: {e}") from None
        return self

    def updated(self, **changes) -> EngineOptions:
        """A copy with `changes` applied and validated (unknown names raise OptionError)."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise OptionError(f"unknown option(s): {', '.join(unknown)}")
        return replace(self, **changes).validated()

    def needs_reload(self, other: EngineOptions) -> bool:
        """Whether switching to `other` needs the model or the store loaded again."""
        return (self.model, self.device, self.store, self.draft_model, self.team_server) != (
            other.model, other.device, other.store, other.draft_model, other.team_server)


def team_url_problem(url) -> str | None:
    """What is wrong with a team server's URL (None: an http(s) URL with a host, no query)."""
    from urllib.parse import urlsplit

    if not isinstance(url, str) or not url:
        return f"must be an http(s) URL such as \"http://gpu-box:8000\" or null, not {_shown(url)}"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as e:
        return f"must be an http(s) URL: {e}"
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        return f"must be an http(s) URL such as \"http://gpu-box:8000\" (no query), not {_shown(url)}"
    return None


def _is_number(v) -> bool:
    """A finite int or float (not a bool: JSON's true is no number)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _shown(v) -> str:
    """A value for a message: huge numbers shortened (2^64 and 1e300 are settings users send)."""
    text = repr(v)
    return text if len(text) <= 24 else f"{text[:12]}…({len(text)} characters)"
