"""What the runtime needs to know of a tokenizer besides its `tokenizer.json`: the start and end
ids, whether a prompt starts with the start token, the fill-in-the-middle ids the file
declares, and which added tokens are plain text.

For a GGUF file these come from its metadata (`gguf_tokenizer`): `tokenizer.ggml.bos_token_id`,
`eos_token_id`, `eot_token_id`, `eom_token_id`, `add_bos_token`, `add_space_prefix`,
`padding_token_id`, `unknown_token_id` and the FIM ids (`fim_pre_token_id` ... `fim_sep_token_id`;
older files `prefix_token_id`, `suffix_token_id`, `middle_token_id`). They are written as JSON
beside the cached `tokenizer.json` (`mask_store.model_files.tokenizer_facts`). For a Hugging
Face directory, from its config files where they say it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

FIM_ROLES = ("pre", "suf", "mid", "pad", "rep", "sep")  # prefix, suffix, middle, pad, repository, file separator


@dataclass(frozen=True)
class TokenizerFacts:
    kind: str  # "bpe" (byte-level BPE), "spm" (SentencePiece BPE), "hf" (a Hugging Face tokenizer.json)
    pre: str | None = None  # llama.cpp's name of the pre-tokenizer (`tokenizer.ggml.pre`)
    bos_id: int | None = None
    eos_id: int | None = None
    end_ids: tuple[int, ...] = ()  # declared end of sequence, of turn, of message
    add_bos: bool = False  # a prompt starts with bos_id
    add_space_prefix: bool = False  # SentencePiece: the model's tokenizer puts a space before a text
    pad_id: int | None = None
    unk_id: int | None = None
    fim: dict[str, int] = field(default_factory=dict)  # role (FIM_ROLES) -> id, as declared
    text_ids: tuple[int, ...] = ()  # added tokens that are text (user-defined): their bytes are their spelling

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TokenizerFacts:
        raw = json.loads(text)
        raw["end_ids"] = tuple(raw.get("end_ids") or ())
        raw["text_ids"] = tuple(raw.get("text_ids") or ())
        raw["fim"] = {str(k): int(v) for k, v in (raw.get("fim") or {}).items()}
        return cls(**{k: v for k, v in raw.items() if k in cls.__dataclass_fields__})
