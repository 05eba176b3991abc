"""Run in the team environment (.venv-team) by tests/test_team_vllm.py: vLLM's offline engine
with the syntaxlock logits processor, greedy, on the requests read from stdin (JSON: model and
a list of {prompt, xargs or null, max_tokens, end}); prints each request's generated token ids."""

from __future__ import annotations

import json
import sys


def main() -> None:
    job = json.load(sys.stdin)
    from vllm import LLM, SamplingParams

    from lsp_server.team.vllm_processor import SyntaxlockLogitsProcessor

    llm = LLM(model=job["model"], logits_processors=[SyntaxlockLogitsProcessor], enforce_eager=True,
              dtype="float32", max_model_len=1024, max_num_seqs=4, seed=0,
              compilation_config={"mode": 0})
    params = []
    for r in job["requests"]:
        extra = {"syntaxlock": r["xargs"]} if r["xargs"] is not None else None
        params.append(SamplingParams(temperature=0.0, max_tokens=r["max_tokens"], stop_token_ids=[r["end"]],
                                     skip_special_tokens=False, extra_args=extra))
    outs = llm.generate([{"prompt_token_ids": r["prompt"]} for r in job["requests"]], params)
    print("RESULT " + json.dumps([list(o.outputs[0].token_ids) for o in outs]))


if __name__ == "__main__":
    main()
