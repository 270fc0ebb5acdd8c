#!/usr/bin/env bash
# Build the upstream Kubeflow Trainer controller manager (v2.3.0) from its Go
# module, for `trainforge-bench --upstream` only (make bench-upstream). Not
# part of `make test`, `make demo` or CI. Output, next to the control plane's
# bin/ and data/:
#
#   $(testenv/build.sh --print-dir)/upstream/
#     bin/trainer-controller-manager
#     data/crds/       upstream's three trainer.kubeflow.org CRDs
#     data/webhook/    its webhook configurations + their kustomize patches
#     data/rbac/       its ServiceAccount, ClusterRole, ClusterRoleBinding
#     data/config/     its shipped controller_manager_config.yaml
#     data/runtimes/   its torch_distributed.yaml (for comparison)
#     build-logs/, build-figures.txt, stamp
#
# The module is testenv/go/upstream (go.mod/go.sum requiring
# github.com/kubeflow/trainer/v2 v2.3.0 as a tool); nothing of upstream is
# copied into the repository. Idempotent: a no-op when the stamp (hash of that
# go.mod/go.sum) matches. Usage:
#   testenv/upstream.sh              build if needed
#   testenv/upstream.sh --force      rebuild even if the stamp matches
#   testenv/upstream.sh --print-dir  print the output dir and exit
#   testenv/upstream.sh --print-bin  print the binary's path and exit
#
# Environment: GOTOOLCHAIN=local and CGO_ENABLED=0 are forced (as upstream's
# Dockerfile builds it: CGO_ENABLED=0 go build, no -ldflags).
set -euo pipefail

UPSTREAM_MODULE=github.com/kubeflow/trainer/v2
UPSTREAM_VERSION=v2.3.0
UPSTREAM_CMD=$UPSTREAM_MODULE/cmd/trainer-controller-manager

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
GODIR=$HERE/go/upstream
OUT=$("$HERE/build.sh" --print-dir)/upstream
BIN=$OUT/bin
DATA=$OUT/data
LOGS=$OUT/build-logs
EXE=$BIN/trainer-controller-manager

FORCE=0
case "${1:-}" in
  --force) FORCE=1 ;;
  --print-dir) echo "$OUT"; exit 0 ;;
  --print-bin) echo "$EXE"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--force|--print-dir|--print-bin]" >&2; exit 2 ;;
esac

export GOTOOLCHAIN=local CGO_ENABLED=0

STAMP=$(cat "$GODIR/go.mod" "$GODIR/go.sum" | sha256sum | cut -d' ' -f1)
if [[ $FORCE == 0 && -f $OUT/stamp && -x $EXE && "$(cat "$OUT/stamp")" == "$STAMP" ]]; then
  echo "upstream: trainer-controller-manager $UPSTREAM_VERSION is up to date in $OUT"
  exit 0
fi

# The module says `go 1.26.0`; with GOTOOLCHAIN=local an older go refuses it.
GO_HINT="install Go >= 1.26 (https://go.dev/dl/), put its bin/ on PATH, then run this again"
command -v go >/dev/null || { echo "upstream: 'go' is not on PATH: $GO_HINT" >&2; exit 1; }
GO_VERSION=$(go env GOVERSION 2>/dev/null || true)
if ! [[ $GO_VERSION =~ ^go([0-9]+)\.([0-9]+) ]] || ((BASH_REMATCH[1] == 1 && BASH_REMATCH[2] < 26)); then
  echo "upstream: $(command -v go) is ${GO_VERSION:-of unknown version}; $UPSTREAM_MODULE@$UPSTREAM_VERSION needs Go >= 1.26: $GO_HINT" >&2
  exit 1
fi
echo "upstream: building $UPSTREAM_CMD@$UPSTREAM_VERSION into $OUT ($(go version))"

rm -f "$OUT/stamp"
mkdir -p "$BIN" "$LOGS"
FIGURES=$OUT/build-figures.txt
: >"$FIGURES"
TOTAL_START=$(date +%s)

# timed NAME CMD... : run CMD in $GODIR, output to $LOGS/NAME.log, a
# heartbeat every 20 s, the wall time in $FIGURES.
timed() {
  local name=$1 log=$LOGS/$1.log start pid rc=0
  shift
  start=$(date +%s)
  echo "upstream: [$name] started"
  (cd "$GODIR" && exec "$@") >"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    for _ in $(seq 20); do
      sleep 1
      kill -0 "$pid" 2>/dev/null || break 2
    done
    echo "upstream: [$name] ... $(($(date +%s) - start))s, $(grep -vc '^go: ' "$log" || true) packages compiled so far"
  done
  wait "$pid" || rc=$?
  if [[ $rc != 0 ]]; then
    echo "upstream: [$name] FAILED after $(($(date +%s) - start))s; last lines of $log:" >&2
    tail -n 40 "$log" >&2
    exit "$rc"
  fi
  echo "upstream: [$name] done in $(($(date +%s) - start))s"
  printf '%-26s %5ss\n' "$name" "$(($(date +%s) - start))" >>"$FIGURES"
}

timed download-modules go mod download
timed trainer-controller-manager go build -v -trimpath -o "$EXE" "$UPSTREAM_CMD"

# Upstream's data files, from the module as the Go module cache holds it.
SRC=$(cd "$GODIR" && go list -m -f '{{.Dir}}' "$UPSTREAM_MODULE")
[[ -d $SRC/manifests/base ]] || { echo "upstream: no manifests/base in $SRC" >&2; exit 1; }
rm -rf "$DATA.new" && mkdir -p "$DATA.new"/{crds,webhook,rbac,config,runtimes}
cp "$SRC"/manifests/base/crds/trainer.kubeflow.org_*.yaml "$DATA.new/crds/"
cp "$SRC"/manifests/base/webhook/{manifests,patch_mutating,patch_validating}.yaml "$DATA.new/webhook/"
cp "$SRC"/manifests/base/rbac/{service_account,role,role_binding}.yaml "$DATA.new/rbac/"
cp "$SRC/manifests/base/manager/controller_manager_config.yaml" "$DATA.new/config/"
cp "$SRC/manifests/base/runtimes/torch_distributed.yaml" "$DATA.new/runtimes/"
chmod -R u+w "$DATA.new"
rm -rf "$DATA" && mv "$DATA.new" "$DATA"

TOTAL=$(($(date +%s) - TOTAL_START))
printf '%-26s %5ss\n' total "$TOTAL" >>"$FIGURES"
echo "$STAMP" >"$OUT/stamp"
echo "upstream: built in ${TOTAL}s: $EXE"
ls -l "$EXE"
find "$DATA" -type f | sort
