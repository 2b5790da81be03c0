package webhook

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The webhook starts only with a way to tell the API server from other
// callers, and says what to set when it has none.
func TestClientAuth(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	names := filepath.Join(dir, "client-names")
	for _, f := range []struct{ path, text string }{{ca, selfSigned(t)}, {names, "kube-apiserver-webhook-client,\nother\n"}} {
		if err := os.WriteFile(f.path, []byte(f.text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	missing := filepath.Join(dir, "missing")
	for _, tt := range []struct {
		name    string
		o       Options
		wantErr string
	}{
		{"nothing set", Options{}, "no caller authentication: set --client-ca-file"},
		{"the admin chose a NetworkPolicy", Options{CallersByNetworkPolicy: true}, ""},
		{"a CA", Options{ClientCAFile: ca}, ""},
		{"a CA and names from the ConfigMap", Options{ClientCAFile: ca, ClientNamesFile: names}, ""},
		{"names without a CA", Options{ClientNames: []string{"x"}, CallersByNetworkPolicy: true}, "--client-names needs --client-ca-file"},
		{"the NetworkPolicy chosen, the ConfigMap not created", Options{ClientCAFile: missing, ClientNamesFile: missing, CallersByNetworkPolicy: true}, ""},
		{"the ConfigMap not created", Options{ClientCAFile: missing}, "create the ConfigMap asrl-webhook-client-ca"},
		{"the ConfigMap without client-names", Options{ClientCAFile: ca, ClientNamesFile: missing}, "--client-names-file " + missing + " does not exist"},
		{"not a certificate", Options{ClientCAFile: names}, "holds no PEM certificate"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := clientAuth(tt.o)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("clientAuth(%+v) = %v, want %q", tt.o, err, tt.wantErr)
			}
		})
	}
	// The file's names are the ones a caller's certificate may have.
	opts, err := clientAuth(Options{ClientCAFile: ca, ClientNamesFile: names})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{}
	for _, o := range opts {
		o(cfg)
	}
	for cn, allowed := range map[string]bool{"kube-apiserver-webhook-client": true, "other": true, "kubernetes-admin": false, "": false} {
		t.Run("a certificate of "+cn, func(t *testing.T) {
			err := cfg.VerifyConnection(tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: cn}}}})
			if (err == nil) != allowed {
				t.Errorf("a caller named %q: %v, want allowed=%v", cn, err, allowed)
			}
		})
	}
}

// selfSigned is a CA certificate in PEM.
func selfSigned(t *testing.T) string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
