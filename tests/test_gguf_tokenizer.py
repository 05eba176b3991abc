"""The default model's tokenizer is read from its GGUF file's own metadata
(mask_store/gguf_tokenizer.py): the same vocabulary and the same canonical tokenization whatever
transformers is installed (transformers 5.17's GGUF conversion added a normalizer, which turned
canonical tokenization off; here transformers can't even be imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the identity of SmolLM2-135M's vocabulary (Vocabulary.hash: every token's bytes, the special
# ones, the end ids) as the tokenizer converted by transformers 5.24 gives it, checked equal
# to it token for token when this module was written
SMOLLM2_VOCABULARY = "a2f290655ae89ff0"

PROBE = textwrap.dedent('''
    import json, sys
    sys.modules["transformers"] = None  # any import of it fails: the GGUF path must not need it
    from mask_store.canonical import _supported, START
    from mask_store.loading import canonical_pairs
    from mask_store.model_files import resolve_model, tokenizer_json
    from mask_store.vocabulary import load_tokenizer

    tok = load_tokenizer("default")
    spec = json.loads(tokenizer_json(resolve_model("default")).read_text())
    _supported(spec)  # raises where canonical tokenization would be off
    pairs = canonical_pairs(tok)
    code = "def f(x):\\n    return x.attr + 1  # done\\n"
    ids = tok.tokenizer.encode(code).ids
    ret, urn = tok.tokenizer.encode(" ret").ids, tok.tokenizer.encode("urn").ids
    print(json.dumps({"hash": tok.vocab.hash, "size": tok.vocab.size, "eos": sorted(tok.vocab.eos),
                      "normalizer": spec["normalizer"], "pairs": pairs is not None,
                      "canonical": pairs.is_canonical(ids, whole_text=True),
                      "split": pairs.is_canonical(tok.tokenizer.encode("    ").ids + ret + urn),
                      "decoded": tok.tokenizer.decode(ids) == code}))
''')


@pytest.mark.slow
def test_gguf_tokenizer_without_transformers(tmp_path):
    env = dict(os.environ, SYNTAXLOCK_CACHE=str(tmp_path), PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["hash"] == SMOLLM2_VOCABULARY and got["size"] == 49152 and 2 in got["eos"]
    assert got["normalizer"] is None and got["pairs"] and got["canonical"] and got["decoded"]
    assert not got["split"]  # ` ret` + `urn` is never what the tokenizer makes of ` return`


def test_other_gguf_tokenizers_are_refused_with_the_reason(tmp_path):
    from gguf import GGUFWriter

    from mask_store.gguf_tokenizer import GgufTokenizerUnsupported, gguf_tokenizer

    path = tmp_path / "sp.gguf"
    w = GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "a"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(GgufTokenizerUnsupported, match="'llama'"):
        gguf_tokenizer(path)
