"""A stand-in for a language model that wants to write a given text: deterministic tests of
the decoding loop, stopping rules and token healing with the real tokenizer and mask store."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


class CountingCache:
    """Just enough of a transformers cache: how many positions it holds (and, for the memory cap,
    `BYTES_PER_POSITION` bytes each)."""

    BYTES_PER_POSITION = 1 << 14

    def __init__(self) -> None:
        self.n = 0

    @property
    def nbytes(self) -> int:
        return self.n * self.BYTES_PER_POSITION

    def get_seq_length(self) -> int:
        return self.n

    def crop(self, k: int) -> None:
        assert k < 0
        self.n += k


@dataclass(eq=False)
class ScriptedRuntime:
    """Logits that favour, at every step, the token spelling the next bytes of `intended` (the
    whole document as the "model" would write it) that the tokenizer's own encoding of it has
    there, else the longest such token (where the text so far left that encoding, after token
    healing or straying), as a model trained on the tokenizer's output would; other tokens get
    a low, finite score so the mask always leaves a choice."""

    tokenizer: object
    intended: bytes
    fim: object = None
    name: str = "scripted"
    device: torch.device = torch.device("cpu")
    load_seconds: float = 0.0
    calls: list = field(default_factory=list)
    noise: float = 0.0  # probability that a step ignores the script (random scores, seeded)
    seed: int = 0
    prefill_chunk: int = 1 << 30  # a prompt comes in one call: that is how it knows where the prompt ends
    own_tokens: bool = True  # False: always the longest token (spellings the tokenizer may never produce)

    def __post_init__(self) -> None:
        self.vocab = self.tokenizer.vocab
        self._bytes = self.vocab.token_bytes
        self._by_bytes = self.vocab.by_bytes
        self._fed: list[int] = []
        self._rng = torch.Generator().manual_seed(self.seed)
        # the tokenizer's own tokens of the script, by the byte offset where each starts
        self._own: dict[int, int] = {}
        at = 0
        for t in self.tokenizer.encode(self.intended.decode("utf-8", errors="replace")):
            self._own[at] = t
            at += len(self._bytes[t])

    @property
    def vocab_size(self) -> int:
        return self.vocab.size

    def forward(self, ids, past=None, keep: int | None = None, cancel=None, wanted=None):
        if past is None:
            past = CountingCache()
            self._fed = []
        del self._fed[past.n :]
        self._fed.extend(ids)
        past.n += len(ids)
        self.calls.append(len(ids))
        if len(self.calls) == 1 or past.n == len(ids):  # a new prompt: find where it ends
            prompt = b"".join(self._bytes[i] for i in self._fed)
            tail = prompt[-400:]
            at = self.intended.find(tail)
            self._base = at + len(tail) if at >= 0 else None
            self._prompt_len = len(self._fed)
        keep = min(keep or len(ids), len(ids))  # the last `keep` positions, as a real model
        logits = torch.full((keep, self.vocab.size), -10.0)
        first = len(self._fed) - keep
        for r in range(keep):  # row r: the scores after fed[: first + r + 1]
            self._score(logits[r], self._fed[: first + r + 1])
        return logits, past

    def _score(self, row: torch.Tensor, fed: list[int]) -> None:
        if len(fed) < self._prompt_len:
            return
        if self.noise and float(torch.rand(1, generator=self._rng)) < self.noise:
            row[:] = torch.rand(self.vocab.size, generator=self._rng)
            return
        if self._base is None:
            return
        script = self.intended[self._base :]
        so_far = b"".join(self._bytes[i] for i in fed[self._prompt_len :])
        # the script from where the text so far last agreed with it (a model that strayed
        # picks the script up again at the same place)
        common = _common(script, so_far)
        if common == len(so_far) or self.noise:
            rest = script[common:]
            for k in range(1, min(len(rest), 48) + 1):
                t = self._by_bytes.get(rest[:k])
                if t is not None:
                    row[t] = float(k)
            own = self._own.get(self._base + common) if self.own_tokens else None
            if own is not None and rest.startswith(self._bytes[own]):
                row[own] = 100.0


def _common(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass(eq=False)
class SecondChoiceRuntime:
    """A model of two minds: `first`'s script is its first choice wherever that script still
    applies, `second`'s its second choice (every token `second` favours scores below every token
    `first` favours, above the rest). Once the text leaves `first`'s script it follows `second`'s
    (a scripted model scores nothing above the floor where the text left its script)."""

    first: ScriptedRuntime
    second: object  # a ScriptedRuntime, or another SecondChoiceRuntime for third choices and on
    boost: float = 1000.0  # above every score `second` gives (nested ones: more)
    name: str = "second-choice"
    device: torch.device = torch.device("cpu")
    load_seconds: float = 0.0

    @property
    def tokenizer(self):
        return self.first.tokenizer

    @property
    def fim(self):
        return self.first.fim

    @property
    def vocab_size(self) -> int:
        return self.first.vocab_size

    @property
    def prefill_chunk(self) -> int:
        return self.first.prefill_chunk

    def forward(self, ids, past=None, keep: int | None = None, cancel=None, wanted=None):
        a, past = self.first.forward(ids, past, keep)
        past.n -= len(ids)  # one cache: both read the same positions
        b, _ = self.second.forward(ids, past, keep)
        floor = -10.0  # ScriptedRuntime's score of the tokens it does not favour
        return torch.where(a > floor, a + self.boost, torch.maximum(a, b)), past


def choices_runtime(scripts: list[ScriptedRuntime]):
    """A model whose k-th choice, wherever the earlier ones' scripts no longer apply, is
    `scripts[k]`'s (nested `SecondChoiceRuntime`s)."""
    runtime = scripts[-1]
    for k, script in enumerate(reversed(scripts[:-1]), start=1):
        runtime = SecondChoiceRuntime(script, runtime, boost=1000.0 * 10**k)
    return runtime
