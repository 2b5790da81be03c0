package testcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the cluster's certificate authority and the key pairs issued from it,
// all written under dir.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
}

// keyPair names the PEM files of one issued certificate.
type keyPair struct{ Cert, Key string }

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "sandbox-fleet-test-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, caCert: cert, caKey: key}
	if err := p.write("ca", der, key); err != nil {
		return nil, err
	}
	return p, nil
}

// CAFile is the CA certificate every component trusts.
func (p *pki) CAFile() string    { return filepath.Join(p.dir, "ca.crt") }
func (p *pki) CAKeyFile() string { return filepath.Join(p.dir, "ca.key") }

// serving issues a server certificate for the given host names and IPs.
func (p *pki) serving(name string, hosts []string) (keyPair, error) {
	tmpl := p.template(pkix.Name{CommonName: name}, x509.ExtKeyUsageServerAuth)
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return p.issue(name, tmpl)
}

// client issues a client certificate for user in groups.
func (p *pki) client(name, user string, groups ...string) (keyPair, error) {
	return p.issue(name, p.template(pkix.Name{CommonName: user, Organization: groups}, x509.ExtKeyUsageClientAuth))
}

// serviceAccountKey writes the key pair that signs service account tokens.
func (p *pki) serviceAccountKey() (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return keyPair{}, err
	}
	kp := keyPair{Cert: filepath.Join(p.dir, "sa.pub"), Key: filepath.Join(p.dir, "sa.key")}
	if err := writePEM(kp.Cert, "PUBLIC KEY", pub); err != nil {
		return keyPair{}, err
	}
	return kp, writeKey(kp.Key, key)
}

func (p *pki) template(subject pkix.Name, usage x509.ExtKeyUsage) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber: serial(),
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
}

func (p *pki) issue(name string, tmpl *x509.Certificate) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return keyPair{}, fmt.Errorf("issuing %s certificate: %w", name, err)
	}
	return p.pair(name), p.write(name, der, key)
}

func (p *pki) pair(name string) keyPair {
	return keyPair{Cert: filepath.Join(p.dir, name+".crt"), Key: filepath.Join(p.dir, name+".key")}
}

func (p *pki) write(name string, der []byte, key *ecdsa.PrivateKey) error {
	kp := p.pair(name)
	if err := writePEM(kp.Cert, "CERTIFICATE", der); err != nil {
		return err
	}
	return writeKey(kp.Key, key)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

// ServingCert makes, in dir, a CA of its own and a serving certificate it
// signs for hosts (names or IPs), for tests of servers clients must
// verify: the files of the CA's certificate, the serving certificate and
// its key.
func ServingCert(dir string, hosts ...string) (caFile, certFile, keyFile string, err error) {
	p, err := newPKI(dir)
	if err != nil {
		return "", "", "", err
	}
	kp, err := p.serving("serving", hosts)
	if err != nil {
		return "", "", "", err
	}
	return p.CAFile(), kp.Cert, kp.Key, nil
}
