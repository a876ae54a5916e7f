#!/usr/bin/env bash
# Build the frozen skyd: dist/onefile/skyd (one file) and dist/onedir/skyd/skyd (one folder).
#   packaging/build.sh [onefile|onedir|both]      (default: both)
# Needs the `package` extra: .venv/bin/pip install -e '.[package]'
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
MODES=${1:-both}
[ "$MODES" = both ] && MODES="onefile onedir"
if ! "$PY" -c "import PyInstaller" 2>/dev/null; then
  "$PY" -m pip install -q "pyinstaller>=6.5,<7"
fi
for mode in $MODES; do
  start=$(date +%s)
  SKYD_BUILD_MODE=$mode SKYD_BUILD_DIR=build "$PY" -m PyInstaller --noconfirm --log-level WARN \
    --distpath "dist/$mode" --workpath "build/pyinstaller-$mode" packaging/pyinstaller.spec
  bin=dist/$mode/skyd; [ "$mode" = onedir ] && bin=dist/$mode/skyd/skyd
  echo "built $bin in $(( $(date +%s) - start ))s: $("$bin" --version)"
  du -sh "dist/$mode" | sed 's/^/size: /'
done
