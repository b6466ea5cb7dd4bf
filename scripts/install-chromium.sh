#!/usr/bin/env bash
# Install headless Chromium for tests/test_report_browser.py (Debian/Ubuntu, as root).
# Idempotent: does nothing when Chromium is already installed; never fails the caller
# (prints why it did not install and exits 0), since the browser test skips without it.
set -u

find_chromium() {
    for c in chromium chromium-browser google-chrome; do
        if command -v "$c" >/dev/null 2>&1; then command -v "$c"; return 0; fi
    done
    return 1
}

if path=$(find_chromium); then
    echo "chromium already installed: $path"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "chromium not installed and not running as root; skipping (run: sudo $0)"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "chromium not installed and apt-get not available; install Chromium by hand to run the browser test"
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
if apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium; then
    if path=$(find_chromium); then
        echo "chromium installed: $path"
    else
        echo "apt-get finished but no chromium binary is on PATH"
    fi
else
    echo "apt-get could not install chromium (no network or no package); the browser test will be skipped"
fi
exit 0
