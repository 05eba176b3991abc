"""`MaskStore`: the offline join of the grammar's lexer with a tokenizer, and its file format.

A row says: "from lexer configuration q, these tokens announce the terminal sequence S" (see
`token_lexing`). At run time a row's tokens are allowed when the parser accepts S. Rows live in
*groups*:

- one group per NFA state q: a class of lexer configurations (X, d) that every token reads
  alike (`nfa_states`; `pair_*` map each (X, d) to its q, `q_state` is one d of the class). Its
  group holds the tokens that keep the lexeme growing (S = ()) and the
  tokens that end it somewhere inside themselves;
- *boundary* groups: tokens whose very first byte ends the current lexeme. What they announce
  depends on the token alone, not on q, so all states share them; a state applies them when X
  may end at d, restricted to the tokens whose first byte can't extend its lexeme (`dead_sets`).
  The full store has one boundary group; streamlining gives each terminal X its own, pruned
  (and merges it into the state's own rows where both are checked from the same parser node).

Identical token sets are stored once, each as a sorted id array, the sorted ids it leaves out
(most rows inside an identifier allow nearly every token) or a packed bitset, whichever is
smallest. The file is safetensors (a JSON header and raw arrays, memory-mapped on load, never
pickle) with a versioned header: format, grammar hash, tokenizer hash, vocabulary size, build
options, and a checksum over the header and every array (name, dtype, shape, bytes), checked at
load: one flipped bit anywhere is an error, never a wrong mask (safetensors checks offsets and
sizes only, and the structural checks below catch damaged indices, not damaged masks). A
missing, corrupt or mismatched file raises `MaskStoreError` naming the fix.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from grammar_tools import cache

from . import bits
from .nfa_states import NfaStates
from .token_lexing import Indent

FORMAT = "syntaxlock-mask-store"
FORMAT_VERSION = 5  # 4: the checksum; 5: NFA states merged by class (`pair_*`), negated sparse masks
CHECKSUM = "blake2b-256"
ARRAYS = ("q_term", "q_state", "pair_term", "pair_state", "pair_q", "q_group", "q_boundary", "d_dead", "dead_sets", "group_start",
          "row_seq_start", "seq", "row_mask", "dense", "sparse_start", "sparse_ids", "sparse_negated")


class MaskStoreError(RuntimeError):
    """The store can't be used; the message says how to rebuild it."""


def rebuild_hint(model: str | None, out: Path | None = None) -> str:
    """The command that makes the store again (`out`: a file outside the cache, where it goes)."""
    where = ""
    if out is not None and Path(out).resolve().parent != (cache.cache_dir() / "stores").resolve():
        where = f" --out {out}"
    return f"rebuild it with `mask-store build --model {model or 'default'}{where}`"


def checksum(header_json: str, arrays: dict[str, np.ndarray]) -> str:
    """`CHECKSUM` of the store's header and arrays, each array with its name, dtype and shape."""
    h = hashlib.blake2b(digest_size=32)
    h.update(header_json.encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"\0{name}\0{a.dtype.str}\0{a.shape}\0".encode())
        h.update(a.reshape(-1).view(np.uint8).data)
    return f"{CHECKSUM}:{h.hexdigest()}"


