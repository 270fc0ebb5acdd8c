#!/usr/bin/env bash
# Build the test control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, JobSet, kwok), a loopback OCI registry for tests (our
# go/registry/main.go serving go-containerregistry's pkg/registry) and the
# Helm CLI the chart tests run (go/helm) from Go modules, and extract the third-party data files (CRDs, JobSet webhook
# manifests, kwok stages) from the Go module cache, into a cache directory
# keyed by versions:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/trainforge/testenv/<KEY>/{bin,data,stamp}
#
# Idempotent: if <KEY>/stamp matches the hash of our go.mod/go.sum/*.go files,
# nothing is done. Usage:
#   testenv/build.sh              build if needed
#   testenv/build.sh --force      rebuild even if the stamp matches
#   testenv/build.sh --print-dir  print <KEY> dir and exit
#
# Environment: GOTOOLCHAIN=local and CGO_ENABLED=0 are forced; GOPROXY,
# GOSUMDB, ... are left as the machine sets them. TRAINFORGE_TESTENV_CACHE
# overrides the cache root.
set -euo pipefail

# Versions: keep in sync with testenv/go/*/go.mod and testenv/src/paths.rs.
K8S_VERSION=v1.36.3
ETCD_VERSION=v3.6.8
JOBSET_VERSION=v0.12.0
KWOK_VERSION=v0.8.0
HELM_VERSION=v4.3.1
SCHED_PLUGINS_VERSION=v0.35.4-devel
KEY="k${K8S_VERSION#v}-e${ETCD_VERSION#v}-js${JOBSET_VERSION#v}-kw${KWOK_VERSION#v}"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
GODIR=$HERE/go
CACHE_ROOT=${TRAINFORGE_TESTENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainforge/testenv}
OUT=$CACHE_ROOT/$KEY
BIN=$OUT/bin
DATA=$OUT/data
LOGS=$OUT/build-logs

FORCE=0
case "${1:-}" in
  --force) FORCE=1 ;;
  --print-dir) echo "$OUT"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--force|--print-dir]" >&2; exit 2 ;;
esac

export GOTOOLCHAIN=local CGO_ENABLED=0

