package gateway

import "github.com/tollgate-dev/tollgate/dataplane/identity"

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
	if g.opts.Identity == IdentityHeaderIsTenant && g.opts.RoutesFile != "" {
		g.log.Error(nil, "INSECURE: --identity=header-is-tenant: the X-Api-Key value is taken as the tenant id unchecked, "+
			"so any client that reaches this gateway can use or drain any tenant's bucket. "+
			"Use it only behind a proxy that authenticates clients and sets X-Api-Key itself; otherwise map keys with --api-keys-file.",
			"identity", g.opts.Identity)
	}
	return identity.Direct{}
}
