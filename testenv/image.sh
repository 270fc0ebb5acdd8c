#!/usr/bin/env bash
# Assemble the operator image without a container engine: what the top-level
# Dockerfile builds, as an OCI image layout, pushed to a registry if asked.
#
#   testenv/image.sh [--bin PATH] [--out DIR] [--tag TAG]
#                    [--push REGISTRY/REPOSITORY:TAG [--plain-http] [--ca-file PEM]]
#
#   --bin   the trainforge binary (default target/release/trainforge; `make image` builds it)
#   --out   the OCI image layout to write (default target/image)
#   --tag   the tag recorded in the layout's index (default dev)
#   --push  also push it (the distribution API over curl; TRAINFORGE_REGISTRY_USER and
#           TRAINFORGE_REGISTRY_PASSWORD for a registry that wants Basic credentials)
#
# The image, as the Dockerfile's:
#   /trainforge               the binary (ENTRYPOINT, CMD operator)
#   /trainforge-artifacts/    its builtin plugins precompiled by itself
#                             (`trainforge plugin precompile`)
#   user 65532:65532 (nonroot), no shell, no package manager.
# The Dockerfile's base, gcr.io/distroless/cc-debian12, cannot be pulled from
# machines that reach no container registry; its content that a Rust binary
# needs comes from Debian bookworm's own packages instead, fetched with
# `apt-get download` (and cached): libc6 and libgcc-s1 (the C runtime, as in
# distroless/cc), ca-certificates (its Mozilla bundle concatenated into
# /etc/ssl/certs/ca-certificates.crt, as update-ca-certificates writes it),
# and /etc/passwd, /etc/group with root and nonroot (65532), /tmp (1777).
# Two layers: that base, then the binary and its artifacts; their entries
# sorted, owned by 0:0 with mtime 0, gzipped without names or times (a
# layer's bytes depend on its files alone).
#
# Needs: apt-get (Debian or Ubuntu sources that carry bookworm's packages;
# the versions used are printed and recorded as image labels), dpkg-deb, tar,
# gzip, sha256sum, python3; curl for --push.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BIN=$ROOT/target/release/trainforge
OUT=$ROOT/target/image
TAG=dev
PUSH=""
PLAIN_HTTP=0
CA_FILE=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --tag) TAG=$2; shift 2 ;;
    --push) PUSH=$2; shift 2 ;;
    --plain-http) PLAIN_HTTP=1; shift ;;
    --ca-file) CA_FILE=$2; shift 2 ;;
    *) echo "usage: $0 [--bin PATH] [--out DIR] [--tag TAG] [--push REGISTRY/REPO:TAG [--plain-http] [--ca-file PEM]]" >&2; exit 2 ;;
  esac
done
[[ -x $BIN ]] || { echo "image: $BIN is not an executable (build it: cargo build --release -p trainforge, or make image)" >&2; exit 1; }
for t in apt-get dpkg-deb tar gzip sha256sum python3; do
  command -v "$t" >/dev/null || { echo "image: '$t' is not on PATH" >&2; exit 1; }
done

PACKAGES=(libc6 libgcc-s1 ca-certificates)
DEBS=${TRAINFORGE_IMAGE_DEBS:-${XDG_CACHE_HOME:-$HOME/.cache}/trainforge/image-debs}
mkdir -p "$DEBS"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# ---- the base: Debian's packages ------------------------------------------
# apt-get download fetches the candidate version into the current directory;
# a cached .deb of that exact version is reused (the cache keeps every
# version it has seen; the newest is used when apt cannot answer).
deb_of() {
  local pkg=$1 version file
  version=$(apt-cache policy "$pkg" 2>/dev/null | sed -n 's/^ *Candidate: //p')
  if [[ -n $version && $version != "(none)" ]]; then
    file=$(ls "$DEBS/${pkg}_${version//:/%3a}_"*.deb 2>/dev/null | head -n1 || true)
    if [[ -z $file ]]; then
      (cd "$DEBS" && apt-get download "$pkg=$version" >&2) || true
      file=$(ls "$DEBS/${pkg}_${version//:/%3a}_"*.deb 2>/dev/null | head -n1 || true)
    fi
  fi
  if [[ -z ${file:-} ]]; then
    file=$(ls -v "$DEBS/${pkg}_"*.deb 2>/dev/null | tail -n1 || true)
  fi
  [[ -n $file ]] || { echo "image: cannot get the Debian package $pkg (apt-get download $pkg failed and $DEBS has none)" >&2; return 1; }
  echo "$file"
}

