// Package testwebhook runs the built asrl-webhook against the test cluster
// — its real TLS server, certificates from its rotator — behind webhook
// configurations of its own that select one namespace, for the webhook's
// tests and its benchmark.
package testwebhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/webhook"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

// Server is a running webhook.
type Server struct {
	// URL is where it serves, https://localhost:PORT; HealthURL and
	// MetricsURL where /healthz, /readyz and /metrics (over TLS, for
	// tokens allowed it: Metrics reads it) are.
	URL, HealthURL, MetricsURL string
	// Process is the webhook's.
	Process *testcluster.Process
	client  client.Client
	name    string
	dir     string
	// metricsToken is a ServiceAccount's, bound to the shipped
	// asrl-webhook-metrics-reader rule.
	metricsToken string
	// clusterRBAC are the cluster-wide objects of shippedRBAC, which the
	// test namespace's deletion does not take.
	clusterRBAC []client.Object
	// apiServer is the client certificate the API server presents to
	// webhooks, the only one the webhook serves.
	apiServer tls.Certificate
}

// AsAPIServer is an HTTP client presenting the API server's webhook
// client certificate, for a test to send the webhook reviews of its own.
func (s *Server) AsAPIServer() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true, Certificates: []tls.Certificate{s.apiServer}}}}
}

// Start runs the built webhook bin (testcluster.BuildCommand) for
// namespace ns — as its ServiceAccount, with the shipped RBAC and Go heap
// limit — on cpus if any, and returns once the API server can call it.
// Stop stops it and Close also removes its configurations.
func Start(ctx context.Context, c *testcluster.Cluster, ns, bin string, cpus ...int) (*Server, error) {
	clients, err := c.Clients(ns)
	if err != nil {
		return nil, err
	}
	ports, err := testcluster.FreePorts(3)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "asrl-webhook-certs-")
	if err != nil {
		return nil, err
	}
	health, metrics := "127.0.0.1:"+strconv.Itoa(ports[1]), "127.0.0.1:"+strconv.Itoa(ports[2])
	s := &Server{URL: "https://localhost:" + strconv.Itoa(ports[0]), HealthURL: "http://" + health, MetricsURL: "https://" + metrics,
		client: clients.Client, name: "asrl-webhook-" + ns, dir: dir}
	configurations, err := s.configurations()
	for _, obj := range configurations {
		if err != nil {
			break
		}
		err = clients.Client.Create(ctx, obj)
	}
	if err == nil {
		err = s.Serve(ctx, ns)
	}
	var kubeconfig string
	if err == nil {
		kubeconfig, err = s.shippedRBAC(ctx, c, ns)
	}
	var env []string
	if err == nil {
		env, err = testcluster.ShippedGOMEMLIMIT("manifests/webhook/deployment.yaml")
	}
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	cert, key, ca := c.WebhookClient()
	s.apiServer, err = tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	s.Process, err = c.StartProcess(s.name, bin, []string{
		"--kubeconfig", kubeconfig, "--host", "127.0.0.1", "--port", strconv.Itoa(ports[0]), "--cert-dir", dir,
		"--client-ca-file", ca, "--client-names", testcluster.WebhookClientName,
		"--metrics-addr", metrics, "--health-addr", health,
		"--secret-namespace", ns, "--secret-name", s.renamed("asrl-webhook-cert"), "--dns-name", "localhost", "--write-cert-dir",
		"--mutating-webhook-configuration", s.name, "--validating-webhook-configuration", s.name,
		"--status-interval", "200ms", "--lease-namespace", ns,
	}, cpus, env...)
	if err == nil {
		err = s.waitCallable(ctx)
	}
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

// ServedLabel is the namespace label by which a test's webhook serves a
// namespace: its template entries select it, so its policies' entries
// select only namespaces so labelled and policies of other tests' webhooks
// leave it alone.
const ServedLabel = "sandbox-fleet.io/test-webhook"

