package gateway

import "github.com/tollgate-dev/tollgate/dataplane/identity"

// identityChain builds the proxy's identity methods in the order of
// --identity (validated): API keys (mapped or header-is-tenant) and bearer
// tokens (jwt, whose verifier and key sources it builds).
func (g *Gateway) identityChain() (*identity.Chain, error) {
	methods, _ := identityMethods(g.opts.Identity)
	var ms []identity.Method
	for _, m := range methods {
		if m != IdentityJWT {
			ms = append(ms, identity.APIKeys(g.resolver()))
			continue
		}
		if err := g.buildJWT(); err != nil {
			return nil, err
		}
		ms = append(ms, identity.Tokens(g.jwt.verifier))
	}
	return identity.NewChain(ms...), nil
}

// failureLimiter limits failed identifications per client address (nil when
// --identity-failure-burst is 0).
func (o *Options) failureLimiter() *identity.FailureLimiter {
	return identity.NewFailureLimiter(identity.FailureOptions{
		Burst: o.FailureBurst, PerSecond: o.FailurePerSecond, MaxAddresses: o.FailureMaxAddresses,
	})
}

// resolver returns the proxy's API key resolver: the --api-keys-file mapping
// (--identity=mapped), or the header value as the tenant id
// (--identity=header-is-tenant), announced with a warning that shows at every
// log level.
func (g *Gateway) resolver() identity.Resolver {
	if g.keys != nil {
		return g.keys
	}
	if g.opts.Identity != IdentityMapped && g.opts.RoutesFile != "" && g.keys == nil {
		g.log.Error(nil, "INSECURE: --identity=header-is-tenant: the X-Api-Key value is taken as the tenant id unchecked, "+
			"so any client that reaches this gateway can use or drain any tenant's bucket. "+
			"Use it only behind a proxy that authenticates clients and sets X-Api-Key itself; otherwise map keys with --api-keys-file.",
			"identity", g.opts.Identity)
	}
	return identity.Direct{}
}