BASE=$WORK/base
mkdir -p "$BASE"
VERSIONS=()
for p in "${PACKAGES[@]}"; do
  deb=$(deb_of "$p")
  VERSIONS+=("$p=$(dpkg-deb -f "$deb" Version)")
  dpkg-deb -x "$deb" "$BASE"
done
echo "image: base from ${VERSIONS[*]}" >&2
# What a binary does not need at run time: docs, locales' gconv modules the
# operator never loads, the packages' maintainer scripts' helpers.
rm -rf "$BASE/usr/share/doc" "$BASE/usr/share/lintian" "$BASE/usr/share/man" \
  "$BASE/usr/sbin" "$BASE/usr/bin" "$BASE/sbin" "$BASE/bin" \
  "$BASE/usr/lib/x86_64-linux-gnu/gconv" "$BASE/usr/share/locale"
mkdir -p "$BASE/etc/ssl/certs" "$BASE/tmp" "$BASE/home/nonroot"
find "$BASE/usr/share/ca-certificates" -name '*.crt' | LC_ALL=C sort | xargs cat >"$BASE/etc/ssl/certs/ca-certificates.crt"
rm -rf "$BASE/usr/share/ca-certificates" "$BASE/etc/ca-certificates.conf"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$BASE/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$BASE/etc/group"
chmod 1777 "$BASE/tmp"
chmod 0755 "$BASE/home/nonroot"

# ---- the application: the binary and its precompiled builtins --------------
APP=$WORK/app
mkdir -p "$APP"
cp "$BIN" "$APP/trainforge"
chmod 0755 "$APP/trainforge"
"$APP/trainforge" plugin precompile --out "$APP/trainforge-artifacts" --progress none >/dev/null
chmod -R a+rX "$APP/trainforge-artifacts"

# ---- the OCI image layout ---------------------------------------------------
rm -rf "$OUT"
mkdir -p "$OUT/blobs/sha256"
# layer DIR -> prints "<diff_id> <digest> <size>" and stores the blob.
layer() {
  local dir=$1 tarball=$WORK/layer.tar diff digest
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --format=posix \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -C "$dir" -cf "$tarball" .
  diff=$(sha256sum "$tarball" | cut -d' ' -f1)
  gzip -n -1 -c "$tarball" >"$WORK/layer.tar.gz"
  digest=$(sha256sum "$WORK/layer.tar.gz" | cut -d' ' -f1)
  mv "$WORK/layer.tar.gz" "$OUT/blobs/sha256/$digest"
  rm -f "$tarball"
  echo "$diff $digest $(stat -c %s "$OUT/blobs/sha256/$digest")"
}
read -r BASE_DIFF BASE_DIGEST BASE_SIZE < <(layer "$BASE")
read -r APP_DIFF APP_DIGEST APP_SIZE < <(layer "$APP")
VERSION=$("$APP/trainforge" --version | awk '{print $2}')

python3 - "$OUT" "$TAG" "$VERSION" "${VERSIONS[*]}" \
  "$BASE_DIFF" "$BASE_DIGEST" "$BASE_SIZE" "$APP_DIFF" "$APP_DIGEST" "$APP_SIZE" <<'EOF'
import hashlib, json, os, sys
out, tag, version, debs, bd, bdg, bs, ad, adg, as_ = sys.argv[1:]
def blob(obj):
    data = json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(out, "blobs", "sha256", digest), "wb") as f:
        f.write(data)
    return digest, len(data)