// configurations are the webhook configurations the manifests ship
// (manifests/webhook/webhooks.yaml), renamed for ns, with the server's URL
// in place of the Service and the template entries kept to namespaces
// labelled ServedLabel=s.name, so the tests run the failure policy,
// selectors and rules users get.
func (s *Server) configurations() ([]client.Object, error) {
	root, err := testcluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(root, "manifests", "webhook", "webhooks.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	docs := strings.Split(string(b), "\n---\n")
	if len(docs) != 4 {
		return nil, fmt.Errorf("%s: want two MutatingWebhookConfigurations and two ValidatingWebhookConfigurations, found %d documents", path, len(docs))
	}
	mutating, mutatingPolicies := &admissionregistrationv1.MutatingWebhookConfiguration{}, &admissionregistrationv1.MutatingWebhookConfiguration{}
	validating, validatingPolicies := &admissionregistrationv1.ValidatingWebhookConfiguration{}, &admissionregistrationv1.ValidatingWebhookConfiguration{}
	for i, obj := range []any{mutating, mutatingPolicies, validating, validatingPolicies} {
		if err := yaml.UnmarshalStrict([]byte(docs[i]), obj); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	at := func(cc *admissionregistrationv1.WebhookClientConfig) {
		url := s.URL + *cc.Service.Path
		*cc = admissionregistrationv1.WebhookClientConfig{URL: &url}
	}
	served := func(sel *metav1.LabelSelector) {
		if webhook.IsTemplate(sel) {
			sel.MatchLabels = map[string]string{ServedLabel: s.name}
		}
	}
	mutating.Name, validating.Name = s.name, s.name
	mutatingPolicies.Name, validatingPolicies.Name = s.name+webhook.PoliciesSuffix, s.name+webhook.PoliciesSuffix
	for i := range mutating.Webhooks {
		at(&mutating.Webhooks[i].ClientConfig)
		served(mutating.Webhooks[i].NamespaceSelector)
	}
	for i := range validating.Webhooks {
		at(&validating.Webhooks[i].ClientConfig)
		served(validating.Webhooks[i].NamespaceSelector)
	}
	return []client.Object{mutating, mutatingPolicies, validating, validatingPolicies}, nil
}

// renamed is the harness's name for an object the manifests name
// asrl-webhook...: its own name in place of asrl-webhook, as a kustomize
// namePrefix would.
func (s *Server) renamed(name string) string {
	if rest, ok := strings.CutPrefix(name, "asrl-webhook"); ok {
		return s.name + rest
	}
	return name
}

// shippedRBAC creates manifests/webhook/rbac.yaml under the harness's
// names, with its namespaced objects in ns, and the certificate's Secret,
// and returns a kubeconfig of
// the webhook's ServiceAccount: the webhook runs with the rights the
// manifests give it and no more. A ServiceAccount of ns bound to the
// metrics reader's role gives the token Metrics reads with.
func (s *Server) shippedRBAC(ctx context.Context, c *testcluster.Cluster, ns string) (string, error) {
	const path = "manifests/webhook/rbac.yaml"
	objs, err := testcluster.ShippedRBAC(path)
	if err != nil {
		return "", err
	}
	var webhookSA, metricsRole string
	for _, obj := range objs {
		obj.SetName(s.renamed(obj.GetName()))
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			o.Namespace, webhookSA = ns, o.Name
		case *rbacv1.ClusterRole:
			s.renameRules(o.Rules)
			if len(o.Rules) == 1 && len(o.Rules[0].NonResourceURLs) > 0 {
				metricsRole = o.Name
			}
		case *rbacv1.Role:
			o.Namespace = ns
			s.renameRules(o.Rules)
		case *rbacv1.ClusterRoleBinding:
			s.renameBinding(&o.RoleRef, o.Subjects, ns)
		case *rbacv1.RoleBinding:
			o.Namespace = ns
			s.renameBinding(&o.RoleRef, o.Subjects, ns)
		}
	}
	if webhookSA == "" || metricsRole == "" {
		return "", fmt.Errorf("%s: want the webhook's ServiceAccount and the metrics reader's ClusterRole", path)
	}
	// The certificate's Secret, empty, as deployment.yaml ships it: the
	// webhook may only write that one.
	cert := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.renamed("asrl-webhook-cert")}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: nil, corev1.TLSPrivateKeyKey: nil}}
	reader := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "metrics-reader"}}
	objs = append(objs, cert, reader, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: metricsRole},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: metricsRole},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: reader.Name}}})
	for _, obj := range objs {
		if err := s.client.Create(ctx, obj); err != nil {
			return "", err
		}
		if obj.GetNamespace() == "" {
			s.clusterRBAC = append(s.clusterRBAC, obj)
		}
	}
	req := &authenticationv1.TokenRequest{}
	if err := s.client.SubResource("token").Create(ctx, reader, req); err != nil {
		return "", err
	}
	s.metricsToken = req.Status.Token
	return c.ServiceAccountKubeconfig(ctx, ns, webhookSA)
}

// renameRules names the harness's objects in rules' resourceNames.
func (s *Server) renameRules(rules []rbacv1.PolicyRule) {
	for i := range rules {
		for k, name := range rules[i].ResourceNames {
			rules[i].ResourceNames[k] = s.renamed(name)
		}
	}
}

// renameBinding binds the harness's role to its accounts in ns.
func (s *Server) renameBinding(ref *rbacv1.RoleRef, subjects []rbacv1.Subject, ns string) {
	ref.Name = s.renamed(ref.Name)
	for i := range subjects {
		subjects[i].Name, subjects[i].Namespace = s.renamed(subjects[i].Name), ns
	}
}

// Metrics reads the webhook's /metrics as a reader the shipped role
// allows.
func (s *Server) Metrics(ctx context.Context) (string, error) {
	body, status, err := s.readMetrics(ctx, s.metricsToken)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("reading the webhook's metrics: %d %s", status, body)
	}
	return body, err
}