@dataclass(eq=False)
class MaskStore:
    header: dict
    q_term: np.ndarray  # (Q,) int32: terminal X of NFA state q
    q_state: np.ndarray  # (Q,) int32: lexer state d of q (its class's representative)
    pair_term: np.ndarray  # (P,) int32: every configuration (X, d) of the lexer...
    pair_state: np.ndarray  # (P,) int32
    pair_q: np.ndarray  # (P,) int32: ...and the q it belongs to
    q_group: np.ndarray  # (Q,) int32: q's own group
    q_boundary: np.ndarray  # (Q,) int32: boundary group q uses, -1 if X can't end at d
    d_dead: np.ndarray  # (n_lexer_states,) int32: index into dead_sets
    dead_sets: np.ndarray  # (n_sets, 32) uint8: bytes that end the lexeme, as a 256-bit set (`bits`)
    group_start: np.ndarray  # (G+1,) int64: rows of group g are group_start[g]:group_start[g+1]
    row_seq_start: np.ndarray  # (R+1,) int64 into seq
    seq: np.ndarray  # int32: terminal ids, and n_terminals + k for indents[k]
    row_mask: np.ndarray  # (R,) int32: >= 0 dense index, < 0 ~sparse index
    dense: np.ndarray  # (n_dense, W) uint64 bitsets (`bits`' layout)
    sparse_start: np.ndarray  # (n_sparse+1,) int64
    sparse_ids: np.ndarray  # uint16 or uint32 token ids
    sparse_negated: np.ndarray  # (n_sparse,) uint8: 1 where the ids are those the mask leaves out
    indents: list[Indent] = field(default_factory=list)

    # ------------------------------------------------------------------ facts

    @property
    def vocab_size(self) -> int:
        return int(self.header["vocab_size"])

    @property
    def n_rows(self) -> int:
        return int(self.row_mask.shape[0])

    @property
    def n_states(self) -> int:
        return int(self.q_term.shape[0])

    def nfa(self) -> NfaStates:
        return NfaStates(self.q_term, self.q_state, self.pair_term, self.pair_state, self.pair_q)

    def logical_rows(self) -> int:
        """Rows as a store without shared groups would have them (the seed's count): each
        state's own rows plus the boundary rows it applies. A streamlined store records this
        count after each streamlining step in `header["streamline"]["steps"]`."""
        own = self.group_start[self.q_group + 1] - self.group_start[self.q_group]
        b = self.q_boundary
        shared = np.where(b >= 0, self.group_start[b + 1] - self.group_start[np.maximum(b, 0)], 0)
        return int(own.sum() + shared.sum())

    def info(self) -> dict:
        h = dict(self.header)
        h.update(
            rows=self.n_rows,
            logical_rows=self.logical_rows(),
            nfa_states=self.n_states,
            lexer_configurations=int(self.pair_q.shape[0]),
            groups=int(self.group_start.shape[0] - 1),
            unique_masks=int(self.dense.shape[0] + self.sparse_start.shape[0] - 1),
            dense_masks=int(self.dense.shape[0]),
            sparse_masks=int(self.sparse_start.shape[0] - 1),
        )
        steps = (h.get("streamline") or {}).get("steps")
        if steps:
            h["rows_per_step"] = {x["step"]: x["rows"] for x in steps}
        return h

    def row_seq(self, r: int) -> tuple[int, ...]:
        return tuple(self.seq[self.row_seq_start[r] : self.row_seq_start[r + 1]].tolist())

    def row_tokens(self, r: int) -> np.ndarray:
        return self.mask_tokens(int(self.row_mask[r])).astype(np.int64)

    def mask_tokens(self, m: int) -> np.ndarray:
        """The token ids (sorted) of mask `m`: dense mask m where m >= 0, else sparse mask ~m."""
        if m >= 0:
            return bits.token_ids(self.dense[m], self.vocab_size)
        return self.sparse_tokens(~m)

    def sparse_tokens(self, k: int) -> np.ndarray:
        """The token ids of sparse mask k (sorted)."""
        ids = self.sparse_ids[self.sparse_start[k] : self.sparse_start[k + 1]]
        if not self.sparse_negated[k]:
            return ids
        keep = np.ones(self.vocab_size, dtype=bool)
        keep[ids] = False
        return np.flatnonzero(keep)

    # ------------------------------------------------------------------ file

    def save(self, path: str | Path) -> Path:
        from safetensors.numpy import save_file

        path = Path(path)
        arrays = {name: np.ascontiguousarray(getattr(self, name)) for name in ARRAYS}
        header = dict(self.header)
        header["indents"] = [[int(i.relative), i.ws.decode("latin-1")] for i in self.indents]
        header_json = json.dumps(header)
        meta = {"format": FORMAT, "format_version": str(FORMAT_VERSION), "header": header_json,
                "checksum": checksum(header_json, arrays)}
        with cache.written_aside(path) as tmp:
            save_file(arrays, str(tmp), metadata=meta)
        return path


