// Package testinstall installs the project's components in a test cluster
// the way docs/admin.md tells a cluster admin to: the images built by
// componentimage and published under a versioned tag, manifests/default
// and manifests/scheduler applied with `kubectl apply -k` through an
// overlay that names those images (kustomize's images:) and sets what the
// cluster needs, and `kubectl delete -k` to uninstall, checking that
// nothing the manifests made is left.
package testinstall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/internal/componentimage"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
)

// Options of an installation.
type Options struct {
	// Kubectl is kubectl's path; Kubeconfig the cluster's.
	Kubectl, Kubeconfig string
	// Registry is where the nodes pull the images from, host[:port][/path]:
	// each is published as Registry/COMMAND:Version by Publish. Version is
	// v0.0.0-e2e.UNIXTIME when empty, a tag no earlier install used;
	// Publish pushes to the registry (componentimage.Push) when nil.
	Registry, Version string
	Publish           func(ctx context.Context, ref string, img v1.Image) error
	// AllowedRegistries are what PrepullJobs may pull from (the
	// ConfigMap asrl-prepull-agent's allowed-registries): when empty,
	// docker.io/sandbox-fleet, where the e2e tests push their images.
	AllowedRegistries string
	// WebhookClientCA is the CA file of the client certificate the API
	// server presents to webhooks, and WebhookClientName its common name:
	// the overlay makes the ConfigMap asrl-webhook-client-ca of them, as
	// docs/admin.md has an admin do. Where the API server presents none,
	// WebhookCallersCIDR is its addresses instead, and the overlay adds
	// manifests/webhook-network-policy with it.
	WebhookClientCA, WebhookClientName string
	WebhookCallersCIDR                 string
	// Patches are kustomize patches (the text of a patches: entry's
	// patch, with its target) the cluster needs beyond those.
	Patches []Patch
	// Dir holds the overlay.
	Dir string
}

// Patch is one entry of the overlay's patches.
type Patch struct {
	Kind, Name, Patch string
}

// Installation is the installed components.
type Installation struct {
	o Options
	// Objects are what the overlay renders, as applied.
	Objects []unstructured.Unstructured
	// undo reverts what was done to the cluster beside the overlay (a
	// node labelled), after the uninstall.
	undo func(context.Context) error
}

// Install publishes the images and applies the overlay, then waits until
// the webhook, the agent and the scheduler roll out.
func Install(ctx context.Context, o Options) (*Installation, error) {
	root, err := testcluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	if o.Version == "" {
		o.Version = "v0.0.0-e2e." + strconv.FormatInt(time.Now().Unix(), 10)
	}
	if o.Publish == nil {
		o.Publish = componentimage.Push
	}
	if o.AllowedRegistries == "" {
		o.AllowedRegistries = "docker.io/sandbox-fleet"
	}
	var images strings.Builder
	for _, cmd := range componentimage.Commands {
		img, err := componentimage.Build(componentimage.Options{Root: root, Command: cmd})
		if err != nil {
			return nil, err
		}
		if err := o.Publish(ctx, o.Registry+"/"+cmd+":"+o.Version, img); err != nil {
			return nil, err
		}
		fmt.Fprintf(&images, "- {name: ghcr.io/sandbox-fleet/%s, newName: %s/%s, newTag: %q}\n", cmd, o.Registry, cmd, o.Version)
	}
	var resources []string
	for _, m := range []string{"default", "scheduler"} {
		// kustomize takes resources by relative path only.
		rel, err := filepath.Rel(o.Dir, filepath.Join(root, "manifests", m))
		if err != nil {
			return nil, err
		}
		resources = append(resources, rel)
	}
	patches := append([]Patch{{Kind: "ConfigMap", Name: "asrl-prepull-agent", Patch: fmt.Sprintf(
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: asrl-prepull-agent}\ndata:\n  allowed-registries: %q\n", o.AllowedRegistries)}}, o.Patches...)
	var kustomization strings.Builder
	fmt.Fprintf(&kustomization, "resources: [%s]\nimages:\n%s", strings.Join(resources, ", "), images.String())
	switch {
	case o.WebhookClientCA != "":
		ca, err := os.ReadFile(o.WebhookClientCA)
		if err != nil {
			return nil, err
		}
		// kustomize reads files only from the overlay's directory.
		if err := os.WriteFile(filepath.Join(o.Dir, "webhook-client-ca.crt"), ca, 0o644); err != nil {
			return nil, err
		}
		fmt.Fprintf(&kustomization, "configMapGenerator:\n- name: asrl-webhook-client-ca\n  namespace: sandbox-fleet-system\n"+
			"  files: [ca.crt=webhook-client-ca.crt]\n  literals: [client-names=%s]\n", o.WebhookClientName)
	case o.WebhookCallersCIDR != "":
		rel, err := filepath.Rel(o.Dir, filepath.Join(root, "manifests", "webhook-network-policy"))
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&kustomization, "components: [%s]\n", rel)
		patches = append(patches, Patch{Kind: "NetworkPolicy", Name: "asrl-webhook",
			Patch: fmt.Sprintf("- {op: replace, path: /spec/ingress/0/from/0/ipBlock/cidr, value: %s}", o.WebhookCallersCIDR)})
	}
	kustomization.WriteString("patches:\n")
	for _, p := range patches {
		fmt.Fprintf(&kustomization, "- target: {kind: %s, name: %s}\n  patch: |-\n", p.Kind, p.Name)
		for _, line := range strings.Split(strings.TrimRight(p.Patch, "\n"), "\n") {
			fmt.Fprintf(&kustomization, "    %s\n", line)
		}
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "kustomization.yaml"), []byte(kustomization.String()), 0o644); err != nil {
		return nil, err
	}
	in := &Installation{o: o}
	rendered, err := in.kubectl(ctx, "kustomize", o.Dir)
	if err != nil {
		return nil, err
	}
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendered), 4096)
	for {
		obj := unstructured.Unstructured{}
		if err := decoder.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("reading the rendered overlay: %w", err)
		}
		if len(obj.Object) > 0 {
			in.Objects = append(in.Objects, obj)
		}
	}
	// What an apply that failed in part made is the caller's to uninstall.
	if _, err := in.kubectl(ctx, "apply", "-k", o.Dir); err != nil {
		return in, err
	}
	for _, w := range []struct{ ns, what string }{
		{"sandbox-fleet-system", "deployment/asrl-webhook"},
		{"sandbox-fleet-agent", "daemonset/asrl-prepull-agent"},
		{"kube-system", "deployment/asrl-scheduler"},
	} {
		if _, err := in.kubectl(ctx, "-n", w.ns, "rollout", "status", w.what, "--timeout=4m"); err != nil {
			return in, fmt.Errorf("%w\n%s", err, in.describe(ctx, w.ns))
		}
	}
	return in, nil
}

