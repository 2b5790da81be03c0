package agent_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcri"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

const agentNamespace, agentAccount = "sandbox-fleet-agent", "asrl-prepull-agent"

// sandboxNodeLabel marks the nodes the shipped DaemonSet runs on.
const sandboxNodeLabel = "sandbox-fleet.io/sandbox-node"

// applyAgentManifests labels nodes as sandbox nodes, undone when the test
// ends, and applies manifests/prepull-agent, as an admin does, once for
// the package: the cluster goes with it. (Deleting and re-applying them
// leaves the API server unable to find the re-created ConfigMap that the
// asrl-prepull-jobs binding reads as its params, in this version.)
func applyAgentManifests(t *testing.T, admin client.Client, nodes ...string) {
	t.Helper()
	for _, name := range nodes {
		label := func(value any) error {
			patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, sandboxNodeLabel, value)
			return admin.Patch(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch(types.MergePatchType, []byte(patch)))
		}
		if err := label(`"true"`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := label("null"); err != nil {
				t.Error(err)
			}
		})
	}
	applied.Do(func() {
		bin, err := testcluster.BinDir()
		if err == nil {
			var out []byte
			out, err = exec.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", cluster.Kubeconfig(), "apply", "-k", "../../../manifests/prepull-agent").CombinedOutput()
			if err != nil {
				err = fmt.Errorf("kubectl apply -k manifests/prepull-agent: %w\n%s", err, out)
			}
		}
		appliedErr = err
	})
	if appliedErr != nil {
		t.Fatal(appliedErr)
	}
}

var (
	applied    sync.Once
	appliedErr error
)

// shipped is the agent as manifests/prepull-agent installs it.
var shipped = install{agentNamespace, agentAccount}

// install is where an agent's DaemonSet and ServiceAccount are.
type install struct{ namespace, account string }

// agentConfig is a client configuration with the token of the DaemonSet's
// Pod on node, as the agent there has it: bound to that Pod, so naming
// its node.
func agentConfig(t *testing.T, admin client.Client, node string) *rest.Config {
	return shipped.agentConfig(t, admin, node)
}

func (in install) agentConfig(t *testing.T, admin client.Client, node string) *rest.Config {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var pod *corev1.Pod
	for pod == nil {
		pods := &corev1.PodList{}
		if err := admin.List(ctx, pods, client.InNamespace(in.namespace)); err != nil {
			t.Fatal(err)
		}
		for i := range pods.Items {
			if pods.Items[i].Spec.NodeName == node {
				pod = &pods.Items[i]
			}
		}
		if pod == nil {
			if ctx.Err() != nil {
				t.Fatalf("the DaemonSet has no Pod on %s", node)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(600)),
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}
	return in.tokenConfig(t, admin, req)
}

// tokenConfig is a client configuration with a token of the agent's
// service account.
func tokenConfig(t *testing.T, admin client.Client, req *authenticationv1.TokenRequest) *rest.Config {
	return shipped.tokenConfig(t, admin, req)
}

func (in install) tokenConfig(t *testing.T, admin client.Client, req *authenticationv1.TokenRequest) *rest.Config {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: in.namespace, Name: in.account}}
	if err := admin.SubResource("token").Create(context.Background(), sa, req); err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(cluster.RESTConfig())
	cfg.BearerToken = req.Status.Token
	return cfg
}

// asClient is a client with the identity of cfg.
func asClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	clients, err := kube.ForConfig(cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	return clients.Client
}

