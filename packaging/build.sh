#!/usr/bin/env bash
# Build the frozen skyd: dist/onedir/skyd/skyd (one folder) and dist/onefile/skyd (one file).
#   packaging/build.sh [onefile|onedir|both]      (default: both)
# The one-file build is the one-folder build as a payload behind a small shell launcher
# (packaging/onefile.py): it unpacks once per version into ~/.cache/skyd/onefile/<sha256>/
# and then starts as fast as the one-folder build. Both modes build the one-folder first.
# Needs the `package` extra: .venv/bin/pip install -e '.[package]'
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
MODES=${1:-both}
case "$MODES" in onefile|onedir|both) ;; *) echo "usage: $0 [onefile|onedir|both]" >&2; exit 2 ;; esac
if ! "$PY" -c "import PyInstaller" 2>/dev/null; then
  "$PY" -m pip install -q "pyinstaller>=6.5,<7"
fi
start=$(date +%s)
SKYD_BUILD_DIR=build "$PY" -m PyInstaller --noconfirm --log-level WARN \
  --distpath dist/onedir --workpath build/pyinstaller-onedir packaging/pyinstaller.spec
echo "built dist/onedir/skyd/skyd in $(( $(date +%s) - start ))s: $(dist/onedir/skyd/skyd --version)"
du -sh dist/onedir | sed 's/^/size: /'
if [ "$MODES" != onedir ]; then
  start=$(date +%s)
  "$PY" packaging/onefile.py dist/onedir/skyd dist/onefile/skyd
  echo "built dist/onefile/skyd in $(( $(date +%s) - start ))s"
  du -sh dist/onefile/skyd | sed 's/^/size: /'
fi
