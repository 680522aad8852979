package gateway_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// testCA is a throwaway certificate authority.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key signed by ca.
func (ca *testCA) issue(t *testing.T, name string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRLSMutualTLS: with --rls-tls-cert, --rls-tls-key and --rls-client-ca
// only clients with a certificate of that CA are served; plaintext, no
// client certificate and a certificate of another CA are refused.
func TestRLSMutualTLS(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, "http://127.0.0.1:1", rule("t", "*", "*", 5, slow))
	ca, other := newTestCA(t, "rls-ca"), newTestCA(t, "other-ca")
	serverCert, serverKey := ca.issue(t, "gateway", true)
	o := e.rlsOptions(srv.Addr())
	o.RLSTLSCert = writeFile(t, e.dir, "tls.crt", serverCert)
	o.RLSTLSKey = writeFile(t, e.dir, "tls.key", serverKey)
	o.RLSClientCA = writeFile(t, e.dir, "ca.crt", ca.pem)
	gw := start(t, o, testLogger(t))

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	call := func(creds credentials.TransportCredentials) error {
		cc, err := grpc.NewClient("passthrough:///"+gw.RLSAddr(), grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		_, err = rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "envoy", Descriptors: []*ratelimitv3.RateLimitDescriptor{tr("shop-a", "r")}})
		return err
	}
	withCert := func(c *testCA) credentials.TransportCredentials {
		certPEM, keyPEM := c.issue(t, "envoy", false)
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	}
	if err := call(withCert(ca)); err != nil {
		t.Fatalf("client certificate of the CA: %v", err)
	}
	for name, creds := range map[string]credentials.TransportCredentials{
		"plaintext":              insecure.NewCredentials(),
		"no client certificate":  credentials.NewTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}),
		"certificate of another": withCert(other),
	} {
		if err := call(creds); err == nil {
			t.Errorf("%s: served", name)
		}
	}
	if n := srv.Client(t).DBSize(t.Context()).Val(); n != 1 {
		t.Errorf("%d Redis keys, want 1 (only the authenticated call decides)", n)
	}

	// Flag combinations that cannot work are refused at start.
	bad := e.rlsOptions(srv.Addr())
	bad.RLSClientCA = o.RLSClientCA
	if err := bad.Validate(); err == nil {
		t.Error("--rls-client-ca without a server certificate was accepted")
	}
	bad.RLSTLSCert, bad.RLSClientCA = o.RLSTLSCert, ""
	if err := bad.Validate(); err == nil {
		t.Error("--rls-tls-cert without --rls-tls-key was accepted")
	}
}