def load_store(
    path: str | Path,
    *,
    grammar_hash: str | None = None,
    tokenizer_hash: str | None = None,
    vocab_size: int | None = None,
) -> MaskStore:
    """Load a store, checking it against the grammar and tokenizer it will serve."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise MaskStoreError(f"no mask store at {path}: {rebuild_hint(None, path)}")
    try:
        with safe_open(str(path), framework="np") as f:
            meta = f.metadata() or {}
            if meta.get("format") != FORMAT:
                raise MaskStoreError(f"{path} is not a syntaxlock mask store: {rebuild_hint(None, path)}")
            header = json.loads(meta["header"])
            model = header.get("model") if isinstance(header, dict) else None
            if meta.get("format_version") != str(FORMAT_VERSION):
                raise MaskStoreError(
                    f"{path} has format version {meta.get('format_version')}, this syntaxlock "
                    f"reads {FORMAT_VERSION}: {rebuild_hint(model, path)}"
                )
            arrays = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError, KeyError) as e:
        raise MaskStoreError(f"{path} is corrupt ({e}): {rebuild_hint(None, path)}") from None
    if sorted(arrays) != sorted(ARRAYS) or meta.get("checksum") != checksum(meta["header"], arrays):
        raise MaskStoreError(f"{path} is corrupt (its data does not match its {CHECKSUM} checksum): "
                             f"{rebuild_hint(model, path)}")
    for what, want, have in (
        ("grammar", grammar_hash, header.get("grammar_hash")),
        ("tokenizer", tokenizer_hash, header.get("tokenizer_hash")),
        ("vocabulary size", vocab_size, header.get("vocab_size")),
    ):
        if want is not None and want != have:
            raise MaskStoreError(
                f"{path} was built for another {what} ({have}, expected {want}): {rebuild_hint(model, path)}"
            )
    indents = [Indent(bool(r), ws.encode("latin-1")) for r, ws in header.pop("indents", [])]
    try:
        store = MaskStore(header=header, indents=indents, **arrays)
        _validate(store)
    except (TypeError, ValueError, IndexError) as e:
        raise MaskStoreError(f"{path} is corrupt ({e}): {rebuild_hint(model, path)}") from None
    return store


def _validate(s: MaskStore) -> None:
    """Cheap structural checks, so that a damaged file never yields a wrong mask."""
    Q, R = s.q_term.shape[0], s.row_mask.shape[0]
    G = s.group_start.shape[0] - 1
    if not (s.q_state.shape == s.q_group.shape == s.q_boundary.shape == (Q,)):
        raise ValueError("state arrays disagree")
    if s.row_seq_start.shape != (R + 1,) or s.group_start[-1] != R or s.row_seq_start[-1] != s.seq.shape[0]:
        raise ValueError("row arrays disagree")
    if np.any(np.diff(s.group_start) < 0) or np.any(np.diff(s.row_seq_start) < 0):
        raise ValueError("offsets not sorted")
    P = s.pair_q.shape[0]
    if not (s.pair_term.shape == s.pair_state.shape == (P,)) or P < Q:
        raise ValueError("configuration arrays disagree")
    if P and (s.pair_q.min() < 0 or s.pair_q.max() >= Q or np.any(s.q_term[s.pair_q] != s.pair_term)):
        raise ValueError("configuration maps to a state of another terminal")
    if Q and (s.q_group.max() >= G or s.q_boundary.max() >= G):
        raise ValueError("group index out of range")
    n_dense, n_sparse = s.dense.shape[0], s.sparse_start.shape[0] - 1
    if R and (s.row_mask.max() >= n_dense or (~s.row_mask[s.row_mask < 0]).max(initial=-1) >= n_sparse):
        raise ValueError("mask index out of range")
    if s.sparse_start[-1] != s.sparse_ids.shape[0] or s.sparse_negated.shape != (n_sparse,):
        raise ValueError("sparse arrays disagree")
    if s.sparse_ids.size and int(s.sparse_ids.max()) >= s.vocab_size:
        raise ValueError("token id out of range")
    if s.dense.shape[1] * 64 < s.vocab_size:
        raise ValueError("bitsets too short")
    n_terms = int(s.header["n_terminals"])
    if s.seq.size and int(s.seq.max()) >= n_terms + len(s.indents):
        raise ValueError("sequence element out of range")


def default_store_path(grammar_hash: str, tokenizer_hash: str, streamlined: bool, variant: str = "") -> Path:
    """Where the server looks for a store; `variant` tells apart stores that the same grammar
    and tokenizer give with different code (a hash of the code that builds it)."""
    kind = ("streamlined" if streamlined else "full") + (f"-{variant}" if variant else "")
    return cache.cache_dir() / "stores" / f"mask-{grammar_hash}-{tokenizer_hash}-{kind}.safetensors"


def now() -> float:
    return time.perf_counter()
