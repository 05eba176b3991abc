"""The grammar over a serving engine's whole batch: one `TeamRow` per constrained request,
keyed by its row in the batch, and one packed bitmask for all rows applied to the logits with
one call per step (`apply`).

Each step every constrained row writes its mask as ceil(V/32) int32 words (bit j of word w:
token 32·w + j allowed, the layout of vLLM's own structured output and XGrammar) into one
host buffer of (rows, words); the rows of other requests stay all ones (everything allowed);
a row whose answer ends gets only its end token's bit. The buffer goes to the logits' device
in one copy and is applied in place in one call over the whole batch (XGrammar's
`apply_token_bitmask_inplace` kernel where xgrammar is installed, as it is with vLLM;
otherwise `lsp_server.model.token_bitmask`'s, a few elementwise tensor ops). On a GPU the
masks are still computed on the host, after the forward pass: vLLM's logits-processor API
calls `apply` once the logits exist (its own structured output overlaps the two; a plugin
can't).

Engine-agnostic: `add`/`remove`/`move` follow vLLM's batch updates (removed, then added, then
moved), but nothing here imports vLLM (tests/test_team_batch.py drives it directly).
"""

from __future__ import annotations

import json
import logging
import os
import time

import numpy as np
import torch

from ..model.token_bitmask import apply_token_bitmask_inplace as _apply_ours, pack_mask, words_for
from .rows import TeamGrammar, TeamRow
from .wire import TeamArgs, TeamArgsError

log = logging.getLogger(__name__)

STATS_ENV = "SYNTAXLOCK_TEAM_STATS"  # a file: each finished request's step times appended (JSON lines)


def _xgrammar_apply():
    try:
        from xgrammar import apply_token_bitmask_inplace
    except Exception:  # noqa: BLE001 - not installed, or a build that does not load: ours
        return None
    return apply_token_bitmask_inplace


class GrammarBatch:
    """The rows of a batch that asked for the grammar (module docstring)."""

    def __init__(self, grammar: TeamGrammar, vocab_width: int, max_rows: int, device="cpu") -> None:
        self.grammar = grammar
        self.width = int(vocab_width)  # the logits' width (may exceed the tokenizer's vocabulary)
        self.words = words_for(self.width)
        self.device = torch.device(device)
        self.rows: dict[int, tuple[TeamRow, list[int]]] = {}
        self._host = np.full((max(int(max_rows), 1), self.words), -1, dtype=np.int32)
        self._apply = _xgrammar_apply()
        self.stats_path = os.environ.get(STATS_ENV) or None
        self.step_ms: list[float] = []  # per step: the whole batch's grammar work (masks, bitmask, apply)

    # ------------------------------------------------------------------ batch updates

    def add(self, index: int, extra_args: dict | None, outputs: list[int]) -> bool:
        """A request enters row `index` (replacing what was there); True when it asked for the
        grammar (its `extra_args` hold our key). Arguments that can't be used end the answer at
        once (the engine must not fail for one request; the front end's `validate` refuses
        them before they get here)."""
        self.remove(index)
        raw = (extra_args or {}).get("syntaxlock")
        if raw is None:
            return False
        try:
            row = TeamRow(self.grammar, TeamArgs.from_json(raw))
        except (TeamArgsError, ValueError) as e:
            log.error("syntaxlock: request refused at row %d: %s", index, e)
            row = None
        if row is None:
            row = _EndedRow(self.grammar.end_token)
        self.rows[index] = (row, outputs)
        return True

    def remove(self, index: int) -> None:
        entry = self.rows.pop(index, None)
        if entry is not None:
            self._report(entry[0])

    def move(self, a: int, b: int, swap: bool) -> None:
        ea, eb = self.rows.pop(a, None), self.rows.pop(b, None)
        if ea is not None:
            self.rows[b] = ea
        if swap and eb is not None:
            self.rows[a] = eb
        elif eb is not None:
            self._report(eb[0])  # replaced: its request left the batch

    # ------------------------------------------------------------------ the step

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Mask the constrained rows of `logits` (num rows, V) in place; returns it."""
        if not self.rows:
            return logits
        t0 = time.perf_counter()
        n = logits.shape[0]
        if n > self._host.shape[0]:
            self._host = np.full((n, self.words), -1, dtype=np.int32)
        host = self._host[:n]
        host.fill(-1)
        rows = []
        for index, (row, outputs) in self.rows.items():
            if index >= n:
                continue
            mask = row.step(outputs)
            if mask is None:  # the answer ended: only its end token
                mask = np.zeros(self.width, dtype=bool)
                if 0 <= row.end_token < self.width:
                    mask[row.end_token] = True
            host[index] = pack_mask(mask, self.width)  # tokens past the mask are not allowed
            rows.append(index)
        if rows:
            bitmask = torch.from_numpy(host)
            if bitmask.device != logits.device:
                bitmask = bitmask.to(logits.device, non_blocking=True)
            self._apply_bitmask(logits, bitmask, rows)
        self.step_ms.append((time.perf_counter() - t0) * 1000)
        return logits

    def _apply_bitmask(self, logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> None:
        if self._apply is not None and logits.dtype in (torch.float32, torch.float16, torch.bfloat16):
            try:
                self._apply(logits, bitmask, vocab_size=self.width, indices=rows)
                return
            except Exception as e:  # noqa: BLE001 - a kernel that can't run here: ours from now on
                log.warning("syntaxlock: xgrammar's bitmask kernel failed (%s); using ours", e)
                self._apply = None
        _apply_ours(logits, bitmask)

    def _report(self, row) -> None:
        """A finished request's step times, appended to the stats file when one is set."""
        if self.stats_path is None or not isinstance(row, TeamRow):
            return
        try:
            with open(self.stats_path, "a") as f:
                f.write(json.dumps({"steps": row.stats.steps, "ms": [round(m, 4) for m in row.stats.ms],
                                    "ended": row.ended}) + "\n")
        except OSError as e:
            log.warning("syntaxlock: can't write the step times to %s: %s", self.stats_path, e)
            self.stats_path = None


class _EndedRow:
    """A request whose arguments could not be used: only the end token, from the first step."""

    def __init__(self, end_token: int) -> None:
        self.end_token = end_token
        self.ended = "refused"

    def step(self, outputs) -> None:
        return None
