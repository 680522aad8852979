package gateway

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/spf13/pflag"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/dataplane/jwtauth"
	"github.com/tollgate-dev/tollgate/dataplane/metrics"
	"github.com/tollgate-dev/tollgate/internal/lib/certpool"
	"github.com/tollgate-dev/tollgate/internal/lib/filewatch"
	"github.com/tollgate-dev/tollgate/internal/lib/ratelog"
)

// IdentityJWT identifies requests by an "Authorization: Bearer" token
// verified with JWTOptions (docs/jwt.md).
const IdentityJWT = "jwt"

// JWTOptions configure bearer token identity (--identity with jwt). Where
// the keys come from: exactly one of JWKSFile, JWKSSecret and JWKSURL, or
// none to discover the JWKS URL from Issuer.
type JWTOptions struct {
	Issuer        string
	Audiences     []string
	TenantClaim   string
	Algorithms    []string
	Leeway        time.Duration
	JWKSFile      string
	JWKSSecret    string
	JWKSSecretKey string
	JWKSURL       string
	CAFile        string
	HMACSecret    string
	Refresh       time.Duration
	MinRefetch    time.Duration
	CacheSize     int
}

// AddFlags registers the --jwt-* flags.
func (o *JWTOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Issuer, "jwt-issuer", "", "With --identity=jwt: the issuer (iss) every token must name; without a --jwt-jwks-* source, its keys are found through <issuer>/.well-known/openid-configuration (jwks_uri).")
	fs.StringSliceVar(&o.Audiences, "jwt-audience", nil, "With --identity=jwt: audiences of this API (repeat or comma-separate); a token's aud must hold one. Required.")
	fs.StringVar(&o.TenantClaim, "jwt-tenant-claim", "", "With --identity=jwt: the claim that holds the tenant id, e.g. org_id; dots name nested claims (org.id). A value that is not a valid tenant id gets 401 invalid_token. Required.")
	fs.StringSliceVar(&o.Algorithms, "jwt-algorithms", []string{"RS256", "ES256", "EdDSA"},
		"Signature algorithms accepted (RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512, EdDSA; HS256, HS384, HS512 only with --jwt-hmac-secret-file). none is never accepted.")
	fs.DurationVar(&o.Leeway, "jwt-leeway", 30*time.Second, "Clock skew allowed on a token's exp, nbf and iat.")
	fs.StringVar(&o.JWKSFile, "jwt-jwks-file", "", "The issuer's keys from a JWKS file (JSON), reloaded on change (every --reload-interval).")
	fs.StringVar(&o.JWKSSecret, "jwt-jwks-secret", "", "The issuer's keys from a JWKS in the Secret of this name in --snapshot-namespace (key --jwt-jwks-secret-key), watched: a change rotates the keys live. Needs get, list and watch on that Secret.")
	fs.StringVar(&o.JWKSSecretKey, "jwt-jwks-secret-key", "jwks.json", "The data key of --jwt-jwks-secret that holds the JWKS.")
	fs.StringVar(&o.JWKSURL, "jwt-jwks-url", "", "The issuer's keys from this JWKS URL (https; http only to a loopback address), fetched every --jwt-jwks-refresh and for a token whose kid is not known yet.")
	fs.StringVar(&o.CAFile, "jwt-ca-file", "", "PEM CA certificates to verify the issuer's https server with, instead of the system's.")
	fs.StringVar(&o.HMACSecret, "jwt-hmac-secret-file", "", "A file with the HMAC shared secret (at least 32 bytes; one trailing line break removed) for HS256, HS384 and HS512 tokens, reloaded on change. Only with an HS algorithm in --jwt-algorithms.")
	fs.DurationVar(&o.Refresh, "jwt-jwks-refresh", 5*time.Minute, "How often a JWKS URL is fetched again.")
	fs.DurationVar(&o.MinRefetch, "jwt-jwks-min-refetch", 30*time.Second, "Least time between two fetches of a JWKS URL: a token with an unknown kid refetches at most this often, however many arrive; a failed fetch is retried after it.")
	fs.IntVar(&o.CacheSize, "jwt-cache-size", 10000, "Verified tokens remembered (by SHA-256, until their exp, while their key is in force), so a token is verified once, not per request; 0 disables the cache.")
}