// An agent writes its own node's NodeImageCache and no other's.
func TestAgentWritesOnlyItsNode(t *testing.T) {
	admin := clusterClient(t)
	nodes := []string{"kwok-node-0", "kwok-node-1"}
	applyAgentManifests(t, admin, nodes...)
	for _, n := range nodes {
		t.Cleanup(func() {
			_ = admin.Delete(context.Background(), &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: n}})
		})
	}
	configs := []*rest.Config{agentConfig(t, admin, nodes[0]), agentConfig(t, admin, nodes[1])}
	agents := []client.Client{asClient(t, configs[0]), asClient(t, configs[1])}

	// The API server puts a new policy in force a moment after it is
	// created; a dry run tells when.
	ctx := context.Background()
	other := &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: nodes[1]}}
	for deadline := time.Now().Add(30 * time.Second); ; {
		err := agents[0].Create(ctx, other.DeepCopy(), client.DryRunAll)
		if apierrors.IsForbidden(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admission policy is not in force after 30 s: a dry run of another node's object gave %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The agent of node 0 runs with its Pod's identity: the manifests'
	// RBAC is all it needs.
	rt, err := testcri.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Stop()
	rt.Add(testcri.SWEBench(2)...)
	startAgent(t, configs[0], nodes[0], rt.Endpoint)
	waitFor(t, admin, nodes[0], 20*time.Second, "published by its agent", func(c *v1alpha1.NodeImageCache) bool { return c.ImageCount == 2 })

	denied := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "the asrl-prepull-agent of node kwok-node-0 may write only NodeImageCache kwok-node-0, not kwok-node-1") {
			t.Errorf("%s: %v, want it forbidden naming both nodes", what, err)
		}
	}
	denied("creating another node's object", agents[0].Create(ctx, other.DeepCopy()))
	if err := agents[1].Create(ctx, other); err != nil {
		t.Fatalf("the agent of %s creating its own object: %v", nodes[1], err)
	}
	other.AgentVersion = "forged"
	denied("updating another node's object", agents[0].Update(ctx, other))

	// In a PrepullJob's status, an agent writes its own node's entry only.
	// The TTL is long: the running agent of node 0 must not delete it.
	job := &v1alpha1.PrepullJob{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.NewNamespace(t), Name: "job"},
		Spec: v1alpha1.PrepullJobSpec{Images: []string{"docker.io/library/busybox:1.36"}, NodeSelector: map[string]string{"selects": "nothing"},
			TTLSecondsAfterFinished: new(int32(3600))}}
	allowRegistries(t, admin, "docker.io/library", job)
	if err := admin.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	phase := v1alpha1.PrepullPulling
	progress := func(agent client.Client, node string, opts ...client.SubResourcePatchOption) error {
		entry := fmt.Sprintf(`{"apiVersion":"sandbox-fleet.io/v1alpha1","kind":"PrepullJob","metadata":{"name":%q,"namespace":%q},`+
			`"status":{"nodes":[{"node":%q,"phase":%q,"pulled":0,"present":0,"failed":0,"pending":1,"updateTime":%q}]}}`,
			job.Name, job.Namespace, node, phase, time.Now().UTC().Format(time.RFC3339Nano))
		return agent.Status().Patch(ctx, job.DeepCopy(), client.RawPatch(types.ApplyPatchType, []byte(entry)),
			append(opts, client.FieldOwner("asrl-prepull-agent-"+node), client.ForceOwnership)...)
	}
	for deadline := time.Now().Add(30 * time.Second); !apierrors.IsForbidden(progress(agents[0], nodes[1], client.DryRunAll)); {
		if time.Now().After(deadline) {
			t.Fatal("the progress policy is not in force after 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i, node := range nodes {
		if err := progress(agents[i], node); err != nil {
			t.Errorf("the agent of %s writing its own progress: %v", node, err)
		}
	}
	time.Sleep(time.Second) // a later updateTime: a change
	if err := progress(agents[0], nodes[1]); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may write only its own node's entry") {
		t.Errorf("the agent of %s writing %s's progress: %v, want it forbidden", nodes[0], nodes[1], err)
	}

	// An agent deletes a job only once every node finished it, its own
	// among them (its TTL having passed is the agent's to check).
	for deadline := time.Now().Add(30 * time.Second); ; {
		err := agents[0].Delete(ctx, job.DeepCopy(), client.DryRunAll)
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "may delete only PrepullJobs with a ttlSecondsAfterFinished") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deleting a job still pulling: %v after 30 s, want it forbidden by the finished-jobs policy", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	phase = v1alpha1.PrepullSucceeded
	for i, node := range nodes {
		if err := progress(agents[i], node); err != nil {
			t.Errorf("the agent of %s finishing: %v", node, err)
		}
	}
	if err := agents[0].Delete(ctx, job.DeepCopy()); err != nil {
		t.Errorf("the agent of %s deleting a job every node finished: %v", nodes[0], err)
	}

	// A token of the agent's account bound to no Pod names no node.
	unbound := asClient(t, tokenConfig(t, admin, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(600))}}))
	current := &v1alpha1.NodeImageCache{}
	if err := admin.Get(ctx, client.ObjectKey{Name: nodes[0]}, current); err != nil {
		t.Fatal(err)
	}
	current.AgentVersion = "forged"
	if err := unbound.Update(ctx, current); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "this token names no node") {
		t.Errorf("updating with a token bound to no Pod: %v, want it forbidden", err)
	}
}

