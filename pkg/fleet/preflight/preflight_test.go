package preflight_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/preflight"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) { testcluster.Main(m, &cluster) }

func run(t *testing.T, cfg *rest.Config, opts preflight.Options) preflight.Report {
	t.Helper()
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return preflight.Run(ctx, kc, cfg.Host, opts)
}

// check returns the named check, failing the test if the report lacks it.
func check(t *testing.T, r preflight.Report, name string) preflight.Check {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("report has no check %q: %+v", name, r.Checks)
	return preflight.Check{}
}

func expect(t *testing.T, r preflight.Report, name string, status preflight.Status, detail string) {
	t.Helper()
	c := check(t, r, name)
	if c.Status != status || !strings.Contains(c.Detail, detail) {
		t.Errorf("check %s = %s %q; want %s containing %q", name, c.Status, c.Detail, status, detail)
	}
	if status != preflight.Pass && status != preflight.Warn && c.Fix == "" {
		t.Errorf("failed check %s says nothing about how to fix it", name)
	}
}

func TestPassesOnAClusterWithAgentSandbox(t *testing.T) {
	ns := cluster.NewNamespace(t)
	r := run(t, cluster.RESTConfig(), preflight.Options{Namespace: ns})
	if f := r.Failures(); len(f) > 0 {
		t.Fatalf("preflight failed on a complete cluster: %+v", f)
	}
	if w := r.Warnings(); len(w) > 0 {
		t.Errorf("preflight warned on a complete cluster: %+v", w)
	}
	if !strings.HasPrefix(r.ServerVersion, "v1.36.") {
		t.Errorf("server version %q, want v1.36.x", r.ServerVersion)
	}
	for _, name := range []string{
		"crd/sandboxes.agents.x-k8s.io",
		"crd/sandboxtemplates.extensions.agents.x-k8s.io",
		"crd/sandboxwarmpools.extensions.agents.x-k8s.io",
		"crd/sandboxclaims.extensions.agents.x-k8s.io",
	} {
		expect(t, r, name, preflight.Pass, "v1beta1 served")
	}
	expect(t, r, "namespace", preflight.Pass, ns)
	expect(t, r, "agent-sandbox-controller", preflight.Pass, "renews its Lease")
	expect(t, r, "rbac/sandboxclaims", preflight.Pass, "create")
	expect(t, r, "rbac/leases", preflight.Pass, "create")
	expect(t, r, "nodes", preflight.Pass, "2 of 2 Ready")
}

func TestFailsPreciselyWithoutTheAgentSandboxAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bare, err := testcluster.Start(ctx, testcluster.WithoutAgentSandbox(), testcluster.WithNodes())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := bare.Stop(t.Failed()); err != nil {
			t.Error(err)
		}
	})

	r := run(t, bare.RESTConfig(), preflight.Options{Namespace: "default"})
	expect(t, r, "crd/sandboxes.agents.x-k8s.io", preflight.Fail, "not installed: the API server does not serve agents.x-k8s.io")
	expect(t, r, "crd/sandboxclaims.extensions.agents.x-k8s.io", preflight.Fail, "does not serve extensions.agents.x-k8s.io")
	if fix := check(t, r, "crd/sandboxwarmpools.extensions.agents.x-k8s.io").Fix; !strings.Contains(fix, "--extensions") {
		t.Errorf("fix %q does not say to enable the extensions", fix)
	}
	expect(t, r, "nodes", preflight.Warn, "none of 0 nodes")
	expect(t, r, "agent-sandbox-controller", preflight.Warn, "found neither its Deployment")

	// An Agent Sandbox too old to serve v1beta1.
	ext, err := apiextensionsclient.NewForConfig(bare.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	old := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "sandboxes.agents.x-k8s.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "agents.x-k8s.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "sandboxes", Kind: "Sandbox"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1alpha1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: new(true)}},
			}},
		},
	}
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r = run(t, bare.RESTConfig(), preflight.Options{Namespace: "default"})
		if c := check(t, r, "crd/sandboxes.agents.x-k8s.io"); strings.Contains(c.Detail, "v1alpha1") || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // discovery publishes a new CRD asynchronously
	}
	expect(t, r, "crd/sandboxes.agents.x-k8s.io", preflight.Fail, "agents.x-k8s.io serves v1alpha1 but not v1beta1")
}