// identityMethods parses --identity: a comma-separated list of mapped,
// header-is-tenant and jwt, without repeats, not both mapped and
// header-is-tenant.
func identityMethods(s string) ([]string, error) {
	ms := strings.Split(s, ",")
	for i, m := range ms {
		switch {
		case m != IdentityMapped && m != IdentityHeaderIsTenant && m != IdentityJWT:
			return nil, fmt.Errorf("--identity %q: want %s, %s or %s, or a comma-separated list of them such as %s,%s", s, IdentityMapped, IdentityHeaderIsTenant, IdentityJWT, IdentityMapped, IdentityJWT)
		case slices.Contains(ms[:i], m):
			return nil, fmt.Errorf("--identity %q: %s twice", s, m)
		}
	}
	if slices.Contains(ms, IdentityMapped) && slices.Contains(ms, IdentityHeaderIsTenant) {
		return nil, fmt.Errorf("--identity %q: %s and %s exclude each other (both read X-Api-Key)", s, IdentityMapped, IdentityHeaderIsTenant)
	}
	return ms, nil
}

// validate checks the JWT options for --identity with jwt (on is false
// otherwise: then no --jwt-* source may be set).
func (o *JWTOptions) validate(on, kube bool) error {
	sources := 0
	for _, s := range []string{o.JWKSFile, o.JWKSSecret, o.JWKSURL} {
		if s != "" {
			sources++
		}
	}
	switch {
	case !on && (o.Issuer != "" || sources > 0 || o.HMACSecret != ""):
		return errors.New("--jwt-* flags need jwt in --identity (e.g. --identity=mapped,jwt)")
	case !on:
		return nil
	case o.Issuer == "" || len(o.Audiences) == 0 || o.TenantClaim == "":
		return errors.New("--identity=jwt needs --jwt-issuer, --jwt-audience and --jwt-tenant-claim")
	case !v1alpha1.ValidClaimPath(o.TenantClaim):
		return fmt.Errorf("--jwt-tenant-claim %q: want claim names separated by single dots", o.TenantClaim)
	case sources > 1:
		return errors.New("--jwt-jwks-file, --jwt-jwks-secret and --jwt-jwks-url exclude each other")
	case o.JWKSSecret != "" && !kube:
		return errors.New("--jwt-jwks-secret needs Kubernetes (no --rules); use --jwt-jwks-file standalone")
	case o.Refresh <= 0 || o.MinRefetch <= 0 || o.Leeway < 0 || o.CacheSize < 0:
		return errors.New("--jwt-jwks-refresh and --jwt-jwks-min-refetch must be positive, --jwt-leeway and --jwt-cache-size not negative")
	}
	if o.JWKSURL != "" {
		if err := jwtauth.CheckURL(o.JWKSURL); err != nil {
			return fmt.Errorf("--jwt-jwks-url: %w", err)
		}
	} else if sources == 0 {
		if err := jwtauth.CheckURL(o.Issuer); err != nil {
			return fmt.Errorf("--jwt-issuer (discovery of its keys): %w", err)
		}
	}
	_, err := o.verifierOptions()
	return err
}

// verifierOptions are the verifier's options, without the key sources.
func (o *JWTOptions) verifierOptions() (jwtauth.Options, error) {
	vo := jwtauth.Options{Issuer: o.Issuer, Audiences: o.Audiences, TenantClaim: o.TenantClaim, Leeway: o.Leeway, CacheSize: o.CacheSize}
	hmac := false
	for _, a := range o.Algorithms {
		alg := jose.SignatureAlgorithm(a)
		vo.Algorithms = append(vo.Algorithms, alg)
		hmac = hmac || alg == jose.HS256 || alg == jose.HS384 || alg == jose.HS512
	}
	if hmac != (o.HMACSecret != "") {
		return vo, errors.New("an HS algorithm in --jwt-algorithms and --jwt-hmac-secret-file go together")
	}
	// Checked again, with the sources, by jwtauth.New.
	check := vo
	check.Keys, check.Secret = jwtauth.NewURLSource(jwtauth.URLOptions{}), func() *jwtauth.Secret { return nil }
	if !hmac {
		check.Secret = nil
	}
	if _, err := jwtauth.New(check); err != nil {
		return vo, fmt.Errorf("--identity=jwt: %w", err)
	}
	return vo, nil
}

