#!/usr/bin/env bash
# Create (or refresh) the Python environment of the Kubeflow SDK suite:
#
#   testenv/sdk/venv.sh [DIR]      DIR defaults to ${CARGO_TARGET_DIR:-target}/sdk-venv
#   testenv/sdk/venv.sh --check    only check that a suitable python3 with venv exists
#
# The venv holds exactly testenv/sdk/requirements.txt, installed in pip's
# hash-checking mode from wheels only. A stamp file in DIR records the
# sha256 of requirements.txt and the interpreter's version: when both match,
# the script does nothing (well under a second). Otherwise DIR is recreated.
# The interpreter is ${TRAINFORGE_SDK_PYTHON:-python3}; it must be
# CPython >= 3.11 with the venv module and ensurepip (Debian/Ubuntu:
# `apt-get install python3-venv`). Prints `sdk venv: <dir>` when ready.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
REQ="$HERE/requirements.txt"
PY="${TRAINFORGE_SDK_PYTHON:-python3}"

die() {
  echo "sdk venv: $*" >&2
  exit 1
}

command -v "$PY" >/dev/null 2>&1 ||
  die "no '$PY' on PATH: install CPython >= 3.11 with venv (Debian/Ubuntu: apt-get install python3 python3-venv), or set TRAINFORGE_SDK_PYTHON"
PYVER="$("$PY" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')" ||
  die "'$PY' does not run"
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' ||
  die "'$PY' is Python $PYVER; the pinned requirements need >= 3.11 (set TRAINFORGE_SDK_PYTHON to a newer interpreter)"
"$PY" -c 'import venv, ensurepip' 2>/dev/null ||
  die "'$PY' (Python $PYVER) has no working 'python3 -m venv' (modules venv/ensurepip missing; Debian/Ubuntu: apt-get install python3-venv)"

# requirements.txt must pin what requirements.in pins (lock.py writes it).
while read -r pin; do
  [[ -z "$pin" || "$pin" == \#* ]] && continue
  grep -qxF "$pin \\" "$REQ" ||
    die "$REQ does not pin '$pin' of requirements.in: rerun 'python3 testenv/sdk/lock.py'"
done <"$HERE/requirements.in"

if [[ "${1:-}" == "--check" ]]; then
  echo "sdk venv: $PY (Python $PYVER) can create the venv"
  exit 0
fi

DIR="${1:-${CARGO_TARGET_DIR:-$ROOT/target}/sdk-venv}"
mkdir -p "$(dirname "$DIR")"
DIR="$(cd "$(dirname "$DIR")" && pwd)/$(basename "$DIR")"
STAMP="$DIR/.trainforge-stamp"
REQ_SHA="$("$PY" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$REQ")"
WANT="$REQ_SHA python-$PYVER"

if [[ -x "$DIR/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  echo "sdk venv: $DIR (up to date)"
  exit 0
fi

# Replace only a venv (or an empty directory): DIR comes from the caller.
if [[ -d "$DIR" && ! -f "$DIR/pyvenv.cfg" && -n "$(ls -A "$DIR")" ]]; then
  die "$DIR exists and is not a venv: refusing to replace it"
fi
start=$(date +%s)
echo "sdk venv: creating $DIR with $PY (Python $PYVER) from $REQ"
rm -rf "$DIR"
"$PY" -m venv "$DIR" ||
  die "'$PY -m venv $DIR' failed (Debian/Ubuntu: apt-get install python3-venv)"
PIP_DISABLE_PIP_VERSION_CHECK=1 "$DIR/bin/python" -m pip install --quiet \
  --require-hashes --only-binary=:all: --no-input -r "$REQ" ||
  { rm -rf "$DIR"; die "pip install -r $REQ failed"; }
"$DIR/bin/python" -c 'import kubeflow.trainer, pytest' ||
  { rm -rf "$DIR"; die "the venv does not import kubeflow.trainer and pytest"; }
echo "$WANT" >"$STAMP"
echo "sdk venv: $DIR (created in $(($(date +%s) - start))s)"
