// Package testcluster starts a real Kubernetes control plane on 127.0.0.1 —
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the Agent
// Sandbox controller with its extensions, and kwok simulating nodes — from the
// binaries hack/testbin.sh builds. Every integration and end-to-end test runs
// against it, started once per test package with Main; hack/localcluster
// starts the same cluster for a person.
package testcluster

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
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

// startTimeout bounds the whole bring-up; on this project's 2-core machines
// it takes about 10 s. Each kwok node adds perNodeStartTimeout: a scale
// test's thousand nodes take minutes to register and become Ready.
const (
	startTimeout        = 2 * time.Minute
	perNodeStartTimeout = 300 * time.Millisecond
)

// Cluster is a running test cluster.
type Cluster struct {
	opts options
	dir  string
	bins binaries
	// sandbox is the Agent Sandbox line the cluster runs.
	sandbox AgentSandboxLine
	pki     *pki
	// mu guards procs, which Restart and the restarting of exited
	// components replace while tests read them, and stopping.
	mu       sync.Mutex
	procs    []*Process
	stopping bool
	config   *rest.Config
	kube     kubernetes.Interface
	node     *realNode
	images   []testimages.Image
	// cleanups undo what Start did, run newest first: stopping each
	// process, and for a real node, its pods, mounts, cgroups, network and
	// sysctls.
	cleanups []func() error
}

// Start brings up a cluster and returns once every node is Ready and the
// Agent Sandbox API is served. On error nothing it started is left running.
func Start(ctx context.Context, opts ...Option) (_ *Cluster, err error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	bins, err := findBinaries()
	if err != nil {
		return nil, err
	}
	sandbox, err := bins.agentSandbox(o.agentSandboxVersion)
	if err != nil {
		return nil, err
	}
	// A suite killed before it stopped its cluster left the cluster's
	// processes, and a real node's mounts, cgroups and bridge: undo them
	// before starting another beside them.
	if err := reapAbandoned(filepath.Join(os.TempDir(), "sandbox-fleet-cluster-*")); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "sandbox-fleet-cluster-"); err != nil {
			return nil, err
		}
	}
	c := &Cluster{opts: o, dir: dir, bins: bins, sandbox: sandbox}
	if err := os.MkdirAll(c.LogDir(), 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = c.cleanup()
			err = fmt.Errorf("starting the test cluster: %w (component logs in %s)", err, c.LogDir())
		}
	}()
	if o.realNode {
		// Outside the bring-up's time limit: the first build of the
		// problem images' Debian base downloads and unpacks ~100 MB.
		if c.images, err = buildTestImages(ctx); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout+time.Duration(len(o.nodes))*perNodeStartTimeout)
	defer cancel()
	if err := c.start(ctx); err != nil {
		return nil, err
	}
	if err := c.saveState(!o.detached); err != nil {
		return nil, err
	}
	if o.restartExits {
		for i := range c.procs {
			go c.restartWhenExited(i)
		}
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context) error {
	p, err := newPKI(filepath.Join(c.dir, "pki"))
	if err != nil {
		return err
	}
	c.pki = p
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	etcdPort, etcdPeerPort, apiPort := ports[0], ports[1], ports[2]
	if err := c.startEtcd(ctx, etcdPort, etcdPeerPort); err != nil {
		return err
	}
	if err := c.startAPIServer(ctx, apiPort, etcdPort); err != nil {
		return err
	}
	// The rest only talk to the apiserver: start them together, then wait.
	waits, err := c.startControllers()
	if err != nil {
		return err
	}
	if c.opts.agentSandbox {
		if err := c.InstallCRDs(ctx); err != nil {
			return err
		}
		w, err := c.startAgentSandboxController(ctx)
		if err != nil {
			return err
		}
		waits = append(waits, w)
	}
	for _, wait := range waits {
		if err := wait(ctx); err != nil {
			return err
		}
	}
	if err := createNodes(ctx, c.kube, clusterKwok, c.opts.nodes); err != nil {
		return err
	}
	if c.opts.realNode {
		if err := c.startRealNode(ctx); err != nil {
			return err
		}
	}
	// Pods cannot be created in a namespace before its default service
	// account exists, so a test could otherwise race the controller-manager.
	return c.waitForServiceAccount(ctx, metav1.NamespaceDefault)
}