// jwtIdentity is the gateway's bearer token identity: the verifier and its
// metrics (its key sources are among the gateway's sources).
type jwtIdentity struct {
	verifier *jwtauth.Verifier
	metrics  *metrics.JWT
}

// buildJWT builds the verifier and its key sources.
func (g *Gateway) buildJWT() error {
	o := &g.opts.JWT
	vo, err := o.verifierOptions()
	if err != nil {
		return err
	}
	j := &jwtIdentity{metrics: metrics.NewJWT(g.registry, jwtauth.Reasons)}
	if vo.Keys, err = g.jwtKeys(j); err != nil {
		return err
	}
	if o.HMACSecret != "" {
		w, err := filewatch.New(o.HMACSecret, 4<<10, jwtauth.ParseSecret, filewatch.Options[jwtauth.Secret]{
			Interval: g.opts.ReloadInterval, OnError: g.jwtReloadError("jwt-secret"),
			OnReload: func(*jwtauth.Secret) { g.log.Info("JWT shared secret reloaded") },
		})
		if err != nil {
			return fmt.Errorf("--jwt-hmac-secret-file: %w", err)
		}
		vo.Secret = w.Current
		g.addSource("JWT shared secret file", w)
	}
	vo.Clock = g.opts.Clock
	if j.verifier, err = jwtauth.New(vo); err != nil {
		return fmt.Errorf("--identity=jwt: %w", err)
	}
	g.jwt = j
	return nil
}

// jwtKeys builds the key source the options name.
func (g *Gateway) jwtKeys(j *jwtIdentity) (jwtauth.KeySource, error) {
	o := &g.opts.JWT
	so := jwtauth.SourceOptions{OnError: g.jwtReloadError("jwks"), OnLoad: func(k *jwtauth.Keys) {
		j.metrics.Keys.Set(float64(k.Len()))
		j.metrics.KeysLoaded.Set(float64(time.Now().Unix()))
		g.log.Info("JWT verification keys loaded", "keys", k.Len(), "skipped", k.Skipped)
	}}
	switch {
	case o.JWKSFile != "":
		src, err := jwtauth.NewFileSource(o.JWKSFile, g.opts.ReloadInterval, so)
		if err != nil {
			return nil, fmt.Errorf("--jwt-jwks-file: %w", err)
		}
		so.OnLoad(src.Keys())
		g.addSource("JWKS file", src)
		return src, nil
	case o.JWKSSecret != "":
		src := jwtauth.NewSecretSource(g.kube, g.opts.SnapshotNamespace, o.JWKSSecret, o.JWKSSecretKey, so)
		g.addSource("JWKS Secret", src)
		return src, nil
	}
	client := &http.Client{Timeout: 5 * time.Second}
	if o.CAFile != "" {
		pool, err := certpool.Load("--jwt-ca-file", o.CAFile)
		if err != nil {
			return nil, err
		}
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	src := jwtauth.NewURLSource(jwtauth.URLOptions{
		SourceOptions: so, URL: o.JWKSURL, Issuer: o.Issuer, Client: client,
		Interval: o.Refresh, MinRefetch: o.MinRefetch,
	})
	g.addSource("JWKS URL", src)
	return src, nil
}

// jwtReloadError counts a key source's failure under source and logs it,
// at most once per 10s (a failing issuer is asked every
// --jwt-jwks-min-refetch).
func (g *Gateway) jwtReloadError(source string) func(error) {
	errs := g.metrics.ReloadErrors.WithLabelValues(source) // at 0 from the start
	log := ratelog.New(g.log.WithName("jwt"), 10*time.Second)
	return func(err error) {
		errs.Inc()
		log.Error(err, "JWT key source problem; the last good keys stay in force", "source", source)
	}
}
