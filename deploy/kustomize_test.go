package deploy

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// kustomizeBuild renders deploy/k8s as `kubectl kustomize deploy/k8s` (and
// `kubectl apply -k`) does, with kustomize's own library (the code kubectl
// embeds), so no kubectl is needed. It returns the documents by
// "Kind/name".
func kustomizeBuild(t *testing.T, sub ...string) map[string]map[string]any {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(append([]string{deployDir(t), "k8s"}, sub...)...))
	if err != nil {
		t.Fatalf("kustomize build deploy/k8s: %v", err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build deploy/k8s: %v", err)
	}
	docs := map[string]map[string]any{}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("kustomize output: %v", err)
		}
		kind, _ := doc["kind"].(string)
		name, _ := dig(t, doc, "metadata", "name").(string)
		docs[kind+"/"+name] = doc
	}
	return docs
}

// rendered returns one document of the kustomize output.
func rendered(t *testing.T, docs map[string]map[string]any, key string) map[string]any {
	t.Helper()
	doc, ok := docs[key]
	if !ok {
		keys := make([]string, 0, len(docs))
		for k := range docs {
			keys = append(keys, k)
		}
		t.Fatalf("kustomize output has no %s (has %v)", key, keys)
	}
	return doc
}

// TestKustomizeOutput: what `kubectl apply -k deploy/k8s` applies is the
// workers' objects in namespace foundryq, with the kustomization's image,
// and R3 streams on the three-node cluster of the Helm values.
func TestKustomizeOutput(t *testing.T) {
	docs := kustomizeBuild(t)
	for _, key := range []string{"Namespace/foundryq", "ServiceAccount/foundryq-worker", "Deployment/foundryq-worker", "PodDisruptionBudget/foundryq-worker", "ScaledObject/foundryq-worker"} {
		doc := rendered(t, docs, key)
		if key == "Namespace/foundryq" {
			continue
		}
		if ns := dig(t, doc, "metadata", "namespace"); ns != "foundryq" {
			t.Errorf("%s: namespace %v, want foundryq", key, ns)
		}
	}
	if len(docs) != 5 {
		t.Errorf("kustomize output has %d objects, want 5 (secret.example.yaml stays out)", len(docs))
	}
	container := workerContainer(t, rendered(t, docs, "Deployment/foundryq-worker"))
	if img := container["image"]; img != "foundryq:dev" {
		t.Errorf("worker image %v, want foundryq:dev (kustomization.yaml images)", img)
	}
	env := envValues(container)
	replicas, err := strconv.Atoi(env["FOUNDRYQ_REPLICAS"])
	if err != nil || replicas != 3 {
		t.Fatalf("FOUNDRYQ_REPLICAS %q, want 3: R3 streams and bucket on the three-node cluster", env["FOUNDRYQ_REPLICAS"])
	}

	// The official chart's cluster settings: replicas >= the streams'
	// replicas, JetStream on file storage on persistent volumes.
	values := readYAML(t, "nats-values.yaml")
	if dig(t, values, "config", "cluster", "enabled") != true {
		t.Error("nats-values.yaml: config.cluster.enabled is not true")
	}
	if n, _ := dig(t, values, "config", "cluster", "replicas").(int); n < replicas || n%2 == 0 {
		t.Errorf("nats-values.yaml: config.cluster.replicas %d, want an odd number >= FOUNDRYQ_REPLICAS (%d)", n, replicas)
	}
	if dig(t, values, "config", "jetstream", "enabled") != true ||
		dig(t, values, "config", "jetstream", "fileStore", "enabled") != true ||
		dig(t, values, "config", "jetstream", "fileStore", "pvc", "enabled") != true {
		t.Error("nats-values.yaml: want config.jetstream.enabled, fileStore.enabled and fileStore.pvc.enabled (file storage that outlives a pod)")
	}
	if dig(t, values, "podTemplate", "topologySpreadConstraints", "kubernetes.io/hostname", "whenUnsatisfiable") != "DoNotSchedule" {
		t.Error("nats-values.yaml: the NATS pods must be spread one per node (a node's loss keeps the quorum)")
	}
}