// waitFunc waits for a started component to be ready.
type waitFunc func(context.Context) error

func (c *Cluster) run(name string, args []string, env ...string) (*Process, error) {
	return c.runBinary(name, c.bins.bin(name), args, env...)
}

// runBinary is run of the component name from the binary bin.
func (c *Cluster) runBinary(name, bin string, args []string, env ...string) (*Process, error) {
	p, err := startProcess(name, bin, args, env, c.LogDir(), c.opts.detached, c.opts.cpus)
	if err != nil {
		return nil, err
	}
	i := len(c.procs)
	c.procs = append(c.procs, p)
	// By index: Restart puts a new process in the old one's place.
	c.cleanups = append(c.cleanups, func() error { return c.proc(i).stop(10 * time.Second) })
	return p, nil
}

// StartProcess runs bin next to the cluster's components, on cpus if any
// (nil: wherever the scheduler likes), logging to LogDir()/name.log. Like
// them it dies with this process, and Stop stops it if it still runs.
func (c *Cluster) StartProcess(name, bin string, args []string, cpus []int, env ...string) (*Process, error) {
	p, err := startProcess(name, bin, args, env, c.LogDir(), c.opts.detached, cpus)
	if err != nil {
		return nil, err
	}
	c.cleanups = append(c.cleanups, p.Stop)
	return p, nil
}