// Installed by an overlay under another namespace (and name prefix, to
// stand beside the shipped install), the agent's admission policies
// follow it: its agent still writes only its own node's object.
func TestAgentUnderAnotherNamespace(t *testing.T) {
	admin := clusterClient(t)
	nodes := []string{"kwok-node-0", "kwok-node-1"}
	applyAgentManifests(t, admin, nodes...)
	moved := install{"moved-agent", "moved-asrl-prepull-agent"}
	overlay := t.TempDir()
	abs, err := filepath.Abs("../../../manifests/prepull-agent")
	if err != nil {
		t.Fatal(err)
	}
	base, err := filepath.Rel(overlay, abs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"),
		fmt.Appendf(nil, "namespace: %s\nnamePrefix: moved-\nresources: [%s]\n", moved.namespace, base), 0o644); err != nil {
		t.Fatal(err)
	}
	bin, err := testcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) error {
		out, err := exec.Command(filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", cluster.Kubeconfig()}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := kubectl("apply", "-k", overlay); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := kubectl("delete", "-k", overlay, "--wait=false"); err != nil {
			t.Error(err)
		}
	})
	for _, n := range nodes {
		t.Cleanup(func() {
			_ = admin.Delete(context.Background(), &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: n}})
		})
	}
	agent := asClient(t, moved.agentConfig(t, admin, nodes[0]))
	ctx := context.Background()
	other := &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: nodes[1]}}
	var last error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		last = agent.Create(ctx, other.DeepCopy(), client.DryRunAll)
		if apierrors.IsForbidden(last) && strings.Contains(last.Error(), "the asrl-prepull-agent of node kwok-node-0 may write only NodeImageCache kwok-node-0, not kwok-node-1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the moved agent creating another node's object: %v after 30 s, want it forbidden by the own-node policy", last)
		}
	}
	own := &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: nodes[0]}}
	if err := agent.Create(ctx, own, client.DryRunAll); err != nil {
		t.Errorf("the moved agent creating its own node's object: %v", err)
	}
}

// allowRegistries sets the registries the agents may pull from, as an
// admin does in the shipped ConfigMap, and waits until the admission
// policy lets job, if any, be created (a dry run).
func allowRegistries(t *testing.T, admin client.Client, registries string, job *v1alpha1.PrepullJob) {
	t.Helper()
	ctx := context.Background()
	patch := fmt.Sprintf(`{"data":{"allowed-registries":%q}}`, registries)
	limits := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: "asrl-prepull-agent"}}
	if err := admin.Patch(ctx, limits, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	if job == nil {
		return
	}
	var err error
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = admin.Create(ctx, job.DeepCopy(), client.DryRunAll); err == nil {
			return
		}
	}
	t.Fatalf("with %s allowed, PrepullJob %s is still refused after 2 min: %v", registries, job.Name, err)
}

// What a PrepullJob may ask for is the admin's: the registries and the
// disk high water of the shipped ConfigMap, checked when a job is made;
// and tenants of a namespace make none unless granted.
func TestPrepullJobLimits(t *testing.T) {
	admin := clusterClient(t)
	applyAgentManifests(t, admin)
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	job := func(highWater int32, images ...string) *v1alpha1.PrepullJob {
		return &v1alpha1.PrepullJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "limits"},
			Spec: v1alpha1.PrepullJobSpec{Images: images, DiskHighWaterPercent: highWater}}
	}
	refused := func(what string, j *v1alpha1.PrepullJob, want string) {
		t.Helper()
		err := admin.Create(ctx, j, client.DryRunAll)
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want it refused saying %q", what, err, want)
		}
	}

	// As shipped, no registry is allowed. (Until the API server has read
	// the ConfigMap, jobs are refused for want of it.)
	allowRegistries(t, admin, "", nil)
	want := "PrepullJob limits: asrl-prepull-agent pulls from no registry; the cluster admin lists those it may in ConfigMap sandbox-fleet-agent/asrl-prepull-agent (allowed-registries)"
	var err error
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = admin.Create(ctx, job(0, "mirror.example.com/swebench/django:1"), client.DryRunAll); err != nil && strings.Contains(err.Error(), want) {
			break
		}
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a job with no registry allowed: %v, want it refused saying %q", err, want)
	}

	allowRegistries(t, admin, "mirror.example.com, docker.io/swebench/", job(85, "mirror.example.com/swebench/django:1", "docker.io/swebench/astropy:2"))
	refused("an image of another registry", job(0, "mirror.example.com/a:1", "ghcr.io/private/model:1"),
		"PrepullJob limits: ghcr.io/private/model:1 is from none of the registries asrl-prepull-agent may pull from (mirror.example.com, docker.io/swebench/, ConfigMap sandbox-fleet-agent/asrl-prepull-agent), or is not named in full; name images in full: registry first, lower case, with a tag or digest")
	refused("another repository of an allowed registry", job(0, "docker.io/library/busybox:1.36"), "docker.io/library/busybox:1.36 is from none")
	refused("a host whose name extends an allowed one", job(0, "mirror.example.com.evil.io/a:1"), "mirror.example.com.evil.io/a:1 is from none")
	refused("a disk high water above the cap", job(95, "mirror.example.com/a:1"),
		"PrepullJob limits: diskHighWaterPercent 95 is above 85, the most the cluster admin allows")

	// The shipped RBAC grants PrepullJobs to no one but the agent: a
	// namespace's editors and admins cannot make them.
	for _, role := range []string{"edit", "admin"} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "tenant", Groups: []string{"tenants"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: v1alpha1.GroupVersion.Group, Resource: "prepulljobs"}}}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-" + role},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "tenant"}}}
		if err := admin.Create(ctx, binding); err != nil {
			t.Fatal(err)
		}
		if err := admin.Create(ctx, sar); err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed {
			t.Errorf("a namespace's %s may create PrepullJobs", role)
		}
	}
}
