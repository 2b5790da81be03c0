package testcluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/preflight"
)

// InstallCRDs creates the CRDs of the cluster's Agent Sandbox line, and
// with them the project's own (manifests/crd), unless they exist, and
// waits until they are established: the cluster does at start, a test
// that uninstalled the project's again. Conversion is set to None: the stock Agent Sandbox CRDs
// point at the controller's conversion webhook, which the test cluster
// does not run (it would bind every interface), and the project uses
// v1beta1 only.
func (c *Cluster) InstallCRDs(ctx context.Context) error {
	files, err := c.sandbox.crdFiles()
	if err != nil || len(files) == 0 {
		return fmt.Errorf("the CRDs of Agent Sandbox %s are missing from %s: rerun `make testbin`", c.sandbox.Version, c.bins.dir)
	}
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	own, err := filepath.Glob(filepath.Join(root, "manifests", "crd", "sandbox-fleet.io_*.yaml"))
	if err != nil {
		return err
	}
	files = append(files, own...)
	ext, err := apiextensionsclient.NewForConfig(c.config)
	if err != nil {
		return err
	}
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
		if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
		}
		names = append(names, crd.Name)
	}
	// Established is not enough: discovery, which controllers map kinds
	// through when they start, may serve a new CRD a moment later.
	for _, name := range names {
		err := poll(ctx, "CRD "+name+" to be established and discoverable", func(ctx context.Context) error {
			crd, err := crds.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			established := false
			for _, cond := range crd.Status.Conditions {
				established = established || cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue
			}
			if !established {
				return fmt.Errorf("CRD %s is not established", name)
			}
			for _, v := range crd.Spec.Versions {
				if !v.Served {
					continue
				}
				list, err := ext.Discovery().ServerResourcesForGroupVersion(crd.Spec.Group + "/" + v.Name)
				if err != nil {
					return err
				}
				if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == crd.Spec.Names.Plural }) {
					return fmt.Errorf("discovery does not serve %s in %s/%s yet", crd.Spec.Names.Plural, crd.Spec.Group, v.Name)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// AgentSandboxVersion is the version of the Agent Sandbox controller the
// cluster runs.
func (c *Cluster) AgentSandboxVersion() string { return c.sandbox.Version }

// startAgentSandboxController runs the controller of the cluster's line
// with its extensions (templates, warm pools, claims), electing its leader
// in its own namespace as its release manifests do. It is ready once it
// leads.
func (c *Cluster) startAgentSandboxController(ctx context.Context) (waitFunc, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: preflight.ControllerNamespace}}
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating namespace %s: %w", ns.Name, err)
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	probe := "127.0.0.1:" + strconv.Itoa(ports[1])
	p, err := c.runBinary("agent-sandbox-controller", c.sandbox.Controller(), append(c.sandbox.controllerArgs(),
		// Leader election as its Deployment runs it, so that the Lease a
		// preflight looks for is there.
		"--leader-elect=true",
		"--leader-election-namespace="+preflight.ControllerNamespace,
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(ports[0]),
		"--health-probe-bind-address="+probe,
	), "KUBECONFIG="+c.Kubeconfig())
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		if err := p.waitFor(ctx, "readyz", httpOK(http.DefaultClient, "http://"+probe+"/readyz")); err != nil {
			return err
		}
		// It leads once its own metrics say so: the Lease alone may still
		// be a killed predecessor's, unexpired, which a restarted replica
		// waits out before it takes over.
		return p.waitFor(ctx, "it leads", httpOK(http.DefaultClient, "http://127.0.0.1:"+strconv.Itoa(ports[0])+"/metrics",
			`leader_election_master_status{name="`+preflight.ControllerLease+`"} 1`))
	}, nil
}
