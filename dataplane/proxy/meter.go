package proxy

import (
	"context"
	"io"
	"mime"
	"net/http"

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
// client. All of it runs on the handler's goroutine (the reverse proxy
// reads the body there), so it needs no lock.
type meter struct {
	rc *snapshot.ResponseCost
	// status is the upstream's status; 0 when none came (the upstream
	// failed, or the client went away first).
	status int
	// raw is the header's value, found whether the header was there.
	raw   string
	found bool
	// scan reads the body for jsonField; ended: the body was read to its
	// end.
	scan  usage.Scanner
	ended bool
}

// newMeter returns the meter of a request under rule, or nil when the rule
// charges no response cost.
func newMeter(rule *snapshot.Rule) *meter {
	if rule.Cost == nil || rule.Cost.Response == nil {
		return nil
	}
	return &meter{rc: rule.Cost.Response}
}

// attach makes r carry m to modifyResponse. For a body field, it asks the
// upstream for an uncompressed body, Accept-Encoding: identity, whatever
// the client accepts (a compressed body cannot be scanned; no header would
// allow any coding). An upstream that compresses all the same is passed on
// as it is, and the rule's default is charged.
func (m *meter) attach(r *http.Request) *http.Request {
	if m.rc.JSONField != "" {
		r.Header[headerAcceptEncoding] = identityEncoding
	}
	return r.WithContext(context.WithValue(r.Context(), meterKey{}, m))
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
	m.status = res.StatusCode
	if m.rc.Header != "" {
		vals := res.Header.Values(m.rc.Header)
		m.found = len(vals) > 0
		if len(vals) == 1 {
			m.raw = vals[0] // twice: "" (not usable)
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

// meteredBody hands every piece of a response body to the meter's scanner
// as the reverse proxy reads it, before the piece goes to the client.
type meteredBody struct {
	io.ReadCloser
	m *meter
}

func (b *meteredBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		_, _ = b.m.scan.Write(p[:n])
	}
	if err == io.EOF {
		b.m.ended = true
	}
	return n, err
}

// cost is what the response costs, once it is over (see
// v1alpha1.ResponseCost), and its basis (metrics.Cost*): onError for a 5xx
// or no response, or a body that broke off (its client gone, say) before
// the value came; the value found, bounded by max; default when the
// response holds none (or one that is not a non-negative number).
func (m *meter) cost() (int64, string) {
	rc := m.rc
	if m.status == 0 || m.status >= 500 {
		return rc.OnError, metrics.CostError
	}
	if rc.Header != "" {
		return m.value(m.raw, m.found)
	}
	if m.scan == nil {
		return rc.Default, metrics.CostDefault
	}
	if m.ended {
		m.scan.Finish()
	}
	raw, found := m.scan.Found()
	if !found && !m.ended {
		return rc.OnError, metrics.CostError
	}
	return m.value(raw, found)
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