labels = {
    "org.opencontainers.image.title": "trainforge",
    "org.opencontainers.image.version": version,
    "org.opencontainers.image.base.name": "debian bookworm packages: " + debs,
}
config = {
    "architecture": "amd64",
    "os": "linux",
    "config": {
        "User": "65532:65532",
        "Entrypoint": ["/trainforge"],
        "Cmd": ["operator"],
        "Env": ["PATH=/", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"],
        "ExposedPorts": {"8080/tcp": {}, "8081/tcp": {}},
        "WorkingDir": "/",
        "Labels": labels,
    },
    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + bd, "sha256:" + ad]},
    "history": [
        {"created_by": "testenv/image.sh: " + debs + ", passwd/group (nonroot 65532), /tmp"},
        {"created_by": "testenv/image.sh: /trainforge and /trainforge-artifacts (plugin precompile)"},
    ],
}
cd, cs = blob(config)
layer = "application/vnd.oci.image.layer.v1.tar+gzip"
manifest = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + cd, "size": cs},
    "layers": [
        {"mediaType": layer, "digest": "sha256:" + bdg, "size": int(bs)},
        {"mediaType": layer, "digest": "sha256:" + adg, "size": int(as_)},
    ],
    "annotations": labels,
}
md, ms = blob(manifest)
index = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [{
        "mediaType": manifest["mediaType"], "digest": "sha256:" + md, "size": ms,
        "platform": {"architecture": "amd64", "os": "linux"},
        "annotations": {"org.opencontainers.image.ref.name": tag},
    }],
}
with open(os.path.join(out, "index.json"), "w") as f:
    json.dump(index, f, indent=2)
with open(os.path.join(out, "oci-layout"), "w") as f:
    json.dump({"imageLayoutVersion": "1.0.0"}, f)
EOF

MANIFEST=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$OUT/index.json")
echo "image: $OUT (manifest $MANIFEST; layers $(numfmt --to=iec "$BASE_SIZE") + $(numfmt --to=iec "$APP_SIZE"))" >&2

# ---- push ---------------------------------------------------------------------
[[ -n $PUSH ]] || { echo "$MANIFEST"; exit 0; }
command -v curl >/dev/null || { echo "image: 'curl' is not on PATH (needed for --push)" >&2; exit 1; }
REGISTRY=${PUSH%%/*}
REST=${PUSH#*/}
REPO=${REST%:*}
REF=${REST##*:}
[[ $REST == *:* && -n $REPO && -n $REF ]] || { echo "image: --push wants REGISTRY/REPOSITORY:TAG, got $PUSH" >&2; exit 2; }
SCHEME=https
[[ $PLAIN_HTTP == 1 ]] && SCHEME=http
CURL=(curl -sS --fail-with-body)
[[ -n $CA_FILE ]] && CURL+=(--cacert "$CA_FILE")
[[ -n ${TRAINFORGE_REGISTRY_USER:-} ]] && CURL+=(-u "$TRAINFORGE_REGISTRY_USER:${TRAINFORGE_REGISTRY_PASSWORD:-}")
BASE_URL=$SCHEME://$REGISTRY/v2/$REPO
# push_blob DIGEST: skipped when the registry has it; else POST then PUT (monolithic).
push_blob() {
  local digest=$1 location
  if "${CURL[@]}" -o /dev/null -I "$BASE_URL/blobs/$digest" 2>/dev/null; then return; fi
  location=$("${CURL[@]}" -o /dev/null -D - -X POST "$BASE_URL/blobs/uploads/" |
    sed -n 's/^[Ll]ocation: *\(.*\)\r$/\1/p')
  [[ -n $location ]] || { echo "image: $REGISTRY gave no upload location for $digest" >&2; exit 1; }
  [[ $location == /* ]] && location=$SCHEME://$REGISTRY$location
  if [[ $location == *\?* ]]; then location="$location&digest=$digest"; else location="$location?digest=$digest"; fi
  "${CURL[@]}" -o /dev/null -X PUT -H 'Content-Type: application/octet-stream' \
    --data-binary "@$OUT/blobs/sha256/${digest#sha256:}" "$location"
}
for d in $(python3 -c '
import json, sys
m = json.load(open(sys.argv[1] + "/blobs/sha256/" + sys.argv[2][7:]))
print(" ".join([m["config"]["digest"]] + [l["digest"] for l in m["layers"]]))' "$OUT" "$MANIFEST"); do
  push_blob "$d"
done
"${CURL[@]}" -o /dev/null -X PUT -H 'Content-Type: application/vnd.oci.image.manifest.v1+json' \
  --data-binary "@$OUT/blobs/sha256/${MANIFEST#sha256:}" "$BASE_URL/manifests/$REF"
echo "image: pushed $PUSH ($MANIFEST)" >&2
echo "$REGISTRY/$REPO@$MANIFEST"