func (c *Cluster) startEtcd(ctx context.Context, port, peerPort int) error {
	client := fmt.Sprintf("http://127.0.0.1:%d", port)
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	p, err := c.run("etcd", []string{
		"--name=default",
		"--data-dir=" + filepath.Join(c.dir, "etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=default=" + peer,
		// Test data need not survive a crash; fsync dominates etcd's latency.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	})
	if err != nil {
		return err
	}
	return p.waitFor(ctx, "health", httpOK(http.DefaultClient, client+"/health"))
}

func (c *Cluster) startAPIServer(ctx context.Context, port, etcdPort int) error {
	serving, err := c.pki.serving("apiserver", []string{"127.0.0.1", "localhost", "10.96.0.1",
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"})
	if err != nil {
		return err
	}
	kubeletClient, err := c.pki.client("apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters")
	if err != nil {
		return err
	}
	sa, err := c.pki.serviceAccountKey()
	if err != nil {
		return err
	}
	admission, err := c.webhookClientConfig()
	if err != nil {
		return err
	}
	p, err := c.run("kube-apiserver", []string{
		// The API server presents WebhookClientName's certificate to
		// admission webhooks, as docs/admin.md has an admin configure it.
		"--admission-control-config-file=" + admission,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdPort),
		"--client-ca-file=" + c.pki.CAFile(),
		"--tls-cert-file=" + serving.Cert,
		"--tls-private-key-file=" + serving.Key,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + sa.Cert,
		"--service-account-signing-key-file=" + sa.Key,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--service-node-port-range=" + nodePortRange,
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		"--kubelet-client-certificate=" + kubeletClient.Cert,
		"--kubelet-client-key=" + kubeletClient.Key,
		// A real kubelet listens on 127.0.0.1, which cannot be a node IP;
		// its Hostname address (the machine's name) resolves there.
		"--kubelet-preferred-address-types=Hostname,InternalIP",
		// The kubernetes Service's endpoint would be 127.0.0.1, which
		// Endpoints reject; the real node routes the Service's address
		// to the API server itself (apiServerRule).
		"--endpoint-reconciler-type=none",
		// Webhook Services are called at their endpoints, pod addresses
		// the host reaches on the pod bridge: no kube-proxy runs here
		// to route their ClusterIPs.
		"--enable-aggregator-routing=true",
		// Benchmarks read its CPU profile (/debug/pprof, for system:masters).
		"--profiling=true",
	})
	if err != nil {
		return err
	}
	admin, err := c.pki.client("admin", "admin", "system:masters")
	if err != nil {
		return err
	}
	c.config = &rest.Config{
		Host: fmt.Sprintf("https://127.0.0.1:%d", port),
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: c.pki.CAFile(), CertFile: admin.Cert, KeyFile: admin.Key,
		},
	}
	if err := writeKubeconfig(c.Kubeconfig(), c.config); err != nil {
		return err
	}
	// The cluster's own client registers and watches over its nodes, a
	// thousand of them in a scale test: client-go's 5 requests a second
	// would take minutes.
	own := rest.CopyConfig(c.config)
	own.QPS, own.Burst = 500, 1000
	if c.kube, err = kubernetes.NewForConfig(own); err != nil {
		return err
	}
	return p.waitFor(ctx, "readyz", func(ctx context.Context) error {
		return c.kube.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
	})
}

// startControllers starts kube-controller-manager, kube-scheduler and kwok.
func (c *Cluster) startControllers() ([]waitFunc, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	cmPort, schedPort, kwokPort := ports[0], ports[1], ports[2]
	var waits []waitFunc

	cmKubeconfig, err := c.componentKubeconfig("kube-controller-manager", "system:kube-controller-manager")
	if err != nil {
		return nil, err
	}
	p, err := c.run("kube-controller-manager", append(kubeconfigFlags(cmKubeconfig),
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(cmPort),
		"--cert-dir="+filepath.Join(c.dir, "kube-controller-manager"),
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+filepath.Join(c.pki.dir, "sa.key"),
		"--root-ca-file="+c.pki.CAFile(),
		"--cluster-signing-cert-file="+c.pki.CAFile(),
		"--cluster-signing-key-file="+c.pki.CAKeyFile(),
		// kwok renews its nodes' leases through the same API server the
		// tests load; under a benchmark's load a renewal can lag past the
		// default 50s, and the node lifecycle controller would then mark
		// every Pod of the node NotReady, which kwok never undoes.
		"--node-monitor-grace-period=5m",
		"--profiling=false",
	))
	if err != nil {
		return nil, err
	}
	waits = append(waits, healthz(p, cmPort))

	schedKubeconfig, err := c.componentKubeconfig("kube-scheduler", "system:kube-scheduler")
	if err != nil {
		return nil, err
	}
	p, err = c.run("kube-scheduler", append(kubeconfigFlags(schedKubeconfig),
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(schedPort),
		"--cert-dir="+filepath.Join(c.dir, "kube-scheduler"),
		"--leader-elect=false",
		"--profiling=false",
	))
	if err != nil {
		return nil, err
	}
	waits = append(waits, healthz(p, schedPort))

	w, err := c.startKwok(kwokPort)
	if err != nil {
		return nil, err
	}
	return append(waits, w), nil
}

// componentKubeconfig issues a client certificate for user and writes a
// kubeconfig that uses it.
func (c *Cluster) componentKubeconfig(name, user string, groups ...string) (string, error) {
	kp, err := c.pki.client(name, user, groups...)
	if err != nil {
		return "", err
	}
	cfg := rest.CopyConfig(c.config)
	cfg.CertFile, cfg.KeyFile = kp.Cert, kp.Key
	path := filepath.Join(c.dir, name+".kubeconfig")
	return path, writeKubeconfig(path, cfg)
}

// ServiceAccountKubeconfig writes a kubeconfig that authenticates as
// ServiceAccount name of namespace, by a token good for a day, so that a
// component runs with the rights its manifests give it.
func (c *Cluster) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, error) {
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(24 * 60 * 60))}}
	req, err := c.kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("a token of ServiceAccount %s/%s: %w", namespace, name, err)
	}
	cfg := rest.AnonymousClientConfig(c.config)
	cfg.BearerToken = req.Status.Token
	path := filepath.Join(c.dir, namespace+"-"+name+".kubeconfig")
	return path, writeKubeconfig(path, cfg)
}

func kubeconfigFlags(path string) []string {
	return []string{"--kubeconfig=" + path, "--authentication-kubeconfig=" + path, "--authorization-kubeconfig=" + path}
}

// healthz waits for a component's secure /healthz, which serves a
// self-signed certificate and needs no client credentials.
func healthz(p *Process, port int) waitFunc {
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: insecureTLS()}}
	return func(ctx context.Context) error {
		return p.waitFor(ctx, "healthz", httpOK(insecure, fmt.Sprintf("https://127.0.0.1:%d/healthz", port)))
	}
}

// insecureTLS is for health checks of components that serve a certificate
// they generated themselves; they carry no data.
func insecureTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} } //nolint:gosec

