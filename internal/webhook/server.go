// Package webhook is asrl-webhook: an admission webhook that applies the
// cluster's SandboxPolicies to sandbox Pods as they are created, whichever
// client started the sandbox, and refuses SandboxTemplates whose Pods the
// policies would refuse. The decisions are pkg/webhook's; this
// package serves them over TLS with self-managed certificates, counts them
// in each policy's status and in Prometheus metrics.
package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/informer"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/registry"
	policy "github.com/sandbox-fleet/sandbox-fleet/pkg/webhook"
)

// Options configure the webhook server.
type Options struct {
	// Host and Port the TLS server listens on.
	Host string
	Port int
	// CertDir holds tls.crt and tls.key: written by the rotator, or
	// mounted by cert-manager when ManageCerts is off.
	CertDir string
	// ClientCAFile, when set, is the CA of the client certificate the API
	// server presents to webhooks (its AdmissionConfiguration's
	// kubeConfigFile): a caller without a certificate it signed is
	// refused at the handshake, so nothing but the API server can send
	// the webhook a review. ClientNames, when set, are the common names
	// such a certificate may have.
	ClientCAFile string
	ClientNames  []string
	// ClientNamesFile holds more such names, separated by commas or
	// white space: the shipped Deployment's from its ConfigMap.
	ClientNamesFile string
	// CallersByNetworkPolicy says the admin keeps every caller but the
	// control plane away from the webhook by a NetworkPolicy
	// (manifests/webhook-network-policy) because the API server cannot
	// present a client certificate. Without it or ClientCAFile the
	// webhook refuses to start: anyone reaching it could send it reviews.
	CallersByNetworkPolicy bool
	// MetricsAddr and HealthAddr serve /metrics and /healthz, /readyz;
	// "0" turns one off.
	MetricsAddr, HealthAddr string
	// MetricsSecure serves /metrics over TLS to clients whose token the
	// API server authenticates and authorises for it (a ClusterRole with
	// nonResourceURLs /metrics, verb get).
	MetricsSecure bool

	// ManageCerts has the built-in rotator keep a CA and serving
	// certificate in the Secret SecretNamespace/SecretName, for the DNS
	// names DNSName and ExtraDNSNames, and inject the CA into the webhook
	// configurations MutatingWebhook and ValidatingWebhook.
	ManageCerts                        bool
	SecretNamespace, SecretName        string
	DNSName                            string
	ExtraDNSNames                      []string
	MutatingWebhook, ValidatingWebhook string
	// WriteCertDir copies the rotator's certificate from its Secret into
	// CertDir, for a webhook that does not run in a Pod mounting the
	// Secret there (a test, or a developer's machine).
	WriteCertDir bool

	// SkipCompliantPods gives each policy's sandbox Pod entry its CEL
	// condition (PolicyWebhooks), so the API server calls the webhook
	// only for Pods it has something to do for.
	SkipCompliantPods bool

	// LeaderElection elects, by a Lease named MutatingWebhook in
	// LeaseNamespace, the one replica that writes the policies' entries
	// and their InForce conditions; every replica serves admissions.
	LeaderElection bool
	LeaseNamespace string

	// StatusInterval is how often policy statuses receive the counts.
	StatusInterval time.Duration
}