// Uninstall deletes what the overlay made, as `kubectl delete -k` does,
// reports each object still there, and reverts what the install did
// beside it.
func (in *Installation) Uninstall(ctx context.Context) error {
	err := in.delete(ctx)
	if in.undo != nil {
		err = errors.Join(err, in.undo(ctx))
	}
	return err
}

func (in *Installation) delete(ctx context.Context) error {
	if _, err := in.kubectl(ctx, "delete", "-k", in.o.Dir, "--wait=true", "--timeout=4m", "--ignore-not-found"); err != nil {
		return err
	}
	var left []string
	for _, obj := range in.Objects {
		args := []string{"get", strings.ToLower(obj.GetKind()) + "." + obj.GroupVersionKind().Group, obj.GetName(), "--ignore-not-found", "-o", "name"}
		if ns := obj.GetNamespace(); ns != "" {
			args = append(args, "-n", ns)
		}
		out, err := in.kubectl(ctx, args...)
		if err != nil {
			return err
		}
		if s := strings.TrimSpace(string(out)); s != "" {
			left = append(left, s)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("kubectl delete -k left %s", strings.Join(left, ", "))
	}
	return nil
}

// describe is what a failed rollout in ns shows of its Pods.
func (in *Installation) describe(ctx context.Context, ns string) string {
	out, _ := in.kubectl(ctx, "-n", ns, "describe", "pods")
	logs, _ := in.kubectl(ctx, "-n", ns, "logs", "--all-containers", "--tail=30", "-l", "app.kubernetes.io/part-of=sandbox-fleet")
	return string(out) + "\n" + string(logs)
}

func (in *Installation) kubectl(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, in.o.Kubectl, append([]string{"--kubeconfig", in.o.Kubeconfig}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return out, nil
}

// SandboxNodeLabel marks the nodes sandboxes run on, where the agent's
// DaemonSet runs (manifests/prepull-agent's node selector).
const SandboxNodeLabel = "sandbox-fleet.io/sandbox-node"

// OnRealNode installs the components in the local test cluster c, whose
// real node it labels as a sandbox node (Uninstall takes the label off),
// as the deploy test and `localcluster -install` do: the images pushed to
// the node's registry, and the agent pointed at the node's runtime socket,
// containerd root (at its own path, where the runtime says its images
// are) and a state directory in the cluster's, not at the usual host
// paths; PrepullJobs may pull from allowedRegistries (Options'
// AllowedRegistries: "" is the default).
// The overlay is written in dir.
func OnRealNode(ctx context.Context, c *testcluster.Cluster, kubectl, dir, allowedRegistries string) (*Installation, error) {
	clients, err := c.Clients("")
	if err != nil {
		return nil, err
	}
	label := func(ctx context.Context, value string) error {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.RealNodeName()}}
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, SandboxNodeLabel, value)
		return clients.Client.Patch(ctx, node, client.RawPatch(types.MergePatchType, []byte(patch)))
	}
	if err := label(ctx, `"true"`); err != nil {
		return nil, err
	}
	agentPatch := fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata: {name: asrl-prepull-agent}
spec:
  template:
    spec:
      containers:
      - name: agent
        volumeMounts:
        - {name: image-fs, mountPath: %[2]q, readOnly: true}
      volumes:
      - name: runtime-socket
        hostPath: {path: %[1]q, type: Socket}
      - name: image-fs
        hostPath: {path: %[2]q, type: Directory}
      - name: agent-dir
        hostPath: {path: %[3]q, type: DirectoryOrCreate}
`, c.CRISocket(), c.ContainerdRoot(), filepath.Join(c.Dir(), "prepull-agent"))
	_, _, ca := c.WebhookClient()
	in, err := Install(ctx, Options{
		Kubectl: kubectl, Kubeconfig: c.Kubeconfig(), Registry: c.RegistryAddr() + "/sandbox-fleet",
		WebhookClientCA: ca, WebhookClientName: testcluster.WebhookClientName, AllowedRegistries: allowedRegistries,
		Patches: []Patch{{Kind: "DaemonSet", Name: "asrl-prepull-agent", Patch: agentPatch}},
		Dir:     dir,
	})
	unlabel := func(ctx context.Context) error { return label(ctx, "null") }
	if in == nil {
		return nil, errors.Join(err, unlabel(ctx))
	}
	in.undo = unlabel
	return in, err
}