// httpOK probes url: it answers 200 OK, with a body that holds each of says.
func httpOK(client *http.Client, url string, says ...string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		if len(says) == 0 {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		for _, want := range says {
			if !strings.Contains(string(body), want) {
				return fmt.Errorf("GET %s does not say %s yet", url, want)
			}
		}
		return nil
	}
}

// WebhookClientName is the common name of the client certificate the
// API server presents to admission webhooks.
const WebhookClientName = "kube-apiserver-webhook-client"

// WebhookClient is the client certificate and key the API server presents
// to admission webhooks, and the CA that signed them.
func (c *Cluster) WebhookClient() (certFile, keyFile, caFile string) {
	kp := c.pki.pair("apiserver-webhook-client")
	return kp.Cert, kp.Key, c.pki.CAFile()
}

// webhookClientConfig issues the API server's webhook client certificate
// and writes the AdmissionConfiguration that has it presented to every
// admission webhook, returning the configuration's path.
func (c *Cluster) webhookClientConfig() (string, error) {
	kp, err := c.pki.client("apiserver-webhook-client", WebhookClientName)
	if err != nil {
		return "", err
	}
	kubeconfig := filepath.Join(c.dir, "webhook-client.kubeconfig")
	if err := os.WriteFile(kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
users:
- name: "*"
  user:
    client-certificate: %s
    client-key: %s
`, kp.Cert, kp.Key), 0o600); err != nil {
		return "", err
	}
	config := filepath.Join(c.dir, "admission.yaml")
	plugin := func(name string) string {
		return fmt.Sprintf(`- name: %s
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %s
`, name, kubeconfig)
	}
	return config, os.WriteFile(config, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n"+
		plugin("ValidatingAdmissionWebhook")+plugin("MutatingAdmissionWebhook")), 0o600)
}

// Kubeconfig is the path of an admin kubeconfig for the cluster.
func (c *Cluster) Kubeconfig() string { return filepath.Join(c.dir, "kubeconfig") }

// LogDir holds one log file per component.
func (c *Cluster) LogDir() string { return filepath.Join(c.dir, "logs") }

// Dir is the cluster's run directory.
func (c *Cluster) Dir() string { return c.dir }

// RESTConfig is an admin (system:masters) client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.config) }

// Clients returns the project's clients for the cluster, working in namespace.
func (c *Cluster) Clients(namespace string) (*kube.Clients, error) {
	return kube.ForConfig(c.config, namespace)
}

// Stop undoes Start, newest first — components, and on a real node its pods,
// mounts, cgroups, bridge and sysctls — and removes the run directory unless
// keepLogs is set, in which case only the logs stay.
func (c *Cluster) Stop(keepLogs bool) error {
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
	err := c.cleanup()
	if c.node != nil {
		if left := c.node.leftovers(c.bins.dir); len(left) > 0 {
			err = errors.Join(err, fmt.Errorf("the real node left behind: %s", strings.Join(left, "; ")))
		}
	}
	if keepLogs {
		entries, _ := os.ReadDir(c.dir)
		for _, e := range entries {
			if e.Name() != "logs" {
				err = errors.Join(err, os.RemoveAll(filepath.Join(c.dir, e.Name())))
			}
		}
		return err
	}
	return errors.Join(err, os.RemoveAll(c.dir))
}

func (c *Cluster) cleanup() error {
	var errs []error
	for i := len(c.cleanups) - 1; i >= 0; i-- {
		errs = append(errs, c.cleanups[i]())
	}
	c.cleanups = nil
	return errors.Join(errs...)
}

func writeKubeconfig(path string, cfg *rest.Config) error {
	const name = "sandbox-fleet-local"
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthority: cfg.CAFile}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificate: cfg.CertFile, ClientKey: cfg.KeyFile, Token: cfg.BearerToken}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: metav1.NamespaceDefault}
	kc.CurrentContext = name
	return clientcmd.WriteToFile(*kc, path)
}

func (c *Cluster) waitForServiceAccount(ctx context.Context, namespace string) error {
	return poll(ctx, "the default service account of namespace "+namespace, func(ctx context.Context) error {
		_, err := c.kube.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// poll retries check every 50 ms until it succeeds or ctx ends. Bring-up
// uses it for conditions no watch can express (health endpoints, a resource
// appearing in discovery); tests of the product never poll.
func poll(ctx context.Context, what string, check func(context.Context) error) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), err)
		case <-tick.C:
		}
	}
}
