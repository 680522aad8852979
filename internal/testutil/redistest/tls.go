package redistest

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testutil/certtest"
)

// TLSServer is a redis-server that also listens with TLS: Addr on
// 127.0.0.1 (its certificate names localhost), signed by the self-signed
// certificate CertPEM, also in the file CertFile (the CA to trust).
type TLSServer struct {
	*Server
	Addr     string
	CertPEM  []byte
	CertFile string
}

// StartTLS starts a redis-server with a TLS port besides its plain one
// (clients are not asked for certificates); extra are more redis-server
// arguments, e.g. an ACL user.
func StartTLS(t testing.TB, extra ...string) *TLSServer {
	t.Helper()
	dir := t.TempDir()
	certPEM, keyPEM := certtest.New("redis", "localhost")
	crt, key := filepath.Join(dir, "redis.crt"), filepath.Join(dir, "redis.key")
	for p, data := range map[string][]byte{crt: certPEM, key: keyPEM} {
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	args := append([]string{"--tls-port", strconv.Itoa(port), "--tls-cert-file", crt, "--tls-key-file", key,
		"--tls-ca-cert-file", crt, "--tls-auth-clients", "no"}, extra...)
	srv := Start(t, WithArgs(args...))
	return &TLSServer{Server: srv, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), CertPEM: certPEM, CertFile: crt}
}