// Run serves the webhook until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, o Options) error {
	if o.MutatingWebhook == "" || o.ValidatingWebhook == "" {
		return errors.New("the webhook configurations' names are needed: the policies' entries are made from theirs")
	}
	mgr, err := newManager(cfg, o)
	if err != nil {
		return err
	}
	tlsOpts, err := clientAuth(o)
	if err != nil {
		return err
	}
	srv := webhook.NewServer(webhook.Options{Host: o.Host, Port: o.Port, CertDir: o.CertDir, TLSOpts: tlsOpts})
	counts := &Counts{Client: mgr.GetClient(), Interval: o.StatusInterval}
	view := &policyView{Reader: mgr.GetCache(), Live: mgr.GetAPIReader()}
	configurations := policyConfigurations{Reader: mgr.GetAPIReader(), Client: mgr.GetClient(),
		Mutating: o.MutatingWebhook, Validating: o.ValidatingWebhook, SkipCompliant: o.SkipCompliantPods}
	register(ctx, cfg, srv, view, counts, &configurations)
	certsReady, err := manageCerts(ctx, mgr, o)
	if err != nil {
		return err
	}
	// The TLS server starts once its certificate is on disk; until then
	// the readiness check fails.
	go func() {
		select {
		case <-certsReady:
			if err := mgr.Add(srv); err != nil {
				klog.ErrorS(err, "starting the webhook server")
			}
		case <-ctx.Done():
		}
	}()
	if err := addChecks(mgr, srv, certsReady); err != nil {
		return err
	}
	if err := mgr.Add(counts); err != nil {
		return err
	}
	if err := mgr.Add(&policySync{policyConfigurations: configurations, Cache: mgr.GetCache()}); err != nil {
		return err
	}
	if err := mgr.Add(&networkSync{Cache: mgr.GetCache(), Reader: mgr.GetAPIReader(), Client: mgr.GetClient()}); err != nil {
		return err
	}
	if err := follow(ctx, mgr, view); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// fencesSelector selects the NetworkPolicies written for policies'
// spec.network.
var fencesSelector = labels.SelectorFromSet(labels.Set{policy.NetworkIsolationLabel: "true"})

