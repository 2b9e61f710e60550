#!/usr/bin/env bash
# The report test renders report.html in headless Chromium: install Debian's package when missing.
set -u
command -v chromium >/dev/null 2>&1 && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get install -y -qq chromium >/dev/null 2>&1 || (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1)) \
    || echo "warning: could not install chromium; the browser test will be skipped" >&2
elif command -v sudo >/dev/null 2>&1; then
  sudo -n apt-get install -y -qq chromium >/dev/null 2>&1 || echo "warning: could not install chromium; the browser test will be skipped" >&2
else
  echo "warning: chromium missing and not installable here; the browser test will be skipped" >&2
fi
exit 0
