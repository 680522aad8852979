package tlscerts

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testutil/certtest"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// secretData is the TLS Secret's data for certificates by Secret ref, each
// a fresh certificate whose common name is its value.
func secretData(refs map[string]string) map[string][]byte {
	data := map[string][]byte{}
	for ref, cn := range refs {
		crt, key := certtest.New(cn, cn)
		c, k := routetable.CertKeys(ref)
		data[c], data[k] = crt, key
	}
	return data
}

// serve runs a TLS server with the store's configuration on loopback and
// returns its address.
func serve(t *testing.T, s *Store) string {
	ln, err := tls.Listen("tcp", "127.0.0.1:0", s.Config())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_ = c.(*tls.Conn).Handshake()
			})
		}
	})
	return ln.Addr().String()
}

// served is the common name of the certificate the server presents for
// serverName, or the handshake error.
func served(addr, serverName string, version uint16) (string, error) {
	cfg := &tls.Config{ServerName: serverName, InsecureSkipVerify: true, MaxVersion: version, MinVersion: version}
	if version == 0 {
		cfg.MinVersion = tls.VersionTLS12
	}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

// TestSNISelection checks the certificate chosen per server name through
// real handshakes: exact hostname, the longest wildcard, the listener
// without hostname, and the default without SNI.
func TestSNISelection(t *testing.T) {
	s := NewStore(nil)
	s.SetSecret(secretData(map[string]string{"ns/exact": "exact", "ns/wild": "wild", "ns/deep": "deep", "ns/any": "any"}))
	s.SetListeners([]routetable.TLSListener{
		{Listener: "ns/gw/wild", Hostname: "*.example.com", Certificates: []string{"ns/wild"}},
		{Listener: "ns/gw/exact", Hostname: "shop.example.com", Certificates: []string{"ns/missing", "ns/exact"}},
		{Listener: "ns/gw/deep", Hostname: "*.eu.example.com", Certificates: []string{"ns/deep"}},
		{Listener: "ns/gw/any", Certificates: []string{"ns/any"}},
	})
	addr := serve(t, s)
	for name, want := range map[string]string{
		"shop.example.com":    "exact",
		"SHOP.example.com.":   "exact",
		"api.example.com":     "wild",
		"a.b.example.com":     "wild",
		"api.eu.example.com":  "deep",
		"example.com":         "any",
		"shop.example.org":    "any",
		"":                    "any",
		"eu.example.com.evil": "any",
	} {
		got, err := served(addr, name, 0)
		if err != nil || got != want {
			t.Errorf("server name %q: certificate %q (%v), want %q", name, got, err, want)
		}
	}
	if _, err := served(addr, "shop.example.com", tls.VersionTLS11); err == nil {
		t.Error("a TLS 1.1 handshake succeeded; TLS 1.2 is the minimum")
	}

	// Without a listener for every host: no SNI gets the first listener's
	// certificate, an unknown name no certificate.
	s.SetListeners([]routetable.TLSListener{
		{Listener: "ns/gw/exact", Hostname: "shop.example.com", Certificates: []string{"ns/exact"}},
		{Listener: "ns/gw/wild", Hostname: "*.example.com", Certificates: []string{"ns/wild"}},
	})
	if got, err := served(addr, "", 0); err != nil || got != "exact" {
		t.Errorf("no SNI: certificate %q (%v), want the first listener's", got, err)
	}
	if got, err := served(addr, "shop.example.org", 0); err == nil {
		t.Errorf("unknown server name: certificate %q, want a failed handshake", got)
	}
}

// TestRotationKeepsLastGood checks that a new certificate in the Secret is
// served from the next handshake on, and that a certificate that does not
// parse keeps the last good one (and is reported).
func TestRotationKeepsLastGood(t *testing.T) {
	var reported []error
	s := NewStore(func(err error) { reported = append(reported, err) })
	s.SetListeners([]routetable.TLSListener{{Listener: "ns/gw/https", Hostname: "shop.example.com", Certificates: []string{"ns/shop"}}})
	addr := serve(t, s)
	if _, err := served(addr, "shop.example.com", 0); err == nil {
		t.Error("handshake succeeded before the Secret was loaded")
	}
	s.SetSecret(secretData(map[string]string{"ns/shop": "first"}))
	if got, err := served(addr, "shop.example.com", 0); err != nil || got != "first" {
		t.Fatalf("certificate %q (%v), want first", got, err)
	}
	s.SetSecret(secretData(map[string]string{"ns/shop": "second"}))
	if got, err := served(addr, "shop.example.com", 0); err != nil || got != "second" {
		t.Errorf("after rotation: certificate %q (%v), want second", got, err)
	}
	bad := secretData(map[string]string{"ns/shop": "third"})
	c, _ := routetable.CertKeys("ns/shop")
	bad[c] = []byte("-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n")
	s.SetSecret(bad)
	if got, err := served(addr, "shop.example.com", 0); err != nil || got != "second" {
		t.Errorf("after a bad certificate: %q (%v), want the last good one (second)", got, err)
	}
	if len(reported) != 1 {
		t.Errorf("reported %v, want one error", reported)
	}
	s.SetSecret(map[string][]byte{})
	var opErr *net.OpError
	if _, err := served(addr, "shop.example.com", 0); err == nil || errors.As(err, &opErr) && opErr.Op == "dial" {
		t.Errorf("after the Secret lost the certificate: %v, want a failed handshake", err)
	}
}