func TestMissingNamespaceRuntimeClassAndPullSecret(t *testing.T) {
	r := run(t, cluster.RESTConfig(), preflight.Options{
		Namespace: "no-such-namespace", RuntimeClass: "gvisor", ImagePullSecret: "regcred"})
	expect(t, r, "namespace", preflight.Fail, `namespace "no-such-namespace" does not exist`)
	if fix := check(t, r, "namespace").Fix; !strings.Contains(fix, "kubectl create namespace no-such-namespace") {
		t.Errorf("namespace fix %q does not say how to create it", fix)
	}
	expect(t, r, "runtimeclass/gvisor", preflight.Fail, `runtime class "gvisor" does not exist`)
	expect(t, r, "secret/regcred", preflight.Fail, `image pull secret "regcred" does not exist in namespace "no-such-namespace"`)
}

func TestPullSecretMustBeADockerConfig(t *testing.T) {
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	kc, err := kubernetes.NewForConfig(cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	for name, typ := range map[string]corev1.SecretType{"opaque": corev1.SecretTypeOpaque, "regcred": corev1.SecretTypeDockerConfigJson} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Type: typ,
			Data: map[string][]byte{}}
		if typ == corev1.SecretTypeDockerConfigJson {
			s.Data[corev1.DockerConfigJsonKey] = []byte(`{"auths":{}}`)
		}
		if _, err := kc.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	expect(t, run(t, cluster.RESTConfig(), preflight.Options{Namespace: ns, ImagePullSecret: "opaque"}),
		"secret/opaque", preflight.Fail, "has type Opaque, not an image pull secret")
	expect(t, run(t, cluster.RESTConfig(), preflight.Options{Namespace: ns, ImagePullSecret: "regcred"}),
		"secret/regcred", preflight.Pass, "kubernetes.io/dockerconfigjson")
}

// A user who may only read claims and sandboxes is told exactly which
// verbs are missing, and which of them a run cannot do without.
func TestCallerWithoutPermissions(t *testing.T) {
	ctx := context.Background()
	ns := cluster.NewNamespace(t)
	kc, err := kubernetes.NewForConfig(cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "claims-reader"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"extensions.agents.x-k8s.io"}, Resources: []string{"sandboxclaims"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{"agents.x-k8s.io"}, Resources: []string{"sandboxes"}, Verbs: []string{"get", "list", "watch"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "alice"}}}
	if _, err := kc.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	alice := cluster.RESTConfig()
	alice.Impersonate = rest.ImpersonationConfig{UserName: "alice", Groups: []string{"system:authenticated"}}

	r := run(t, alice, preflight.Options{Namespace: ns})
	expect(t, r, "crd/sandboxclaims.extensions.agents.x-k8s.io", preflight.Pass, "served")
	expect(t, r, "rbac/sandboxclaims", preflight.Fail,
		fmt.Sprintf("not allowed to create, watch, delete sandboxclaims in namespace %q", ns))
	expect(t, r, "rbac/sandboxtemplates", preflight.Fail, "not allowed to create, get, list, watch, delete sandboxtemplates")
	expect(t, r, "rbac/pods/exec", preflight.Warn, "not allowed to create, get pods/exec")
	// Reading sandboxes is all a run needs; deleting them only speeds teardown.
	expect(t, r, "rbac/sandboxes", preflight.Warn, "not allowed to delete sandboxes")
	expect(t, r, "namespace", preflight.Warn, "not allowed to read namespace")
	expect(t, r, "nodes", preflight.Warn, "cannot list nodes (forbidden)")

	// A session also records its state and whom each claim is for.
	r = run(t, alice, preflight.Options{Namespace: ns, Session: true})
	expect(t, r, "rbac/sandboxclaims", preflight.Fail, "not allowed to create, watch, delete, patch sandboxclaims")
	expect(t, r, "rbac/configmaps", preflight.Fail, "not allowed to create, get, list, update, delete configmaps")
	if c := check(t, r, "rbac/configmaps"); !strings.Contains(c.Fix, "configmaps") {
		t.Errorf("rbac/configmaps: fix %q does not name the resource", c.Fix)
	}
}

func TestUnreachableServer(t *testing.T) {
	cfg := cluster.RESTConfig()
	cfg.Host = "https://127.0.0.1:1" // nothing listens on port 1
	cfg.Timeout = 5 * time.Second
	r := run(t, cfg, preflight.Options{Namespace: "default"})
	if len(r.Checks) != 1 {
		t.Fatalf("got %d checks after an unreachable server, want only reachability: %+v", len(r.Checks), r.Checks)
	}
	expect(t, r, "reachable", preflight.Fail, "cannot reach the API server at https://127.0.0.1:1")
}
