package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	fleetv1 "github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1"
	"github.com/sandbox-fleet/sandbox-fleet/api/fleet/v1/fleetv1connect"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/preflight"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleetclient"
)

// serve as shipped in a cluster: its image, manifests/serve applied with
// kubectl apply -k through an overlay (namespace, name suffix, the
// configuration), its own ServiceAccount and RBAC, TLS from a given
// Secret. A client Pod running as the allowed ServiceAccount acquires a
// sandbox and runs a command in it with the Python client, its projected
// token its credential; a Pod of another account is refused and changes
// nothing. The serve Pod deleted, its replacement keeps the session: the
// handle held before is the client's still, its sandbox as it was, the
// pool the same.
func TestServeInTheCluster(t *testing.T) {
	if local == nil {
		t.Skip("pushes serve's image to the local cluster's registry")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	root, err := testcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := testcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := kubectlOf(t, ctx)
	kc := kubeClient(t)
	// The session's namespace (serve and its sandboxes) and the
	// trainer's (its workers and their accounts), as the manifests say.
	ns, trainers := newNamespace(t), newNamespace(t)
	name := "sandbox-fleet-serve-" + ns
	host := name + "." + ns + ".svc"

	repository, tag := pushPluginImage(t, ctx, root)
	caFile, certFile, keyFile, err := testcluster.ServingCert(t.TempDir(), host)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, certPEM, keyPEM := readFile(t, caFile), readFile(t, certFile), readFile(t, keyFile)
	for _, obj := range []struct {
		create func() error
	}{
		{func() error {
			_, err := kc.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sandbox-fleet-serve-tls"},
				Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM}}, metav1.CreateOptions{})
			return err
		}},
		{func() error { return createAccount(ctx, kc, trainers, "sandbox-fleet-trainer") }},
		{func() error { return createAccount(ctx, kc, trainers, "intruder") }},
		{func() error { return pythonClientConfigMap(ctx, kc, trainers, root, caPEM) }},
	} {
		if err := obj.create(); err != nil {
			t.Fatal(err)
		}
	}

	overlay := t.TempDir()
	rel, err := filepath.Rel(overlay, filepath.Join(root, "manifests", "serve"))
	if err != nil {
		t.Fatal(err)
	}
	kustomization := fmt.Sprintf(`namespace: %s
nameSuffix: -%s
resources: [%s]
images:
- {name: ghcr.io/sandbox-fleet/sandbox-fleet, newName: %s, newTag: %q}
configMapGenerator:
- {name: sandbox-fleet-serve, behavior: replace, files: [fleet.yaml]}
patches:
- patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: sandbox-fleet-serve}
    spec: {template: {spec: {containers: [{name: serve, env: [{name: ALLOWED_ACCOUNT, value: %s/sandbox-fleet-trainer}]}]}}}
`, ns, ns, rel, repository, tag, trainers)
	for file, text := range map[string]string{"kustomization.yaml": kustomization, "fleet.yaml": "apiVersion: sandbox-fleet.io/v1alpha1\nkind: FleetConfig\nmaxConcurrent: 2\nmaxWarmPoolSize: 1\n" +
		// As manifests/serve's own says to keep it: the sandboxes'
		// network is its NetworkPolicy's alone.
		"template: {extraTemplateSpec: {networkPolicyManagement: Unmanaged}}\n"} {
		if err := os.WriteFile(filepath.Join(overlay, file), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	kubectl("apply", "-k", overlay)
	t.Cleanup(func() {
		// The cluster-wide binding goes with the rest; the namespace's
		// deletion takes what a fresh session of the Pod made since.
		out, err := exec.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", kubeconfig(), "delete", "-k", overlay, "--wait").CombinedOutput()
		if err != nil {
			t.Errorf("kubectl delete -k: %v\n%s", err, out)
		}
	})
	if out, err := exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), "--kubeconfig", kubeconfig(), "-n", ns, "rollout", "status", "deployment/"+name, "--timeout=3m").CombinedOutput(); err != nil {
		logs, _ := exec.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", kubeconfig(), "-n", ns, "logs", "deployment/"+name, "--previous").CombinedOutput()
		t.Fatalf("serve did not roll out: %v\n%s\nits last log:\n%s", err, out, logs)
	}

	// serve's account may do what a session does in its namespace and
	// review tokens, and nothing else docs/admin.md says it may not: no
	// Pod of the trainer's is within its reach.
	for _, tt := range []struct {
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "patch", Group: "extensions.agents.x-k8s.io", Resource: "sandboxclaims"}, true},
		{authorizationv1.ResourceAttributes{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"}, true},
		{authorizationv1.ResourceAttributes{Namespace: "default", Verb: "create", Group: "extensions.agents.x-k8s.io", Resource: "sandboxclaims"}, false},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Resource: "secrets", Name: "sandbox-fleet-serve-tls"}, false},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "sandbox-fleet.io", Resource: "prepulljobs"}, false},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Resource: "pods", Subresource: "exec"}, true},
		{authorizationv1.ResourceAttributes{Namespace: trainers, Verb: "create", Resource: "pods", Subresource: "exec"}, false},
		{authorizationv1.ResourceAttributes{Namespace: trainers, Verb: "delete", Resource: "pods"}, false},
		{authorizationv1.ResourceAttributes{Namespace: trainers, Verb: "update", Resource: "configmaps"}, false},
		{authorizationv1.ResourceAttributes{Namespace: preflight.ControllerNamespace, Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Name: preflight.ControllerLease}, true},
		{authorizationv1.ResourceAttributes{Namespace: preflight.ControllerNamespace, Verb: "get", Group: "apps", Resource: "deployments", Name: preflight.ControllerName}, true},
		{authorizationv1.ResourceAttributes{Namespace: preflight.ControllerNamespace, Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Name: preflight.ControllerLease}, false},
		{authorizationv1.ResourceAttributes{Namespace: preflight.ControllerNamespace, Verb: "get", Resource: "secrets"}, false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + ns + ":" + name,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns},
			ResourceAttributes: &tt.attrs,
		}}
		got, err := kc.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != tt.want {
			t.Errorf("serve may %s %s %s: %v, want %v", tt.attrs.Verb, tt.attrs.Resource, tt.attrs.Namespace, got.Status.Allowed, tt.want)
		}
	}

	// The test is a client too, the session's owner (its first caller),
	// reaching the serve Pod by its address with the Service's name.
	trainerToken := serveToken(t, ctx, kc, trainers, "sandbox-fleet-trainer")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	servePod := readyPod(t, ctx, kc, ns, "")
	connectTo := func(pod *corev1.Pod) fleetv1connect.FleetServiceClient {
		httpc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: host}}}
		c, err := fleetclient.New("https://"+pod.Status.PodIP+":7070", fleetclient.WithToken(trainerToken),
			fleetclient.WithHTTPClient(httpc), fleetclient.WithClientKey("e2e-owner-key"))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := connectTo(servePod)
	if _, err := c.Renew(ctx, connect.NewRequest(&fleetv1.RenewRequest{ClientId: "e2e"})); err != nil {
		t.Fatalf("the first call: %v\n%s", err, kubectl("-n", ns, "logs", servePod.Name))
	}

	// The metrics: over TLS, to tokens the API server allows /metrics.
	metricsAreGuarded(t, ctx, kc, ns, "https://"+servePod.Status.PodIP+":9095/metrics", &tls.Config{RootCAs: pool, ServerName: host}, trainerToken)

	// The rollout worker's Pod, then another account's.
	worker := runClientPod(t, ctx, kc, trainers, "worker", "sandbox-fleet-trainer", servePod.Status.PodIP, host)
	if !strings.Contains(worker, "ran: hello from the worker") {
		t.Errorf("the worker Pod: %s", worker)
	}
	intruder := runClientPod(t, ctx, kc, trainers, "intruder", "intruder", servePod.Status.PodIP, host)
	if !strings.Contains(intruder, "refused: permission_denied") {
		t.Errorf("the intruder Pod: %s", intruder)
	}
	st, err := c.Status(ctx, connect.NewRequest(&fleetv1.StatusRequest{}))
	if err != nil || st.Msg.Tasks != 1 || st.Msg.Counts.Acquired != 1 || len(st.Msg.Handles) != 0 {
		t.Fatalf("after the worker and the intruder: %v (%v); want the worker's 1 task and acquire, nothing held", st, err)
	}

	// A sandbox held across the serve Pod's replacement.
	if _, err := c.AddTasks(ctx, connect.NewRequest(&fleetv1.AddTasksRequest{Tasks: []*fleetv1.Task{{Id: "held", Image: testimages.Busybox}}})); err != nil {
		t.Fatal(err)
	}
	acq, err := c.Acquire(ctx, connect.NewRequest(&fleetv1.AcquireRequest{RequestId: "held-1", ClientId: "e2e", TaskId: "held"}))
	if err != nil {
		t.Fatal(err)
	}
	h := acq.Msg.Handle
	if code := execIn(t, ctx, c, h.Id, "echo before > /tmp/mark"); code != 0 {
		t.Fatalf("exec before: exit %d", code)
	}
	pools := kubectl("-n", ns, "get", "sandboxwarmpools", "-o", "jsonpath={.items[*].metadata.uid}")
	if err := kc.CoreV1().Pods(ns).Delete(ctx, servePod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	next := readyPod(t, ctx, kc, ns, servePod.UID)
	c = connectTo(next)
	st, err = c.Status(ctx, connect.NewRequest(&fleetv1.StatusRequest{}))
	if err != nil || len(st.Msg.Handles) != 1 || st.Msg.Handles[0].Id != h.Id {
		t.Fatalf("after the serve Pod was replaced: %v (%v); want handle %s\n%s", st, err, h.Id, kubectl("-n", ns, "logs", next.Name))
	}
	if code := execIn(t, ctx, c, h.Id, `test "$(cat /tmp/mark)" = before`); code != 0 {
		t.Errorf("the held sandbox after the replacement: exit %d, want its file as written", code)
	}
	// The session's sandboxes are fenced (manifests/serve's
	// networkpolicy.yaml): serve's Pod, its metrics and the API server
	// are closed to them, as the workers' Pods above reached serve.
	for _, target := range []string{net.JoinHostPort(next.Status.PodIP, "7070"), net.JoinHostPort(next.Status.PodIP, "9095"), apiServerService(t, ctx)} {
		addr, port, _ := net.SplitHostPort(target)
		// The network plugin writes a Pod's rules a moment after it runs.
		var said string
		var code int32
		fenced := false
		for range 20 {
			code, said = execOutput(t, ctx, c, h.Id, "nc -w 3 "+addr+" "+port+" </dev/null; echo exit $?")
			if fenced = code == 0 && strings.HasSuffix(said, "exit 1\n"); fenced {
				break
			}
			time.Sleep(time.Second)
		}
		if !fenced {
			t.Errorf("the session's sandbox connects to %s: exit %d\n%s", target, code, said)
		}
	}
	if got := kubectl("-n", ns, "get", "sandboxwarmpools", "-o", "jsonpath={.items[*].metadata.uid}"); got != pools {
		t.Errorf("pools %q after the replacement, want the same %q", got, pools)
	}
	if _, err := c.Release(ctx, connect.NewRequest(&fleetv1.ReleaseRequest{Handle: h.Id, ClientId: "e2e"})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Close(ctx, connect.NewRequest(&fleetv1.CloseRequest{ClientId: "e2e"})); err != nil {
		t.Fatal(err)
	}
	if left := kubectl("-n", ns, "get", "sandboxclaims,sandboxwarmpools,sandboxtemplates", "-l", "sandbox-fleet.io/run-id=rl", "-o", "name"); left != "" {
		t.Errorf("after Close: %s", left)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func createAccount(ctx context.Context, kc kubernetes.Interface, ns, name string) error {
	_, err := kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return err
}

// serveToken is a token of account for serve's audience, as a Pod's
// projected token is.
func serveToken(t *testing.T, ctx context.Context, kc kubernetes.Interface, ns, account string) string {
	t.Helper()
	tr, err := kc.CoreV1().ServiceAccounts(ns).CreateToken(ctx, account, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"sandbox-fleet"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// pythonClientConfigMap holds the Python client's package, each file under
// its path, and serve's CA, for the client Pods.
func pythonClientConfigMap(ctx context.Context, kc kubernetes.Interface, ns, root string, caPEM []byte) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "python-client"}, Data: map[string]string{"ca.crt": string(caPEM), "client.py": workerScript}}
	pkg := filepath.Join(root, "clients", "python")
	err := filepath.WalkDir(filepath.Join(pkg, "sandbox_fleet"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".py") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(pkg, path)
		cm.Data[strings.ReplaceAll(rel, "/", "-")] = string(b) // no file of the package has a dash
		return nil
	})
	if err != nil {
		return err
	}
	_, err = kc.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	return err
}

// workerScript is a rollout worker: it adds a task, acquires a sandbox
// for it and runs a command there through serve, or says why it was
// refused.
const workerScript = `import os, sys
sys.path.insert(0, "/client")
from sandbox_fleet import SandboxFleet, FleetError
who, address, image = sys.argv[1], sys.argv[2], sys.argv[3]
fleet = SandboxFleet(address, token_file="/var/run/secrets/sandbox-fleet/token", ca_file="/client/ca.crt", client_id=who)
try:
    fleet.add_tasks([{"id": who + "-1", "image": image}])
except FleetError as e:
    print("refused:", e.code, e)
    sys.exit(0)
with fleet.acquire(who + "-1") as sb:
    print("ran:", sb.exec(["echo", "hello from the " + who], check=True).stdout.decode().strip())
`

// runClientPod runs workerScript in a Pod as account, serve's Service name
// resolving to its Pod, and returns its log once it has succeeded.
func runClientPod(t *testing.T, ctx context.Context, kc kubernetes.Interface, ns, who, account, serveIP, host string) string {
	t.Helper()
	var items []corev1.KeyToPath
	cm, err := kc.CoreV1().ConfigMaps(ns).Get(ctx, "python-client", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for key := range cm.Data {
		items = append(items, corev1.KeyToPath{Key: key, Path: strings.ReplaceAll(key, "-", "/")})
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: who},
		Spec: corev1.PodSpec{
			ServiceAccountName: account, RestartPolicy: corev1.RestartPolicyNever,
			AutomountServiceAccountToken: new(false),
			HostAliases:                  []corev1.HostAlias{{IP: serveIP, Hostnames: []string{host}}},
			Containers: []corev1.Container{{
				Name: "worker", Image: testimages.Problem(1),
				Command:      []string{"python3", "/client/client.py", who, "https://" + host + ":7070", testimages.Busybox},
				VolumeMounts: []corev1.VolumeMount{{Name: "client", MountPath: "/client"}, {Name: "token", MountPath: "/var/run/secrets/sandbox-fleet"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "client", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "python-client"}, Items: items}}},
				{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
					ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "sandbox-fleet", ExpirationSeconds: new(int64(600)), Path: "token"}}}}}},
			},
		},
	}
	if _, err := kc.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var phase corev1.PodPhase
	err = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := kc.CoreV1().Pods(ns).Get(ctx, who, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	logs, lerr := kc.CoreV1().Pods(ns).GetLogs(who, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || lerr != nil || phase != corev1.PodSucceeded {
		t.Fatalf("client Pod %s: %s (%v, %v)\n%s", who, phase, err, lerr, logs)
	}
	return string(logs)
}

// readyPod waits for the serve Pod that is Ready and not the one of UID
// old, and returns it.
func readyPod(t *testing.T, ctx context.Context, kc kubernetes.Interface, ns string, old types.UID) *corev1.Pod {
	t.Helper()
	var ready *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=sandbox-fleet-serve"})
		if err != nil {
			return false, err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.UID != old && p.DeletionTimestamp == nil && podReady(p) {
				ready = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no serve Pod Ready: %v", err)
	}
	return ready
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// execIn runs script in handle's sandbox through c and returns its exit
// code.
func execIn(t *testing.T, ctx context.Context, c fleetv1connect.FleetServiceClient, handle, script string) int32 {
	t.Helper()
	code, _ := execOutput(t, ctx, c, handle, script)
	return code
}

// execOutput is execIn's exit code with what the script wrote to stdout
// and stderr.
func execOutput(t *testing.T, ctx context.Context, c fleetv1connect.FleetServiceClient, handle, script string) (int32, string) {
	t.Helper()
	stream, err := c.Exec(ctx, connect.NewRequest(&fleetv1.ExecRequest{Handle: handle, ClientId: "e2e", Argv: []string{"sh", "-c", script}}))
	if err != nil {
		t.Fatal(err)
	}
	code := int32(-1)
	var out strings.Builder
	for stream.Receive() {
		out.Write(stream.Msg().Stdout)
		out.Write(stream.Msg().Stderr)
		if stream.Msg().ExitCode != nil {
			code = stream.Msg().GetExitCode()
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	return code, out.String()
}

// metricsAreGuarded: serve's metrics at url answer no token 401, a
// ServiceAccount not allowed /metrics 403, a token of serve's own audience
// (one the API server will not authenticate for itself; controller-runtime's
// filter answers its failed review 500) no metrics, and one bound to the
// shipped metrics-reader ClusterRole 200.
func metricsAreGuarded(t *testing.T, ctx context.Context, kc kubernetes.Interface, ns, url string, tlsConfig *tls.Config, serveAudienceToken string) {
	t.Helper()
	httpc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	scrape := func(token string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := httpc.Do(req)
		if err != nil {
			t.Fatalf("scraping %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	apiToken := func(account string) string {
		if err := createAccount(ctx, kc, ns, account); err != nil {
			t.Fatal(err)
		}
		tr, err := kc.CoreV1().ServiceAccounts(ns).CreateToken(ctx, account, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-scraper-" + ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "sandbox-fleet-serve-metrics-reader-" + ns},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: ns}}}
	if _, err := kc.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kc.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	scraper, stranger := apiToken("scraper"), apiToken("stranger")
	for _, tt := range []struct {
		who, token string
		want       int
	}{{"no token", "", http.StatusUnauthorized}, {"an account not allowed /metrics", stranger, http.StatusForbidden}} {
		if code, body := scrape(tt.token); code != tt.want {
			t.Errorf("serve's metrics to %s: %d, want %d\n%s", tt.who, code, tt.want, body)
		}
	}
	if code, body := scrape(serveAudienceToken); code == http.StatusOK || strings.Contains(body, "asrl_") {
		t.Errorf("serve's metrics to a token of serve's audience: %d, want refused\n%.300s", code, body)
	}
	var code int
	var body string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		code, body = scrape(scraper)
		return code == http.StatusOK, nil
	})
	if err != nil || !strings.Contains(body, "asrl_session_clients") {
		t.Errorf("serve's metrics to the metrics reader: %d (%v)\n%.500s", code, err, body)
	}
}
