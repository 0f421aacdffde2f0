#!/usr/bin/env bash
# Installs Debian's chromium and chromedriver for the explanation page's browser test
# (tests/serving/test_explain_page.py), unless both are on the PATH already. As root it runs
# apt-get itself (a container has no sudo); otherwise through sudo. Part of the README's test
# command, which .ci/run runs as written.
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null; then
    as_root=(sudo)
else
    echo "install_browser.sh: not root and no sudo: install chromium and chromium-driver" \
         "(Debian: apt-get install chromium chromium-driver) as root, then rerun" >&2
    exit 1
fi
"${as_root[@]}" apt-get update -q
DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -q chromium chromium-driver
