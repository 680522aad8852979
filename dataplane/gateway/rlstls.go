package gateway

import (
	"crypto/tls"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tollgate-dev/tollgate/internal/lib/certpool"
)

// rlsServerOptions returns the gRPC options of the rate limit port: TLS with
// --rls-tls-cert and --rls-tls-key, and with --rls-client-ca clients must
// present a certificate signed by it (mTLS). None without --rls-tls-cert.
// The files are read once, at start.
func (o *Options) rlsServerOptions() ([]grpc.ServerOption, error) {
	if o.RLSTLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(o.RLSTLSCert, o.RLSTLSKey)
	if err != nil {
		return nil, fmt.Errorf("--rls-tls-cert, --rls-tls-key: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if o.RLSClientCA != "" {
		pool, err := certpool.Load("--rls-client-ca", o.RLSClientCA)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))}, nil
}

// validateRLSTLS checks the TLS flags of the rate limit port.
func (o *Options) validateRLSTLS() error {
	switch {
	case (o.RLSTLSCert == "") != (o.RLSTLSKey == ""):
		return fmt.Errorf("--rls-tls-cert and --rls-tls-key go together")
	case o.RLSClientCA != "" && o.RLSTLSCert == "":
		return fmt.Errorf("--rls-client-ca needs --rls-tls-cert and --rls-tls-key")
	case o.RLSTLSCert != "" && o.RLSListen == "":
		return fmt.Errorf("--rls-tls-cert needs --rls-listen")
	}
	return nil
}
