package proxy

import (
	"context"
	"io"
	"mime"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/metrics"
	"github.com/tollgate-dev/tollgate/dataplane/usage"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// headerAcceptEncoding and identityEncoding ask an upstream for an
// uncompressed body.
var (
	headerAcceptEncoding = http.CanonicalHeaderKey("Accept-Encoding")
	identityEncoding     = []string{"identity"}
)

// meterKey is the request context key of a forwarded request's *meter.
type meterKey struct{}

// meter follows the response of a request under a response-cost rule
// (spec.cost.response) and says what it costs. The upstream's response
// passes through unchanged and unbuffered: the header is read when the
// response starts (modifyResponse), a body field by a usage scanner that
// sees each piece of the body as the reverse proxy copies it to the
// client, and on after the client left (drain.go). The reading runs on the
// handler's goroutine (the reverse proxy reads the body there); what the
// client's leaving changes (drain.go, in a goroutine of its own) is
// guarded by mu, and read in atomics.
type meter struct {
	rc *snapshot.ResponseCost
	// status is the upstream's status; 0 when none came (the upstream
	// failed, or the client went away first).
	status int
	// raw is the header's value, found whether the header was there; in a
	// trailer (gRPC sends its metadata there) when res, the response, had
	// it not in its headers (then read at the end of the body).
	raw   string
	found bool
	res   *http.Response
	// scan reads the body for jsonField (set under mu); ended: the body
	// was read to its end; readFailed: a read of it failed (the upstream,
	// or a cut); drained: the bytes read after the client left.
	scan       usage.Scanner
	ended      bool
	readFailed bool
	drained    int64

	// The upstream request's own context (detach): its cancel, the watch
	// of the client's context, the drain bounds.
	cancel  context.CancelFunc
	unwatch func() bool
	drains  *drainLimits
	timeout time.Duration
	// mu orders the state changes (start, clientGone, finish) and guards
	// timer, the drain's time bound, and unclose, its watch of the
	// Handler's Close; state is one of waiting...finished;
	// cutOff: the gateway ended the upstream's answer because its client
	// left (before the headers, at a drain's bounds, no drain allowed).
	mu      sync.Mutex
	state   atomic.Int32
	cutOff  atomic.Bool
	timer   *time.Timer
	unclose func() bool
}

// newMeter returns the meter of a request under rule, or nil when the rule
// charges no response cost.
func newMeter(rule *snapshot.Rule) *meter {
	if rule.Cost == nil || rule.Cost.Response == nil {
		return nil
	}
	return &meter{rc: rule.Cost.Response}
}

// attach makes r carry m to modifyResponse, on a context of its own
// (detach: d bounds the drains, timeout is the route's). For a body field,
// it asks the upstream for an uncompressed body, Accept-Encoding:
// identity, whatever the client accepts (a compressed body cannot be
// scanned; no header would allow any coding). An upstream that compresses
// all the same is passed on as it is, and the rule's default is charged.
// The caller calls m.finish when forwarding ends.
func (m *meter) attach(r *http.Request, d *drainLimits, timeout time.Duration) *http.Request {
	if m.rc.JSONField != "" {
		r.Header[headerAcceptEncoding] = identityEncoding
	}
	return r.WithContext(context.WithValue(m.detach(r.Context(), d, timeout), meterKey{}, m))
}

// meterOf is the meter a forwarded request carries, or nil.
func meterOf(ctx context.Context) *meter {
	m, _ := ctx.Value(meterKey{}).(*meter)
	return m
}

// start sees the upstream's response begin: its status, the cost header,
// and for a body field a scanner around the body (not around a protocol
// switch, whose body is the connection).
func (m *meter) start(res *http.Response) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state.CompareAndSwap(waiting, streaming)
	m.status = res.StatusCode
	if m.rc.Header != "" {
		m.raw, m.found = headerCost(res.Header, m.rc.Header)
		if !m.found && res.StatusCode != http.StatusSwitchingProtocols {
			// Perhaps a trailer: the body is followed to its end.
			m.res = res
			res.Body = &meteredBody{ReadCloser: res.Body, m: m}
		}
		return
	}
	if res.StatusCode == http.StatusSwitchingProtocols || res.StatusCode >= 500 {
		return
	}
	if ct, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); ct == "text/event-stream" {
		m.scan = usage.NewSSE(m.rc.JSONField)
	} else {
		m.scan = usage.NewJSON(m.rc.JSONField)
	}
	res.Body = &meteredBody{ReadCloser: res.Body, m: m}
}

