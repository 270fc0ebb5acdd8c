#!/usr/bin/env bash
# What `make demo` and `make test` run first: makes sure the Rust toolchain
# that rust-toolchain.toml pins is installed with every target and component
# it lists, installing what is missing with rustup (the wasm32-wasip2 target
# the builtin plugins are built for, rustfmt, clippy). Anything it cannot
# install stops the run at once, with the command to run. Silent when all is
# there (a few rustup queries, well under a second).
#
#   testenv/preflight.sh           the Rust toolchain
#   testenv/preflight.sh --tests   also the tools the tests run (kubectl; apt-get, dpkg-deb, curl for the image)
#
# Environment: RUSTUP_TOOLCHAIN, when set, names the toolchain to check instead
# of the pinned one (rustup gives it precedence over rust-toolchain.toml too).
# Go is checked by testenv/build.sh, and only when it has to build.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLCHAIN_FILE=$ROOT/rust-toolchain.toml

TESTS=0
case "${1:-}" in
  --tests) TESTS=1 ;;
  "") ;;
  *) echo "usage: $0 [--tests]" >&2; exit 2 ;;
esac

say() { echo "preflight: $*"; }
# Stop: what is wrong, then the command(s) that fix it, one a line.
die() {
  local what=$1
  shift
  echo "preflight: $what" >&2
  if (($#)); then
    echo "preflight: run:" >&2
    printf '    %s\n' "$@" >&2
  fi
  exit 1
}

# `key = "value"` and `key = ["a", "b"]` of rust-toolchain.toml.
toml_string() { sed -n "s/^$1[[:space:]]*=[[:space:]]*\"\([^\"]*\)\".*/\1/p" "$TOOLCHAIN_FILE" | head -1; }
toml_list() { sed -n "s/^$1[[:space:]]*=[[:space:]]*\[\(.*\)\].*/\1/p" "$TOOLCHAIN_FILE" | head -1 | tr -d '" ' | tr ',' ' '; }

CHANNEL=$(toml_string channel)
PROFILE=$(toml_string profile)
read -r -a TARGETS <<<"$(toml_list targets)"
read -r -a COMPONENTS <<<"$(toml_list components)"
[[ -n $CHANNEL ]] || die "no 'channel = \"...\"' in $TOOLCHAIN_FILE"
TOOLCHAIN=${RUSTUP_TOOLCHAIN:-$CHANNEL}

if ! command -v rustup >/dev/null; then
  die "rustup is not on PATH; the Rust toolchain $CHANNEL is installed with it (then run make again)" \
    "curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --default-toolchain none" \
    ". \"\$HOME/.cargo/env\""
fi

# rustup reports a toolchain as `<name>-<host>`; the pinned `1.95.0` is
# `1.95.0-x86_64-unknown-linux-gnu` on such a host.
installed_toolchain() {
  rustup toolchain list 2>/dev/null |
    awk -v t="$TOOLCHAIN" '$1 == t || index($1, t "-") == 1 { found = 1 } END { exit !found }'
}

if ! installed_toolchain; then
  install=(rustup toolchain install "$TOOLCHAIN" --profile "${PROFILE:-minimal}")
  for c in "${COMPONENTS[@]}"; do install+=(--component "$c"); done
  for t in "${TARGETS[@]}"; do install+=(--target "$t"); done
  say "Rust toolchain $TOOLCHAIN is not installed; installing it: ${install[*]}"
  "${install[@]}" || die "could not install the Rust toolchain $TOOLCHAIN (rustup's error is above)" "${install[*]}"
fi

# Targets and components already installed; rustup does not add missing ones
# of an installed toolchain by itself.
missing=()
installed=$(rustup target list --installed --toolchain "$TOOLCHAIN" 2>/dev/null || true)
for t in "${TARGETS[@]}"; do
  grep -qxF -- "$t" <<<"$installed" || missing+=("$t")
done
if ((${#missing[@]})); then
  add=(rustup target add --toolchain "$TOOLCHAIN" "${missing[@]}")
  say "target ${missing[*]} of Rust $TOOLCHAIN is missing (the builtin plugins are built for it); installing it: ${add[*]}"
  "${add[@]}" || die "could not install the target ${missing[*]} of Rust $TOOLCHAIN (rustup's error is above)" "${add[*]}"
fi

missing=()
installed=$(rustup component list --installed --toolchain "$TOOLCHAIN" 2>/dev/null || true)
for c in "${COMPONENTS[@]}"; do
  awk -v c="$c" '$1 == c || index($1, c "-") == 1 { found = 1 } END { exit !found }' <<<"$installed" ||
    missing+=("$c")
done
if ((${#missing[@]})); then
  add=(rustup component add --toolchain "$TOOLCHAIN" "${missing[@]}")
  say "component ${missing[*]} of Rust $TOOLCHAIN is missing; installing it: ${add[*]}"
  "${add[@]}" || die "could not install the component ${missing[*]} of Rust $TOOLCHAIN (rustup's error is above)" "${add[*]}"
fi

if ((TESTS)); then
  command -v kubectl >/dev/null ||
    die "kubectl is not on PATH; the control-plane tests run it: install any recent kubectl (https://kubernetes.io/docs/tasks/tools/), then run make test again"
  # The image test (host/tests/cluster/image.rs) assembles the operator image
  # from Debian's packages (testenv/image.sh).
  for t in apt-get apt-cache dpkg-deb curl; do
    command -v "$t" >/dev/null ||
      die "$t is not on PATH; the image test builds the operator image from Debian bookworm's packages with it (testenv/image.sh): run make test on Debian or Ubuntu with apt, dpkg and curl"
  done
fi