// workerContainer is the first container of a Deployment.
func workerContainer(t *testing.T, deployment map[string]any) map[string]any {
	t.Helper()
	containers, ok := dig(t, deployment, "spec", "template", "spec", "containers").([]any)
	if !ok || len(containers) == 0 {
		t.Fatal("the Deployment has no container")
	}
	return containers[0].(map[string]any)
}

// envValues are a container's env entries that have a literal value.
func envValues(container map[string]any) map[string]string {
	env := map[string]string{}
	list, _ := container["env"].([]any)
	for _, e := range list {
		m, _ := e.(map[string]any)
		if v, ok := m["value"].(string); ok {
			env[m["name"].(string)] = v
		}
	}
	return env
}

// TestNATSNetworkPolicy: kubectl apply -k deploy/k8s/nats-network admits
// to the NATS pods only the foundryq pods and the tool servers (pods and
// namespace labelled for it) on 4222, the other NATS pods on
// 6222 and KEDA on 8222: no rule lets everyone in, no other port is open.
func TestNATSNetworkPolicy(t *testing.T) {
	docs := kustomizeBuild(t, "nats-network")
	if len(docs) != 1 {
		t.Fatalf("nats-network renders %d objects, want the NetworkPolicy", len(docs))
	}
	np := rendered(t, docs, "NetworkPolicy/nats")
	if ns := dig(t, np, "metadata", "namespace"); ns != "nats" {
		t.Errorf("namespace %v, want nats (where nats-values.yaml installs NATS)", ns)
	}
	if sel := dig(t, np, "spec", "podSelector", "matchLabels", "app.kubernetes.io/name"); sel != "nats" {
		t.Errorf("podSelector %v, want the NATS pods", sel)
	}
	want := map[int]string{
		4222: `[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"foundryq"}},"podSelector":{"matchExpressions":[{"key":"app.kubernetes.io/name","operator":"In","values":["foundryq-worker","foundryq-gateway"]}]}},` +
			`{"namespaceSelector":{"matchLabels":{"foundryq.io/tools":"enabled"}},"podSelector":{"matchLabels":{"foundryq.io/nats-role":"tools"}}}]`,
		6222: `[{"podSelector":{"matchLabels":{"app.kubernetes.io/name":"nats"}}}]`,
		8222: `[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"keda"}}}]`,
	}
	rules := dig(t, np, "spec", "ingress").([]any)
	seen := map[int]bool{}
	for _, r := range rules {
		rule := r.(map[string]any)
		from, ok := rule["from"]
		if !ok {
			t.Fatalf("an ingress rule without from admits every source: %v", rule)
		}
		ports, _ := rule["ports"].([]any)
		if len(ports) == 0 {
			t.Fatalf("an ingress rule without ports admits every port: %v", rule)
		}
		for _, p := range ports {
			port, _ := strconv.Atoi(jsonNumber(p.(map[string]any)["port"]))
			w, ok := want[port]
			if !ok {
				t.Errorf("port %d admitted", port)
				continue
			}
			if got := strings.TrimSpace(canonical(t, from)); got != w {
				t.Errorf("port %d admits %s, want %s", port, got, w)
			}
			seen[port] = true
		}
	}
	for port := range want {
		if !seen[port] {
			t.Errorf("no rule for port %d", port)
		}
	}
	// The worker pods carry the label the policy admits.
	worker := rendered(t, kustomizeBuild(t), "Deployment/foundryq-worker")
	if l := dig(t, worker, "spec", "template", "metadata", "labels", "app.kubernetes.io/name"); l != "foundryq-worker" {
		t.Errorf("worker pods labelled %v, not admitted by the policy", l)
	}
}
