"""The grammar as a vLLM logits processor (the V1 engine's batch-level interface, vLLM 0.32).

    vllm serve MODEL --logits-processors lsp_server.team.vllm_processor:SyntaxlockLogitsProcessor

(`syntaxlock team-serve` does this; the `vllm.logits_processors` entry point in pyproject.toml
loads it in every vLLM server where syntaxlock is installed). A request asks for the grammar
with `vllm_xargs: {"syntaxlock": TeamArgs JSON}` (wire.py); other requests pass untouched.

vLLM's calls, and what each does here (`batch.GrammarBatch` does the work):
- `validate_params` (the API server, at admission): the arguments parse and were made for this
  server's grammar and tokenizer (the hashes `team-serve` puts in the environment), else HTTP 400;
- `update_state(batch_update)` (the engine, before each forward pass): rows removed, added
  (each with a reference to its request's list of output tokens), moved;
- `apply(logits)` (after the forward pass, before sampling): each constrained row takes the
  tokens sampled since its last step (read here, not in `update_state`: with asynchronous
  scheduling vLLM fills in the last step's tokens only just before sampling), then its mask; the
  masks go in as one packed bitmask for the whole batch.

Limits of the interface (docs/team.md): vLLM 0.32 refuses custom logits processors when
speculative decoding is on (`STR_SPEC_DEC_REJECTS_LOGITSPROCS`), so there are no speculative
rows to constrain; a logits processor can't append tokens (no fast-forward) nor take back a
sampled one. The V2 model runner (vLLM's default on CUDA where it supports the model; never
on the CPU build, which has no Triton) has another interface: `team-serve` runs V1
(`VLLM_USE_V2_MODEL_RUNNER=0`).

Importable without vLLM (the class is then not defined): the project's tests import the rest
of the package with the main environment, which has no vLLM.
"""

from __future__ import annotations

import logging
import os

from .wire import XARGS_KEY, TeamArgs, TeamArgsError

log = logging.getLogger(__name__)

GRAMMAR_ENV = "SYNTAXLOCK_TEAM_GRAMMAR"  # the served grammar's hash (set by `team-serve`)
TOKENIZER_ENV = "SYNTAXLOCK_TEAM_TOKENIZER"  # the served tokenizer's hash
MODEL_ENV = "SYNTAXLOCK_TEAM_MODEL"  # the model whose tokenizer's mask store serves (else vLLM's tokenizer path)
STORE_ENV = "SYNTAXLOCK_TEAM_STORE"  # a mask store file (else the cache's, built on first use)


def validate(extra_args: dict | None) -> None:
    """TeamArgsError (a ValueError: vLLM answers HTTP 400) for arguments this server can't use."""
    raw = (extra_args or {}).get(XARGS_KEY)
    if raw is None:
        return
    if not isinstance(raw, str):
        raise TeamArgsError(f"vllm_xargs.{XARGS_KEY} must be a JSON string")
    args = TeamArgs.from_json(raw)
    grammar, tokenizer = os.environ.get(GRAMMAR_ENV), os.environ.get(TOKENIZER_ENV)
    if grammar and args.grammar_hash and args.grammar_hash != grammar:
        raise TeamArgsError(f"the request's grammar {args.grammar_hash[:12]} is not this server's {grammar[:12]}: "
                            "update syntaxlock on one side")
    if tokenizer and args.tokenizer_hash and args.tokenizer_hash != tokenizer:
        raise TeamArgsError(f"the request was prepared for tokenizer {args.tokenizer_hash[:12]}, this server serves "
                            f"{tokenizer[:12]}: point the editor at the team server's model")


try:
    from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality
except ImportError:  # no vLLM here: the class below is vLLM's only
    LogitsProcessor = None


if LogitsProcessor is not None:

    class SyntaxlockLogitsProcessor(LogitsProcessor):
        """The grammar inside vLLM's batches (module docstring)."""

        @classmethod
        def validate_params(cls, sampling_params) -> None:
            validate(sampling_params.extra_args)

        def __init__(self, vllm_config, device, is_pin_memory: bool) -> None:
            from .batch import GrammarBatch
            from .rows import TeamGrammar

            model = vllm_config.model_config
            spec = os.environ.get(MODEL_ENV) or model.tokenizer or model.model
            grammar = TeamGrammar.load(spec, os.environ.get(STORE_ENV) or None)
            width = model.get_vocab_size()
            self.batch = GrammarBatch(grammar, width, vllm_config.scheduler_config.max_num_seqs, device)
            log.info("syntaxlock: the grammar is loaded (%d tokens, logits %d wide)", grammar.V, width)

        def is_argmax_invariant(self) -> bool:
            return False  # the mask changes greedy choices

        def update_state(self, batch_update: BatchUpdate | None) -> None:
            if batch_update is None:
                return
            batch = self.batch
            for index in batch_update.removed:
                batch.remove(index)
            for index, params, _prompt, outputs in batch_update.added:
                if not batch.add(index, params.extra_args if params is not None else None, outputs):
                    batch.remove(index)
            for a, b, direction in batch_update.moved:
                batch.move(a, b, direction == MoveDirectionality.SWAP)

        def apply(self, logits):
            return self.batch.apply(logits)
