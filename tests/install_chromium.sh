#!/bin/sh
# The report's browser tests (tests/test_report_browser.py) drive Debian's Chromium at /usr/bin/chromium,
# never a browser downloaded by Playwright. This installs Debian's `chromium` package when it is missing
# (apt-get, as root or through sudo) and does nothing when it is there. The README's test command runs it.
set -eu
CHROMIUM=/usr/bin/chromium
me=tests/install_chromium.sh

[ -x "$CHROMIUM" ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
    echo "$me: $CHROMIUM is missing and there is no apt-get (not Debian): install Chromium as $CHROMIUM" >&2
    exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
    as_root=""
elif command -v sudo >/dev/null 2>&1; then
    as_root="sudo"
else
    echo "$me: $CHROMIUM is missing: run as root (or install sudo) to apt-get install chromium" >&2
    exit 1
fi
echo "$me: $CHROMIUM is missing; installing Debian's chromium package for the browser tests" >&2
$as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
if [ ! -x "$CHROMIUM" ]; then
    echo "$me: apt-get installed chromium but $CHROMIUM is still missing" >&2
    exit 1
fi
