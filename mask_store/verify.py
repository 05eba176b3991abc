"""The soundness walk: real files, token by token, must never be rejected by the masks.

Each file is tokenized with the store's own tokenizer; at every position the true next token
must be allowed by `next_token_mask()` and then accepted. With a second (full) store, both
must give identical masks at every position.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .canonical import OFF, CanonicalState
from .compiled import CompiledGrammar
from .matcher import GrammarMatcher, MaskCounts


@dataclass
class Rejection:
    file: str
    line: int
    token: str
    context: str


@dataclass
class VerifyReport:
    files: int = 0
    skipped: list[str] = field(default_factory=list)
    tokens: int = 0
    positions: int = 0
    rejections: list[Rejection] = field(default_factory=list)
    n_rejections: int = 0
    differing_masks: int = 0
    first_differences: list[str] = field(default_factory=list)
    mask_seconds: list[float] = field(default_factory=list)
    parser_checks: int = 0
    canonical_fallbacks: int | None = None  # steps whose canonical AND left nothing (None: off)
    canonical_masks: int | None = None  # masks ANDed with the canonical pairs (None: off)

    @property
    def ok(self) -> bool:
        return self.n_rejections == 0 and self.differing_masks == 0

    def summary(self) -> dict:
        a = np.array(self.mask_seconds or [0.0]) * 1e3
        out = {
            "files": self.files,
            "skipped": self.skipped,
            "tokens": self.tokens,
            "positions": self.positions,
            "rejections": self.n_rejections,
            "first_rejections": [r.__dict__ for r in self.rejections],
            "mask_ms": {
                "p50": round(float(np.percentile(a, 50)), 4),
                "p95": round(float(np.percentile(a, 95)), 4),
                "p99": round(float(np.percentile(a, 99)), 4),
                "mean": round(float(a.mean()), 4),
            },
            "parser_checks_per_position": round(self.parser_checks / max(self.positions, 1), 2),
        }
        if self.canonical_fallbacks is not None:
            out["canonical_fallbacks"] = self.canonical_fallbacks
        if self.differing_masks or self.first_differences is not None:
            out["differing_masks"] = self.differing_masks
            out["first_differences"] = self.first_differences
        return out


def verify_files(
    compiled: CompiledGrammar,
    encode,
    paths,
    compare: CompiledGrammar | None = None,
    max_examples: int = 5,
    progress: bool = False,
    canonical: CanonicalState = OFF,
) -> VerifyReport:
    """Walk every file of `paths`; `encode(text) -> ids` is the store's tokenizer. With
    `canonical` (START: canonical tokenization on) the masks include the canonical pairs, which
    must allow the tokenizer's own encoding too."""
    rep = VerifyReport()
    if compare is None:
        rep.first_differences = None
    items = list(paths)
    if progress:
        from tqdm import tqdm

        items = tqdm(items, desc="files", unit="file")
    checks0 = compiled.memo.stats["parser_checks"]
    counts = MaskCounts()  # every file's matcher counts into it
    for path in items:
        path = Path(path)
        try:
            text = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as e:
            rep.skipped.append(f"{path}: {e}")
            continue
        rep.files += 1
        ids = encode(text)
        m = GrammarMatcher.from_prefix(compiled, b"", canonical=canonical, counts=counts)
        other = GrammarMatcher.from_prefix(compare, b"", canonical=canonical) if compare else None
        data = text.encode()
        pos = 0
        for t in ids:
            t0 = time.perf_counter()
            mask = m.next_token_mask()
            rep.mask_seconds.append(time.perf_counter() - t0)
            rep.positions += 1
            if other is not None:
                om = other.next_token_mask()
                if not np.array_equal(mask, om):
                    rep.differing_masks += 1
                    if len(rep.first_differences) < max_examples:
                        diff = np.flatnonzero(mask != om)[:5].tolist()
                        line = data.count(b"\n", 0, pos) + 1
                        rep.first_differences.append(f"{path}:{line} tokens {diff}")
                other.accept_token(t)
            tb = compiled.tokens[t]
            if not mask[t] or not m.accept_token(t):
                rep.n_rejections += 1
                if len(rep.rejections) < max_examples:
                    line = data.count(b"\n", 0, pos) + 1
                    ctx = data[max(0, pos - 60) : pos].decode("utf-8", "replace")
                    rep.rejections.append(Rejection(str(path), line, tb.decode("utf-8", "replace"), ctx))
                break  # the rest of the file can't be walked
            rep.tokens += 1
            pos += len(tb)
        else:
            # the file ends: the end of sequence must be allowed
            rep.positions += 1
            if not m.is_complete():
                rep.n_rejections += 1
                if len(rep.rejections) < max_examples:
                    rep.rejections.append(Rejection(str(path), data.count(b"\n") + 1, "<end>", ""))
    rep.parser_checks = compiled.memo.stats["parser_checks"] - checks0
    if canonical.active:
        rep.canonical_fallbacks = counts.canonical_fallbacks
        rep.canonical_masks = counts.canonical_masks
    return rep
