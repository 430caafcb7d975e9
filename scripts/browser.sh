#!/usr/bin/env bash
# What the browser tests need, installed when missing (idempotent):
#   - Debian's Chromium (/usr/bin/chromium), with apt-get as root, as scripts/postgres.sh does;
#   - the web pages' npm packages (three.js, playwright-core) in web/node_modules, from
#     web/package-lock.json (`npm ci`), which `make` also installs for the pages themselves.
#
#   bash scripts/browser.sh          both
#   bash scripts/browser.sh npm      only web/node_modules
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

die() {
    echo "browser.sh: $*" >&2
    exit 1
}

install_npm_packages() {
    local stamp="$ROOT/web/node_modules/.installed"
    if [[ -f "$stamp" && "$stamp" -nt "$ROOT/web/package-lock.json" ]]; then
        return
    fi
    command -v npm >/dev/null || die "npm is missing (Node.js 20 or newer is needed for the web pages' packages)"
    echo "browser.sh: installing the web pages' npm packages (npm ci in web/)" >&2
    (cd "$ROOT/web" && npm ci --no-audit --no-fund --loglevel=error)
    touch "$stamp"
}

install_chromium() {
    if [[ -x /usr/bin/chromium ]]; then
        return
    fi
    [[ "$(id -u)" == 0 ]] || die "Chromium is not installed (/usr/bin/chromium) and installing it needs root"
    command -v apt-get >/dev/null || die "Chromium is not installed and there is no apt-get to install it with"
    echo "browser.sh: installing Chromium (apt-get)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
}

case "${1:-all}" in
    npm) install_npm_packages ;;
    all)
        install_npm_packages
        install_chromium
        ;;
    *) die "usage: bash scripts/browser.sh [npm|all]" ;;
esac
