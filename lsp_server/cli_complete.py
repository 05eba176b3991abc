"""`syntaxlock complete`: complete a file at a cursor (or a batch of cursors) from the shell."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from .options import EngineOptions, OptionError

log = logging.getLogger(__name__)


def add_complete_parser(sub) -> None:
    p = sub.add_parser(
        "complete",
        help="complete FILE at a cursor (0-based line and UTF-16 character, as LSP counts them)",
    )
    p.add_argument("file", nargs="?", help="the Python file (omit with --batch)")
    p.add_argument("--line", type=int, help="0-based line of the cursor")
    p.add_argument("--character", type=int, help="0-based character (UTF-16 units) of the cursor")
    p.add_argument("--batch", metavar="CUTS.jsonl",
                   help='one {"path", "line", "character"} object per line; one JSON result per line out')
    p.add_argument("--model", default="default", help="default | a Hugging Face model directory | FILE.gguf")
    p.add_argument("--store", help="mask store path (default: the per-user cache, built on first use)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--unconstrained", action="store_true", help="no grammar mask (for comparison)")
    p.add_argument("--max-tokens", type=int, default=EngineOptions.max_tokens)
    p.add_argument("--mode", default="auto", choices=("auto", "single", "multi"))
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int)
    p.add_argument("--context-tokens", type=int, default=EngineOptions.context_tokens)
    p.add_argument("--first-window-tokens", type=int, default=0,
                   help="answer from at most this many tokens nearest the cursor (the server's first "
                        "suggestion in a file; default 0: the whole --context-tokens window, as one "
                        "command has no later request for the full window to serve)")
    p.add_argument("--no-speculative", action="store_true", help="plain decoding, one model call per token")
    p.add_argument("--no-canonical", action="store_true",
                   help="allow token sequences the tokenizer would not produce for the text (for comparison)")
    p.add_argument("--draft-model", help="a small model directory with the same tokenizer, as a draft source")
    p.add_argument("--python-version", metavar="3.X",
                   help="the Python the file targets (3.8-3.14; default: its project's requires-python or "
                        ".python-version, else 3.14)")
    p.add_argument("--identifiers", default=EngineOptions.identifiers, choices=("off", "bias", "constrain"),
                   help="names that exist: favour (bias) or also require (constrain, where the analysis is "
                        "sure) identifiers known at the cursor (docs/identifiers.md)")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.set_defaults(func=cmd_complete)


def _options(args) -> EngineOptions:
    try:
        return EngineOptions(
            model=args.model, device=args.device, store=args.store, max_tokens=args.max_tokens,
            temperature=args.temperature, top_p=args.top_p, seed=args.seed,
            constrained=not args.unconstrained, mode=args.mode,
            speculative=not args.no_speculative, canonical=not args.no_canonical, context_tokens=args.context_tokens,
            first_window_tokens=args.first_window_tokens,
            draft_model=args.draft_model, python_version=args.python_version, identifiers=args.identifiers,
        ).validated()
    except OptionError as e:
        raise SystemExit(f"syntaxlock complete: {e}") from None


def _read_text(path: str) -> str:
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror}") from None
    if b"\0" in raw:
        raise ValueError(f"{path} is a binary file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 (byte {e.start})") from None


NAMES_WAIT_S = 120.0  # the names analysis of one cursor: seconds cold (jedi reads builtins), ~0.1-1 s warm


def _load_engine(opts: EngineOptions):
    from mask_store.store import MaskStoreError

    from .decoding.engine import CompletionEngine
    from .model.runtime import ModelLoadError

    try:
        return CompletionEngine.load(opts, progress=lambda msg, frac: log.info("%s", msg))
    except (ModelLoadError, MaskStoreError) as e:
        raise SystemExit(f"syntaxlock complete: {e}") from None


def _complete_one(engine, path: str, text: str, line: int, character: int, max_tokens: int | None = None):
    """The completion at an LSP position of the file `path` whose text is `text`."""
    from .decoding.engine import CompletionRequest

    request = CompletionRequest.at(text, line, character, document=str(Path(path).resolve()), max_tokens=max_tokens)
    engine.names_ahead(request, wait=NAMES_WAIT_S)  # one shot: no work ahead made it before
    return engine.complete(request)


def _result_json(text: str, result) -> dict:
    """The result as JSON, its replace range in LSP positions ([line, character]) as the cut's."""
    from .positions import position_of

    return result.to_json() | {"start": list(position_of(text, result.start)), "end": list(position_of(text, result.end))}


def _show(path: str, text: str, result) -> str:
    """The cursor's line with the completion after it, for a person."""
    from .positions import position_of

    line_no, ch = position_of(text, result.start)
    first = text.rfind("\n", 0, result.start) + 1
    last = text.find("\n", result.start)
    head = text[first : result.start]
    rest = text[result.end : len(text) if last < 0 else last]
    green, plain = ("\033[32m", "\033[0m") if sys.stdout.isatty() else ("", "")
    shown = head + green + result.text + plain + rest
    total = result.figures.prompt_ms + result.figures.decode_ms
    summary = (
        f"{path}:{line_no + 1}:{ch + 1}: {result.mode}-line, stopped: {result.stop_reason}, "
        f"offered by: {result.offer_path}; "
        f"{result.figures.tokens_generated} sampled + {result.figures.tokens_forced} forced tokens "
        f"({result.figures.tokens_healed} healed) in {total:.0f} ms "
        f"(prompt {result.figures.prompt_ms:.0f} ms, {result.figures.prompt_reused}/{result.figures.prompt_tokens} reused)"
    )
    return f"{summary}\n{shown}"


def cmd_complete(args) -> int:
    from .positions import PositionError

    opts = _options(args)
    if args.batch:
        return _batch(args, opts)
    if args.file is None or args.line is None or args.character is None:
        raise SystemExit("syntaxlock complete: give FILE --line L --character C, or --batch CUTS.jsonl")
    try:
        text = _read_text(args.file)  # a clear error before the model loads
    except ValueError as e:
        raise SystemExit(f"syntaxlock complete: {e}") from None
    engine = _load_engine(opts)
    try:
        result = _complete_one(engine, args.file, text, args.line, args.character)
    except (ValueError, PositionError) as e:
        raise SystemExit(f"syntaxlock complete: {e}") from None
    if args.json:
        print(json.dumps(_result_json(text, result)))
    else:
        print(_show(args.file, text, result))
    return 0


def _batch(args, opts: EngineOptions) -> int:
    try:
        lines = Path(args.batch).read_text().splitlines()
    except OSError as e:
        raise SystemExit(f"syntaxlock complete: cannot read {args.batch}: {e.strerror}") from None
    engine = _load_engine(opts)
    status = 0
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            cut = json.loads(raw)
            path, line, ch = cut["path"], int(cut["line"]), int(cut["character"])
            text = _read_text(path)
            result = _complete_one(engine, path, text, line, ch, cut.get("max_tokens"))
            out = {"path": path, "line": line, "character": ch, **_result_json(text, result)}
        except (ValueError, KeyError, TypeError) as e:
            out = {"error": f"{args.batch}:{n}: {e}", "input": raw}
            status = 1
        print(json.dumps(out), flush=True)
    return status