// readMetrics reads /metrics with token ("" for none). The serving
// certificate is the webhook's own, self-signed.
func (s *Server) readMetrics(ctx context.Context, token string) (string, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.MetricsURL+"/metrics", nil)
	if err != nil {
		return "", 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 10 * time.Second}
	resp, err := insecure.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("reading the webhook's metrics: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode, err
}

// MetricsStatus is the status /metrics answers a request with token.
func (s *Server) MetricsStatus(ctx context.Context, token string) (int, error) {
	_, status, err := s.readMetrics(ctx, token)
	return status, err
}

// Serve has the webhook serve namespace ns too.
func (s *Server) Serve(ctx context.Context, ns string) error {
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, ServedLabel, s.name)
	obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := s.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return fmt.Errorf("labelling namespace %s to be served by %s: %w", ns, s.name, err)
	}
	return nil
}

// waitCallable waits until the CA is in both configurations and the
// server answers.
func (s *Server) waitCallable(ctx context.Context) error {
	apiServer := s.AsAPIServer()
	waiting := "the webhook"
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-s.Process.Done():
			return false, fmt.Errorf("the webhook stopped: %w", s.Process.Err())
		default:
		}
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		key := types.NamespacedName{Name: s.name}
		if s.client.Get(ctx, key, m) != nil || s.client.Get(ctx, key, v) != nil ||
			len(m.Webhooks[0].ClientConfig.CABundle) == 0 || len(v.Webhooks[0].ClientConfig.CABundle) == 0 {
			waiting = "the CA in the webhook configurations"
			return false, nil
		}
		resp, err := apiServer.Get(s.URL + webhook.MutatePodsPath)
		if err != nil {
			waiting = err.Error()
			return false, nil
		}
		resp.Body.Close()
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the webhook did not become callable (waiting for %s): %w", waiting, err)
	}
	return nil
}

// WaitForNodeAffinity waits until the webhook gives a sandbox Pod of
// image in ns node affinity — it has a policy's nodeCache and the nodes'
// caches — trying with server-side dry runs.
func (s *Server) WaitForNodeAffinity(ctx context.Context, ns, image string) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "node-affinity-probe", Labels: map[string]string{policy.SandboxPodLabel: "probe"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: image}}}}
		if err := s.client.Create(ctx, pod, client.DryRunAll); err != nil {
			return false, err
		}
		return pod.Spec.Affinity != nil && pod.Spec.Affinity.NodeAffinity != nil, nil
	})
	if err != nil {
		return fmt.Errorf("the webhook gave a Pod of %s no node affinity: %w", image, err)
	}
	return nil
}

// WaitForPolicySet waits until a policy's sandbox Pod entry in the
// webhook's configuration selects ns when governed, or none does when
// not: the webhook writes a policy's own entries a moment after its
// change.
func (s *Server) WaitForPolicySet(ctx context.Context, ns string, governed bool) error {
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		namespace := &corev1.Namespace{}
		cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := s.client.Get(ctx, types.NamespacedName{Name: ns}, namespace); err != nil {
			return false, err
		}
		if err := s.client.Get(ctx, types.NamespacedName{Name: s.name + webhook.PoliciesSuffix}, cfg); err != nil {
			return false, err
		}
		routed := false
		for _, w := range cfg.Webhooks {
			sel, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
			if err != nil {
				return false, err
			}
			pod, pending := webhook.IsPodEntry(w.Name)
			routed = routed || pod && !pending && sel.Matches(labels.Set(namespace.Labels))
		}
		pending, err := webhook.ReadPending(cfg)
		return routed == governed && len(pending) == 0, err
	})
	if err != nil {
		return fmt.Errorf("the webhook's configuration does not route namespace %s as governed=%v: %w", ns, governed, err)
	}
	return nil
}

// Stop stops the webhook, leaving its configurations, so that the API
// server finds it down. It returns the webhook's error.
func (s *Server) Stop() error {
	var err error
	if s.Process != nil {
		err = s.Process.Stop()
		if err == nil {
			err = s.Process.Err()
		}
	}
	return errors.Join(err, os.RemoveAll(s.dir))
}

// Close stops the webhook if it runs and removes its configurations.
func (s *Server) Close() error {
	err := s.Stop()
	return errors.Join(err, s.removeConfigurations())
}

func (s *Server) removeConfigurations() error {
	var errs []error
	for _, obj := range []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: s.name}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: s.name}},
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: s.name + webhook.PoliciesSuffix}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: s.name + webhook.PoliciesSuffix}},
	} {
		errs = append(errs, client.IgnoreNotFound(s.client.Delete(context.Background(), obj)))
	}
	for _, obj := range s.clusterRBAC {
		errs = append(errs, client.IgnoreNotFound(s.client.Delete(context.Background(), obj)))
	}
	return errors.Join(errs...)
}
