#!/usr/bin/env bash
# Build the foundryq and NATS images locally, FROM scratch, from static Go
# binaries built here. Needs only Go and Docker: no base image is pulled and
# no BuildKit frontend either (the classic builder is used).
#
#   bash deploy/build-images.sh            # foundryq:dev and foundryq-nats:dev
#   FOUNDRYQ_IMAGE_TAG=v1 FOUNDRYQ_IMAGE_PREFIX=myacr.azurecr.io/ bash deploy/build-images.sh
#
# deploy/up.sh runs it, then starts docker-compose.yml with the images.
#
# Settings (environment):
#   FOUNDRYQ_IMAGE_TAG     image tag (default dev)
#   FOUNDRYQ_IMAGE_PREFIX  registry/namespace prefix, with its trailing slash (default none)
#   GOARCH                 target architecture (default: the Docker engine's)
#   CA_BUNDLE              CA certificates copied into the images (default: the host's)
#
# The last lines of output name the two images, one per line.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tag=${FOUNDRYQ_IMAGE_TAG:-dev}
prefix=${FOUNDRYQ_IMAGE_PREFIX:-}
app_image="${prefix}foundryq:${tag}"
nats_image="${prefix}foundryq-nats:${tag}"

command -v go >/dev/null || { echo "build-images: go is not on PATH" >&2; exit 1; }
command -v docker >/dev/null || { echo "build-images: docker is not on PATH" >&2; exit 1; }

# Build for the engine's architecture (e.g. arm64 on Apple silicon).
if [ -z "${GOARCH:-}" ]; then
  GOARCH=$(docker version --format '{{.Server.Arch}}' 2>/dev/null || true)
  [ -n "$GOARCH" ] || { echo "build-images: cannot reach the Docker engine (docker version)" >&2; exit 1; }
fi
export GOOS=linux GOARCH CGO_ENABLED=0

# A CA bundle for HTTPS from inside the images (Foundry, Entra ID).
if [ -z "${CA_BUNDLE:-}" ]; then
  for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem /etc/ssl/ca-bundle.pem; do
    if [ -s "$f" ]; then CA_BUNDLE=$f; break; fi
  done
fi

ctx=$(mktemp -d "${TMPDIR:-/tmp}/foundryq-images.XXXXXX")
trap 'rm -rf "$ctx"' EXIT

# rootfs and writable dirs (owned by 65534 in the image) of a context;
# extra arguments name more writable dirs.
layout() {
  local d=$1; shift
  mkdir -p "$d/rootfs/etc/ssl/certs" "$d/writable/tmp"
  for w in "$@"; do mkdir -p "$d/writable/$w" && chmod 0750 "$d/writable/$w"; done
  printf 'root:x:0:0:root:/:/sbin/nologin\nnobody:x:65534:65534:nobody:/tmp:/sbin/nologin\n' >"$d/rootfs/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\n' >"$d/rootfs/etc/group"
  if [ -n "${CA_BUNDLE:-}" ]; then
    cp "$CA_BUNDLE" "$d/rootfs/etc/ssl/certs/ca-certificates.crt"
  else
    echo "build-images: warning: no CA bundle found (set CA_BUNDLE); HTTPS from the images will fail" >&2
    : >"$d/rootfs/etc/ssl/certs/ca-certificates.crt"
  fi
  chmod 1777 "$d/writable/tmp"
}

build_flags=(-trimpath -ldflags='-s -w')
cd "$root"

echo "build-images: go build ./cmd/foundryq ($GOOS/$GOARCH)" >&2
layout "$ctx/foundryq"
go build "${build_flags[@]}" -o "$ctx/foundryq/foundryq" ./cmd/foundryq
cp deploy/Dockerfile "$ctx/foundryq/Dockerfile"

echo "build-images: go build github.com/nats-io/nats-server/v2 ($GOOS/$GOARCH)" >&2
layout "$ctx/nats" data
go build "${build_flags[@]}" -o "$ctx/nats/nats-server" github.com/nats-io/nats-server/v2
go build "${build_flags[@]}" -o "$ctx/nats/nats-guard" ./deploy/nats/guard
cp deploy/nats/Dockerfile deploy/nats/*.conf "$ctx/nats/"

# DOCKER_BUILDKIT=0: the classic builder never pulls anything for FROM scratch.
echo "build-images: docker build $app_image" >&2
DOCKER_BUILDKIT=0 docker build --quiet -t "$app_image" "$ctx/foundryq" >&2
echo "build-images: docker build $nats_image" >&2
DOCKER_BUILDKIT=0 docker build --quiet -t "$nats_image" "$ctx/nats" >&2

echo "$app_image"
echo "$nats_image"