// newManager is the webhook's controller manager: its metrics and probes,
// leader election (the elected replica keeps the policies' entries and
// counts), a cache without managed fields.
func newManager(cfg *rest.Config, o Options) (manager.Manager, error) {
	metrics := metricsserver.Options{BindAddress: o.MetricsAddr}
	if o.MetricsSecure {
		metrics.SecureServing, metrics.FilterProvider = true, filters.WithAuthenticationAndAuthorization
	}
	mgr, err := manager.New(cfg, manager.Options{
		Scheme:                        kube.Scheme,
		Metrics:                       metrics,
		HealthProbeBindAddress:        o.HealthAddr,
		LeaderElection:                o.LeaderElection,
		LeaderElectionID:              o.MutatingWebhook,
		LeaderElectionNamespace:       o.LeaseNamespace,
		LeaderElectionReleaseOnCancel: true,
		Cache: cache.Options{
			DefaultTransform: cache.TransformStripManagedFields(),
			// Only the NetworkPolicies the webhook writes: the cluster's
			// others are no memory of its.
			ByObject: map[client.Object]cache.ByObject{&networkingv1.NetworkPolicy{}: {Label: fencesSelector}},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	return mgr, nil
}

// register serves each admission handler at its path, and under it at
// the paths of the policies' entries, which name the policy they stand
// for.
func register(ctx context.Context, cfg *rest.Config, srv webhook.Server, view *policyView, counts *Counts, configurations *policyConfigurations) {
	// The nodes' caches are followed only once a policy asks for them: a
	// cluster's worth of layer indexes is memory a webhook whose policies
	// never use it should not hold.
	nodeCaches := sync.OnceValue(func() *informer.Caches {
		clients, err := kube.ForConfig(cfg, "")
		if err != nil {
			klog.FromContext(ctx).Error(err, "Not following NodeImageCaches: policies' nodeCache is not applied")
			return nil
		}
		return informer.Start(ctx, clients.Client)
	})
	// An image no node lists is read from its registry, with the
	// webhook's docker config (DOCKER_CONFIG) for credentials.
	unlisted := &registry.Layers{Failed: func(ref string, err error) {
		klog.FromContext(ctx).Info("Reading an image's layers from its registry failed: no node-cache affinity for its Pods for now", "image", ref, "err", err)
	}}
	for path, h := range map[string]admission.Handler{
		MutatePodsPath:        &PodMutator{View: view, Counts: counts, NodeCaches: nodeCaches, Registry: unlisted},
		MutateTemplatesPath:   &TemplateMutator{View: view},
		ValidateTemplatesPath: &TemplateValidator{View: view, Counts: counts},
		ValidateSecretsPath:   &SecretValidator{View: view, Counts: counts},
		ValidateOtherPodsPath: &OtherPodValidator{View: view, Counts: counts},
	} {
		srv.Register(path, &webhook.Admission{Handler: h})
		srv.Register(path+"/", &webhook.Admission{Handler: h, WithContextFunc: withPolicyRef(path)})
	}
	srv.Register(ValidatePoliciesPath, &webhook.Admission{Handler: &PolicyAdmitter{configurations: configurations}})
}

// manageCerts has the rotator keep the serving certificate when o asks
// for it, and returns a channel closed once the certificate is ready.
func manageCerts(ctx context.Context, mgr manager.Manager, o Options) (<-chan struct{}, error) {
	certsReady := make(chan struct{})
	if !o.ManageCerts {
		close(certsReady)
		return certsReady, nil
	}
	key := types.NamespacedName{Namespace: o.SecretNamespace, Name: o.SecretName}
	if err := ensureSecret(ctx, mgr, key); err != nil {
		return nil, err
	}
	if err := rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:      key,
		CertDir:        o.CertDir,
		CAName:         "asrl-webhook-ca",
		CAOrganization: "sandbox-fleet",
		DNSName:        o.DNSName,
		ExtraDNSNames:  o.ExtraDNSNames,
		IsReady:        certsReady,
		Webhooks: []rotator.WebhookInfo{
			{Name: o.MutatingWebhook, Type: rotator.Mutating},
			{Name: o.ValidatingWebhook, Type: rotator.Validating},
		},
	}); err != nil {
		return nil, fmt.Errorf("setting up certificate rotation: %w", err)
	}
	if o.WriteCertDir {
		if err := mgr.Add(everywhere(func(ctx context.Context) error {
			return writeCertDir(ctx, mgr.GetAPIReader(), key, o.CertDir)
		})); err != nil {
			return nil, err
		}
	}
	return certsReady, nil
}

// addChecks adds the probes: healthy while the process runs; ready once
// the certificate is served and the cache holds what admissions read —
// before, a replica would refuse or wait.
func addChecks(mgr manager.Manager, srv webhook.Server, certsReady <-chan struct{}) error {
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	var synced atomic.Bool
	if err := mgr.Add(everywhere(func(ctx context.Context) error {
		synced.Store(mgr.GetCache().WaitForCacheSync(ctx))
		return nil
	})); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("webhook", func(req *http.Request) error {
		select {
		case <-certsReady:
		default:
			return errors.New("the serving certificate is not ready yet")
		}
		if !synced.Load() {
			return errors.New("the cache of policies, namespaces and sandboxes is not synced yet")
		}
		return srv.StartedChecker()(req)
	})
}

// follow has the cache follow what admissions read from the start:
// SandboxPolicies (and their deletions, which the view forgets), the
// NetworkPolicies written for them, and only the metadata of namespaces
// and sandboxes, for labels and owners.
func follow(ctx context.Context, mgr manager.Manager, view *policyView) error {
	inf, err := mgr.GetCache().GetInformer(ctx, &v1alpha1.SandboxPolicy{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("following SandboxPolicies: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: view.OnDelete}); err != nil {
		return err
	}
	if _, err := mgr.GetCache().GetInformer(ctx, &networkingv1.NetworkPolicy{}, cache.BlockUntilSynced(false)); err != nil {
		return fmt.Errorf("following the policies' NetworkPolicies: %w", err)
	}
	for _, gvk := range []schema.GroupVersionKind{corev1.SchemeGroupVersion.WithKind("Namespace"), sandboxv1beta1.GroupVersion.WithKind("Sandbox"),
		extensionsv1beta1.GroupVersion.WithKind("SandboxWarmPool"), extensionsv1beta1.GroupVersion.WithKind("SandboxClaim")} {
		if _, err := mgr.GetCache().GetInformer(ctx, metadataOf(gvk), cache.BlockUntilSynced(false)); err != nil {
			return fmt.Errorf("following %s: %w", gvk.Kind, err)
		}
	}
	return nil
}

// everywhere is a runnable every replica runs, elected or not.
type everywhere func(context.Context) error

func (f everywhere) Start(ctx context.Context) error { return f(ctx) }

func (everywhere) NeedLeaderElection() bool { return false }

// ensureSecret creates the certificate Secret key unless it exists: the
// rotator fills a Secret in but does not create it. It reads first, since
// the manifests, which create the Secret, grant no create, and a create
// of an existing Secret would then be refused as forbidden.
func ensureSecret(ctx context.Context, mgr manager.Manager, key types.NamespacedName) error {
	err := mgr.GetAPIReader().Get(ctx, key, &corev1.Secret{})
	if apierrors.IsNotFound(err) {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		if err := mgr.GetClient().Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the certificate Secret %s: %w", key, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the certificate Secret %s: %w", key, err)
	}
	return nil
}

// ServiceDNSNames are the names a Service's clients may use for it: the
// certificate's DNS name and the others it must also hold.
func ServiceDNSNames(service, namespace string) (name string, extra []string) {
	name = service + "." + namespace + ".svc"
	return name, []string{service, service + "." + namespace, name + ".cluster.local"}
}

// clientAuth are the TLS options that let only callers with a client
// certificate o.ClientCAFile signed, with one of o's client names as its
// common name (any, when it names none), reach the webhook; none when
// there is no CA and the admin said a NetworkPolicy keeps other callers
// away.
func clientAuth(o Options) ([]func(*tls.Config), error) {
	caFile, names := o.ClientCAFile, o.ClientNames
	// The shipped Deployment names the ConfigMap's CA; with the
	// NetworkPolicy chosen instead, the admin need not create it.
	if _, err := os.Stat(caFile); o.CallersByNetworkPolicy && errors.Is(err, fs.ErrNotExist) {
		caFile, o.ClientNamesFile = "", ""
	}
	if caFile == "" {
		if len(names) > 0 || o.ClientNamesFile != "" {
			return nil, errors.New("--client-names needs --client-ca-file: the names are those of certificates it signed")
		}
		if !o.CallersByNetworkPolicy {
			return nil, errors.New("no caller authentication: set --client-ca-file to the CA of the client certificate the API server presents to webhooks, " +
				"or, where the API server cannot present one, apply manifests/webhook-network-policy and set --callers-by-network-policy (docs/admin.md, Security model)")
		}
		return nil, nil
	}
	b, err := os.ReadFile(caFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("--client-ca-file %s does not exist: %s", caFile, clientCAHowTo)
	}
	if err != nil {
		return nil, fmt.Errorf("--client-ca-file: %w", err)
	}
	if o.ClientNamesFile != "" {
		text, err := os.ReadFile(o.ClientNamesFile)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("--client-names-file %s does not exist: %s", o.ClientNamesFile, clientCAHowTo)
		}
		if err != nil {
			return nil, fmt.Errorf("--client-names-file: %w", err)
		}
		names = append(slices.Clone(names), strings.FieldsFunc(string(text), func(r rune) bool { return r == ',' || unicode.IsSpace(r) })...)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("--client-ca-file %s holds no PEM certificate", caFile)
	}
	return []func(*tls.Config){func(cfg *tls.Config) {
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(names) == 0 {
				return nil
			}
			if cn := cs.PeerCertificates[0].Subject.CommonName; !slices.Contains(names, cn) {
				return fmt.Errorf("client certificate %q is none of --client-names %v", cn, names)
			}
			return nil
		}
	}}, nil
}

// clientCAHowTo says where the shipped Deployment reads the caller's CA
// and names from.
const clientCAHowTo = "create the ConfigMap asrl-webhook-client-ca in the webhook's namespace with key ca.crt, the CA of the client certificate " +
	"the API server presents to webhooks, and key client-names, that certificate's common name (docs/admin.md, Security model)"

// writeCertDir keeps dir's tls.crt and tls.key equal to those of the Secret
// key, checking every second, until ctx ends. The webhook server reloads
// them when they change.
func writeCertDir(ctx context.Context, c client.Reader, key types.NamespacedName, dir string) error {
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		secret := &corev1.Secret{}
		if err := c.Get(ctx, key, secret); err == nil {
			for _, name := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey} {
				data := secret.Data[name]
				path := filepath.Join(dir, name)
				if old, _ := os.ReadFile(path); len(data) == 0 || bytes.Equal(old, data) {
					continue
				}
				// Written aside and renamed, so a reader never sees half a key.
				if err := os.WriteFile(path+".new", data, 0o600); err != nil {
					return err
				}
				if err := os.Rename(path+".new", path); err != nil {
					return err
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}
