#!/usr/bin/env bash
# Start foundryq's development stack (docker-compose.yml: NATS, the Foundry
# emulator, two workers, the gateway and its console) from a clone: build the
# images here with deploy/build-images.sh (Go and Docker; nothing is pulled),
# then compose up -d.
#
#   deploy/up.sh                 build the images, start the stack
#   deploy/up.sh down            stop it (down -v also drops the JetStream volume)
#   deploy/up.sh ARGS...         any other Compose command on the stack: ps, logs -f worker-1, stop worker-1
#
# Uses `docker compose` (Compose v2) if there is one, else `docker-compose`
# (v1). Settings (environment):
#   COMPOSE_PROJECT_NAME   the Compose project (default foundryq)
#   FOUNDRYQ_IMAGE_TAG     the images' tag (default dev); FOUNDRYQ_IMAGE_PREFIX as for build-images.sh
#   FOUNDRYQ_COMPOSE_*     the host ports and the gateway's tokens (the top of docker-compose.yml)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
export FOUNDRYQ_IMAGE_TAG=${FOUNDRYQ_IMAGE_TAG:-dev}
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-foundryq}

if docker compose version >/dev/null 2>&1; then
  compose_cmd=(docker compose)
elif docker-compose version >/dev/null 2>&1; then
  compose_cmd=(docker-compose)
else
  echo "up.sh: needs Docker Compose: the docker compose plugin (v2) or docker-compose (v1); neither answers" >&2
  exit 1
fi

compose() { "${compose_cmd[@]}" -f "$root/docker-compose.yml" "$@"; }

if [ $# -gt 0 ]; then
  compose "$@"
  exit
fi

# build-images.sh prints the images' names last, on stdout.
bash "$root/deploy/build-images.sh" >&2
compose up -d

# Where each service answers, as Compose published it (127.0.0.1:PORT).
published() { compose port "$1" "$2" 2>/dev/null | tail -n 1; }
token="foundryq-dev"
[ -z "${FOUNDRYQ_COMPOSE_GATEWAY_TOKENS:-}" ] || token="one of FOUNDRYQ_COMPOSE_GATEWAY_TOKENS"
cat <<EOF

foundryq is starting (project $COMPOSE_PROJECT_NAME; development only: NATS has no authentication).
  console and HTTP API  http://$(published gateway 8080)/   bearer token: $token
  NATS                  nats://$(published nats 4222)
  NATS monitoring       http://$(published nats 8222)/jsz
  emulator              http://$(published emulator 8089)/_emulator/stats
  worker metrics        http://$(published worker-1 9090)/metrics, http://$(published worker-2 9090)/metrics
  try:  go run ./cmd/foundryq submit --nats-url nats://$(published nats 4222) --model m --input hi --watch
  stop: deploy/up.sh down
EOF
