// Package certpool reads the PEM CA files that flags name (the Redis
// client's --redis-tls-ca-file, the rate limit port's --rls-client-ca).
package certpool

import (
	"crypto/x509"
	"fmt"
	"os"
)

// Load reads the PEM certificates in the file at path into a pool. flag
// names the file in errors; a file without a PEM certificate is an error.
func Load(flag, path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s holds no PEM certificate", flag, path)
	}
	return pool, nil
}
