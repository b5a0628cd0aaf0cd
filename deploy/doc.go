// Package deploy holds foundryq's deployment files and the tests that run
// them in containers. It has no Go API: the package exists so that
// `go test ./...` includes the container tests.
//
// Files:
//
//	Dockerfile             foundryq image, FROM scratch (binary built by build-images.sh)
//	nats/Dockerfile        nats-server image, FROM scratch
//	nats/nats-server.conf  NATS with JetStream, monitoring and the worker, client, gateway and tools users
//	nats/nats-server-tls.conf  the same with mutual TLS and an encrypted store
//	nats/tenants.conf      an account per team, each with its worker, client, gateway and tools users
//	nats/dev.conf          NATS with JetStream and no authentication (docker-compose.yml)
//	nats/cluster.conf      a node of a three-node cluster: routes over mutual TLS with a password
//	nats/routecerts        go run ./deploy/nats/routecerts -dir DIR: the route TLS files
//	compose.cluster.yml    the three-node cluster, the emulator and three workers
//	build-images.sh        builds the static binaries and both images locally
//	k8s/                   worker Deployment, KEDA ScaledObject, Helm values for NATS
//
// The permissions, TLS and tenants tests run those configs in process (no
// Docker) with real workers and check each role's rights both ways.
//
// The container tests build both images FROM scratch with build-images.sh
// (no registry is needed), start NATS, the Foundry emulator and two workers
// on one Docker network, and drive runs from the test process as the
// "client" NATS user. They skip when no Docker engine answers, unless
// FOUNDRYQ_REQUIRE_DOCKER=1, and are skipped by go test -short.
package deploy
