// Command asrl-webhook is the admission webhook that applies SandboxPolicies
// to sandbox Pods; see internal/webhook and manifests/.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sandbox-fleet/sandbox-fleet/internal/webhook"
)

func main() {
	ctrl.SetLogger(klog.NewKlogr())
	o := webhook.Options{}
	var service, dnsName, clientNames string
	flag.StringVar(&o.Host, "host", "", "address the TLS server listens on (default: all)")
	flag.IntVar(&o.Port, "port", 9443, "port the TLS server listens on")
	flag.StringVar(&o.CertDir, "cert-dir", "/certs", "directory of tls.crt and tls.key")
	flag.StringVar(&o.ClientCAFile, "client-ca-file", "", "CA of the client certificate the API server presents to webhooks (its AdmissionConfiguration's kubeConfigFile); set, only callers with a certificate it signed are served")
	flag.StringVar(&o.ClientNamesFile, "client-names-file", "", "file of more --client-names, separated by commas or white space (the shipped Deployment's, from the ConfigMap asrl-webhook-client-ca)")
	flag.StringVar(&clientNames, "client-names", "", "comma-separated common names the client certificate may have (default: any the --client-ca-file signed)")
	flag.BoolVar(&o.CallersByNetworkPolicy, "callers-by-network-policy", false, "serve without --client-ca-file: the admin keeps every caller but the control plane away by a NetworkPolicy (manifests/webhook-network-policy); without either the webhook refuses to start")
	flag.StringVar(&o.MetricsAddr, "metrics-addr", ":8080", "address of /metrics; 0 turns it off")
	flag.BoolVar(&o.MetricsSecure, "metrics-secure", true, "serve /metrics over TLS to tokens the API server authorises for it (nonResourceURLs /metrics, get); false serves plain HTTP to anyone reaching it, for a --metrics-addr on localhost")
	flag.StringVar(&o.HealthAddr, "health-addr", ":8081", "address of /healthz and /readyz; 0 turns them off")
	flag.BoolVar(&o.ManageCerts, "manage-certs", true, "keep the serving certificate in a Secret and the CA in the webhook configurations; off when cert-manager does it")
	flag.StringVar(&o.SecretNamespace, "secret-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the certificate Secret (default: $POD_NAMESPACE)")
	flag.StringVar(&o.SecretName, "secret-name", "asrl-webhook-cert", "name of the certificate Secret")
	flag.StringVar(&service, "service-name", "asrl-webhook", "the webhook's Service, whose DNS name the certificate is for")
	flag.StringVar(&dnsName, "dns-name", "", "DNS name the serving certificate is for instead of the Service's, for a webhook called by URL")
	flag.BoolVar(&o.WriteCertDir, "write-cert-dir", false, "copy the certificate from its Secret into --cert-dir, for a webhook that runs outside a Pod mounting it")
	flag.StringVar(&o.MutatingWebhook, "mutating-webhook-configuration", "asrl-webhook", "MutatingWebhookConfiguration whose caBundle the rotator sets and whose template entries the policies' entries, in the one named with -policies, are made from")
	flag.StringVar(&o.ValidatingWebhook, "validating-webhook-configuration", "asrl-webhook", "ValidatingWebhookConfiguration, as --mutating-webhook-configuration")
	flag.BoolVar(&o.SkipCompliantPods, "skip-compliant-pods", true, "give each policy's sandbox Pod entry a CEL matchCondition so the API server calls the webhook only for Pods the policy would change or refuse")
	flag.BoolVar(&o.LeaderElection, "leader-elect", true, "elect one replica, by a Lease, to write the policies' entries and status")
	flag.StringVar(&o.LeaseNamespace, "lease-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the election's Lease (default: $POD_NAMESPACE)")
	flag.DurationVar(&o.StatusInterval, "status-interval", 10*time.Second, "how often policy statuses receive the mutation and denial counts")
	klog.InitFlags(nil)
	flag.Parse()

	if clientNames != "" {
		o.ClientNames = strings.Split(clientNames, ",")
	}
	o.DNSName, o.ExtraDNSNames = webhook.ServiceDNSNames(service, o.SecretNamespace)
	if dnsName != "" {
		o.DNSName, o.ExtraDNSNames = dnsName, nil
	}
	if o.ManageCerts && o.SecretNamespace == "" {
		fmt.Fprintln(os.Stderr, "asrl-webhook: --secret-namespace (or $POD_NAMESPACE) is needed to manage certificates")
		os.Exit(2)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintf(os.Stderr, "asrl-webhook: %v\n", err)
		os.Exit(1)
	}
	if err := webhook.Run(ctrl.SetupSignalHandler(), cfg, o); err != nil {
		fmt.Fprintf(os.Stderr, "asrl-webhook: %v\n", err)
		os.Exit(1)
	}
}
