package jwtauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// URLOptions configure a URLSource.
type URLOptions struct {
	SourceOptions
	// URL is the JWKS URL. Empty: discovered from Issuer's
	// /.well-known/openid-configuration (its jwks_uri).
	URL string
	// Issuer is the issuer whose discovery document names the JWKS URL;
	// the document's issuer must be this one.
	Issuer string
	// Client fetches; default: a client with a 5s timeout.
	Client *http.Client
	// Interval is how often the JWKS is fetched again; default 5m.
	Interval time.Duration
	// MinRefetch is the least time between two fetches, whatever asks for
	// them (a token's unknown kid, a failed fetch's retry); default 30s.
	MinRefetch time.Duration
	// Clock defaults to time.Now.
	Clock func() time.Time
}

// URLSource serves the JWKS of an issuer's URL: fetched at start, every
// Interval, and when a token names a kid the set lacks (a rotation), but
// never twice within MinRefetch, so tokens with random kids cannot make
// it flood the issuer. A failed fetch keeps the last good keys.
type URLSource struct {
	opts URLOptions
	cur  atomic.Pointer[Keys]

	mu      sync.Mutex // serializes fetches
	last    time.Time  // of the last fetch attempt
	jwksURL string     // opts.URL, or the discovered one
}

// CheckURL reports what is wrong with a JWKS or issuer URL: it must be
// https, or http to a loopback address (tests, a sidecar).
func CheckURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Host == "":
		return fmt.Errorf("%q is not an absolute URL", s)
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && loopback(u.Hostname()):
		return nil
	}
	return fmt.Errorf("%q: keys are fetched over https only (http only from a loopback address)", s)
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// NewURLSource returns a source with no keys until Run or Refresh
// fetched them.
func NewURLSource(opts URLOptions) *URLSource {
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 5 * time.Second}
	}
	if opts.Interval <= 0 {
		opts.Interval = 5 * time.Minute
	}
	if opts.MinRefetch <= 0 {
		opts.MinRefetch = 30 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	return &URLSource{opts: opts, jwksURL: opts.URL}
}

// Keys is the last good key set, nil before the first fetch succeeded.
func (s *URLSource) Keys() *Keys { return s.cur.Load() }

// Refresh fetches the JWKS unless a fetch started less than MinRefetch
// ago, and returns the keys in force. Concurrent callers wait for the one
// fetch in flight.
func (s *URLSource) Refresh(ctx context.Context) *Keys {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := s.opts.Clock(); s.last.IsZero() || now.Sub(s.last) >= s.opts.MinRefetch {
		s.fetchLocked(ctx, now)
	}
	return s.cur.Load()
}

// Run fetches at once and then every Interval until ctx ends; after a
// failure it tries again after MinRefetch. It returns nil when ctx ends.
func (s *URLSource) Run(ctx context.Context) error {
	for {
		s.mu.Lock()
		now := s.opts.Clock()
		wait := s.opts.Interval - now.Sub(s.last)
		if s.last.IsZero() || wait <= 0 {
			if s.fetchLocked(ctx, now) {
				wait = s.opts.Interval
			} else {
				wait = s.opts.MinRefetch
			}
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// Loaded is true: the gateway serves before the first fetch answers (a
// token then is refused as signed by an unknown key, and refetches).
func (s *URLSource) Loaded() bool { return true }

// fetchLocked fetches (discovering the URL first if need be) and swaps a
// changed, valid set in; it reports success. The caller holds s.mu.
func (s *URLSource) fetchLocked(ctx context.Context, now time.Time) bool {
	s.last = now
	// Not the caller's context: a request that goes away does not cancel
	// the fetch that the requests waiting behind it need.
	timeout := s.opts.Client.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if s.jwksURL == "" {
		u, err := s.discover(ctx)
		if err != nil {
			s.opts.failed(err)
			return false
		}
		s.jwksURL = u
	}
	data, err := s.get(ctx, s.jwksURL, MaxJWKSBytes)
	if err == nil {
		var k *Keys
		if k, err = ParseJWKS(data); err == nil {
			if cur := s.cur.Load(); cur == nil || cur.sum != k.sum {
				s.cur.Store(k)
				s.opts.loaded(k)
			}
			return true
		}
		err = fmt.Errorf("JWKS from %s: %w", s.jwksURL, err)
	}
	s.opts.failed(fmt.Errorf("%w; the last good keys stay in force", err))
	return false
}

// discover reads the issuer's discovery document and returns its
// jwks_uri.
func (s *URLSource) discover(ctx context.Context) (string, error) {
	where := strings.TrimSuffix(s.opts.Issuer, "/") + "/.well-known/openid-configuration"
	data, err := s.get(ctx, where, 1<<20)
	if err != nil {
		return "", fmt.Errorf("discovery: %w", err)
	}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	switch {
	case json.Unmarshal(data, &doc) != nil:
		return "", fmt.Errorf("discovery: %s is not a JSON object", where)
	case doc.Issuer != s.opts.Issuer:
		return "", fmt.Errorf("discovery: %s names the issuer %q, not %q", where, doc.Issuer, s.opts.Issuer)
	case doc.JWKSURI == "":
		return "", fmt.Errorf("discovery: %s has no jwks_uri", where)
	}
	if err := CheckURL(doc.JWKSURI); err != nil {
		return "", fmt.Errorf("discovery: jwks_uri %w", err)
	}
	return doc.JWKSURI, nil
}

// get fetches u, at most max bytes, and fails on a status other than 200.
func (s *URLSource) get(ctx context.Context, u string, max int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	res, err := s.opts.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, res.Status)
	}
	data, err := io.ReadAll(io.LimitReader(res.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if int64(len(data)) > max {
		return nil, errors.New("GET " + u + ": larger than the bound")
	}
	return data, nil
}