# The stamp is the hash of every go.mod/go.sum and Go source file of our tool
# modules: a version bump changes KEY, an edited go.sum or registry/main.go
# changes the stamp. go/upstream (the upstream Trainer, built on demand by
# testenv/upstream.sh) is not part of the control plane.
stamp_value() {
  (cd "$GODIR" && GLOBIGNORE='upstream/*' && cat */go.mod */go.sum */*.go) | sha256sum | cut -d' ' -f1
}
STAMP=$(stamp_value)
if [[ $FORCE == 0 && -f $OUT/stamp && "$(cat "$OUT/stamp")" == "$STAMP" ]]; then
  echo "testenv: control plane $KEY is up to date in $OUT"
  exit 0
fi

# Go >= 1.26 (GOTOOLCHAIN=local: the go on PATH builds, none is downloaded).
GO_HINT="install Go >= 1.26 (https://go.dev/dl/), put its bin/ on PATH, then run this again"
command -v go >/dev/null || { echo "testenv: 'go' is not on PATH; the control plane $KEY is not cached yet and is built with it: $GO_HINT" >&2; exit 1; }
GO_VERSION=$(go env GOVERSION 2>/dev/null || true)
if ! [[ $GO_VERSION =~ ^go([0-9]+)\.([0-9]+) ]] || ((BASH_REMATCH[1] == 1 && BASH_REMATCH[2] < 26)); then
  echo "testenv: $(command -v go) is ${GO_VERSION:-of unknown version}; the control plane needs Go >= 1.26: $GO_HINT" >&2
  exit 1
fi
echo "testenv: building control plane $KEY into $OUT"
echo "testenv: $(go version)"
go env GOPROXY GOSUMDB GONOSUMDB GOFLAGS GOMODCACHE GOCACHE | paste -sd' ' | sed 's/^/testenv: go env: /'
if [[ ! -x $BIN/kube-apiserver ]]; then
  cat <<'EOF'
testenv: ********************************************************************
testenv: A COLD BUILD (empty Go module/build cache) TAKES TENS OF MINUTES on
testenv: 2 cores (measured: ~7 min for the kube binaries, ~10-15 min in all)
testenv: and needs ~2 GB RAM and a few GB of disk. A warm rebuild is link-only
testenv: (1-2 min). Progress is printed every 20 s.
testenv: ********************************************************************
EOF
fi

rm -f "$OUT/stamp"
mkdir -p "$BIN" "$DATA" "$LOGS"
FIGURES=$OUT/build-figures.txt
: >"$FIGURES"
TOTAL_START=$(date +%s)

have_time=0
[[ -x /usr/bin/time ]] && have_time=1

# stage NAME DIR CMD... : run CMD in DIR with its output in $LOGS/NAME.log,
# print a heartbeat every 20 s (elapsed time, packages compiled so far) and
# the stage's wall time (and peak RSS when GNU time is available).
stage() {
  local name=$1 dir=$2; shift 2
  local log=$LOGS/$name.log start end pid rc=0 rss=""
  start=$(date +%s)
  echo "testenv: [$name] started"
  if [[ $have_time == 1 ]]; then
    (cd "$dir" && exec /usr/bin/time -f 'TESTENV_MAXRSS_KB %M' "$@") >"$log" 2>&1 &
  else
    (cd "$dir" && exec "$@") >"$log" 2>&1 &
  fi
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
      sleep 1
      kill -0 "$pid" 2>/dev/null || break 2
    done
    echo "testenv: [$name] ... $(($(date +%s) - start))s, $(grep -vc -e '^go: ' -e TESTENV_MAXRSS "$log" || true) lines of output so far (go build -v: one per compiled package)"
  done
  wait "$pid" || rc=$?
  end=$(date +%s)
  if [[ $rc != 0 ]]; then
    echo "testenv: [$name] FAILED after $((end - start))s; last lines of $log:" >&2
    tail -n 40 "$log" >&2
    exit "$rc"
  fi
  rss=$(sed -n 's/^TESTENV_MAXRSS_KB \([0-9]*\)$/\1/p' "$log" | tail -n1)
  echo "testenv: [$name] done in $((end - start))s${rss:+, peak RSS $((rss / 1024)) MB}"
  printf '%-26s %5ss%s\n' "$name" "$((end - start))" "${rss:+  peak-rss ${rss}KB}" >>"$FIGURES"
}

KLDF="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2) \
-X k8s.io/component-base/version.gitTreeState=clean \
-X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z"

# ---- modules -------------------------------------------------------------
stage download-modules "$GODIR" bash -c 'for m in k8s jobset kwok crdgen registry helm; do (cd $m && go mod download); done'

# ---- data files ------------------------------------------------------------
moddir() { (cd "$GODIR/$1" && go list -m -f '{{.Dir}}' "$2"); }
extract_data() {
  local js kw sp tmp
  js=$(moddir jobset sigs.k8s.io/jobset)
  kw=$(moddir kwok sigs.k8s.io/kwok)
  # scheduler-plugins is not a dependency of any tool module (it would drag
  # k8s.io/kubernetes into MVS): fetch just its module zip, checked by GOSUMDB.
  sp=$(cd /tmp && go mod download -json "sigs.k8s.io/scheduler-plugins@$SCHED_PLUGINS_VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
  [[ -n $sp ]] || { echo "cannot download scheduler-plugins" >&2; return 1; }
  rm -rf "$DATA.new" && mkdir -p "$DATA.new"/{crds,jobset,kwok,monitoring}
  cp "$js/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$DATA.new/crds/"
  cp "$js/config/components/webhook/manifests.yaml" "$DATA.new/jobset/"
  cp "$js/config/components/webhook/patches/"{mutating,validating}-patch.yaml "$DATA.new/jobset/"
  cp "$sp/manifests/coscheduling/crd.yaml" "$DATA.new/crds/scheduling.x-k8s.io_podgroups.yaml"
  cp "$kw/kustomize/stage/node/fast/node-initialize.yaml" \
     "$kw/kustomize/stage/pod/fast/"{pod-ready,pod-complete,pod-delete}.yaml \
     "$kw/kustomize/stage/pod/chaos/pod-container-running-failed.yaml" "$DATA.new/kwok/"
  # Volcano PodGroup CRD: generated from volcano.sh/apis the way Volcano's
  # Makefile does (controller-gen over the scheduling/v1beta1 types).
  tmp=$(mktemp -d)
  (cd "$GODIR/crdgen" && go tool controller-gen crd:crdVersions=v1,generateEmbeddedObjectMeta=true \
     paths=volcano.sh/apis/pkg/apis/scheduling/v1beta1 output:crd:dir="$tmp")
  cp "$tmp/scheduling.volcano.sh_podgroups.yaml" "$DATA.new/crds/"
  rm -rf "$tmp"
  # The Prometheus Operator's ServiceMonitor and PrometheusRule CRDs, generated
  # from its API module the way its Makefile does (controller-gen over
  # monitoring/v1): not installed by default; the manifests tests apply them
  # to check manifests/monitoring against the real schemas.
  tmp=$(mktemp -d)
  (cd "$GODIR/crdgen" && go tool controller-gen crd:crdVersions=v1 \
     paths=github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1 output:crd:dir="$tmp")
  cp "$tmp/monitoring.coreos.com_"{servicemonitors,prometheusrules}.yaml "$DATA.new/monitoring/"
  rm -rf "$tmp"
  chmod -R u+w "$DATA.new"
  rm -rf "$DATA" && mv "$DATA.new" "$DATA"
  ls -l "$DATA"/*
}
export -f extract_data moddir
export GODIR DATA SCHED_PLUGINS_VERSION
stage data-files "$GODIR" bash -c extract_data

# ---- binaries --------------------------------------------------------------
stage etcd "$GODIR/k8s" go build -v -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  stage "$c" "$GODIR/k8s" go build -v -trimpath -pgo=off -ldflags "$KLDF" -o "$BIN/$c" "k8s.io/kubernetes/cmd/$c"
done
stage jobset "$GODIR/jobset" go build -v -trimpath -ldflags "-s -w" -o "$BIN/jobset" sigs.k8s.io/jobset
stage kwok "$GODIR/kwok" go build -v -trimpath -ldflags "-s -w" -o "$BIN/kwok" sigs.k8s.io/kwok/cmd/kwok
stage registry "$GODIR/registry" go build -v -trimpath -ldflags "-s -w" -o "$BIN/registry" .
stage helm "$GODIR/helm" go build -v -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
  -o "$BIN/helm" helm.sh/helm/v4/cmd/helm

TOTAL=$(($(date +%s) - TOTAL_START))
printf '%-26s %5ss\n' total "$TOTAL" >>"$FIGURES"
echo "$STAMP" >"$OUT/stamp"
echo "testenv: control plane built in ${TOTAL}s: $BIN"
ls -l "$BIN"
echo "testenv: build figures ($FIGURES):"
cat "$FIGURES"