// headerCost is the value of the cost header name in h, raw ("" when it
// is there twice: not usable), and found whether it is there.
func headerCost(h http.Header, name string) (raw string, found bool) {
	vals := h.Values(name)
	if len(vals) == 1 {
		return vals[0], true
	}
	return "", len(vals) > 0
}

// meteredBody hands every piece of a response body to the meter's scanner
// as the reverse proxy reads it, before the piece goes to the client (or,
// the client gone, as the drain reads it: at most the drain's byte bound).
type meteredBody struct {
	io.ReadCloser
	m *meter
}

func (b *meteredBody) Read(p []byte) (int, error) {
	m := b.m
	alone := m.state.Load() == draining
	if alone {
		left := m.drains.maxBytes - m.drained
		if left <= 0 {
			// At the byte bound: the upstream request is canceled, and the
			// read ends as a canceled one does (the reverse proxy does not
			// log those).
			m.cut()
			m.readFailed = true
			return 0, context.Canceled
		}
		p = p[:min(int64(len(p)), left)]
	}
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		if m.scan != nil {
			_, _ = m.scan.Write(p[:n])
		}
		if alone {
			m.drained += int64(n)
		}
	}
	switch {
	case err == io.EOF:
		m.ended = true
	case err != nil:
		m.readFailed = true
	}
	return n, err
}

// Close closes the body; the reverse proxy closes a body it did not read
// to its end (nor failed to read) when the copy to the client failed: the
// client left, and the rest is drained first.
func (b *meteredBody) Close() error {
	if !b.m.ended && !b.m.readFailed {
		b.drain()
	}
	return b.ReadCloser.Close()
}

// cost is what the response costs, once it is over (see
// v1alpha1.ResponseCost), and its basis (metrics.Cost*): onError for a 5xx
// or no response, or a body that broke off before the value came;
// onClientGone when the client left before the value came and the
// gateway did not find it without the client; the value found, bounded by
// max; default when the response holds none (or one that is not a
// non-negative number).
func (m *meter) cost() (int64, string) {
	rc := m.rc
	switch {
	case m.status >= 500:
		return rc.OnError, metrics.CostError
	case m.status == 0 && m.cutOff.Load():
		return rc.ClientGone(), metrics.CostClientGone
	case m.status == 0:
		return rc.OnError, metrics.CostError
	}
	if rc.Header != "" {
		return m.headerValue()
	}
	if m.scan == nil {
		return rc.Default, metrics.CostDefault
	}
	if m.ended {
		m.scan.Finish()
	}
	raw, found := m.scan.Found()
	switch {
	case found || m.ended:
	case m.cutOff.Load():
		return rc.ClientGone(), metrics.CostClientGone
	default:
		return rc.OnError, metrics.CostError
	}
	return m.value(raw, found)
}

// headerValue is the cost of a response-header rule: the header's value,
// else the trailer's once the body ended (a body that broke off before it
// costs onError, or onClientGone when the client left).
func (m *meter) headerValue() (int64, string) {
	if m.found || m.res == nil {
		return m.value(m.raw, m.found)
	}
	switch {
	case m.ended:
		return m.value(headerCost(m.res.Trailer, m.rc.Header))
	case m.cutOff.Load():
		return m.rc.ClientGone(), metrics.CostClientGone
	case m.readFailed:
		return m.rc.OnError, metrics.CostError
	}
	return m.rc.Default, metrics.CostDefault
}

// value is the cost of a reported raw value: bounded, or the default.
func (m *meter) value(raw string, found bool) (int64, string) {
	if v, ok := usage.Parse(raw, m.rc.Bound()); found && ok {
		return v, metrics.CostReported
	}
	return m.rc.Default, metrics.CostDefault
}

// settle charges the response's cost to the bucket of tenant on the
// route, and counts it.
func (h *Handler) settle(ctx context.Context, m *meter, tenant string, up *upstream, rule *snapshot.Rule) {
	cost, basis := m.cost()
	charged := h.opts.Decider.Charge(ctx, tenant, up.id, rule, cost)
	h.opts.Metrics.ResponseCharges.WithLabelValues(up.id, basis).Inc()
	h.opts.Metrics.ResponseCostTokens.WithLabelValues(up.id, basis).Add(float64(charged.Tokens))
}
