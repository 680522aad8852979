package proxy

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/dataplane/concurrency"
	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/dataplane/limitheaders"
	"github.com/tollgate-dev/tollgate/dataplane/metrics"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// heldSlot is a request's concurrency slot and the in-flight gauge it
// counts in. A nil *heldSlot holds nothing.
type heldSlot struct {
	slot  *concurrency.Slot
	gauge prometheus.Gauge
}

func (s *heldSlot) release() {
	if s == nil {
		return
	}
	s.gauge.Dec()
	s.slot.Release()
}

// takeSlot takes the request's concurrency slot when rule caps concurrency
// (spec.concurrency), after the token bucket admitted it (decision d). ok
// is false when the request was answered instead: 429 with Retry-After: 1
// over the limit, 503 when Redis cannot answer and the rule fails closed;
// what d took is given back first (refundRefused), so the refusal costs
// nothing and a retry finds it. A Shadow rule never refuses; its request
// goes on without a slot. With IETF headers on, the limit is a second item
// of RateLimit-Policy and RateLimit.
func (h *Handler) takeSlot(w http.ResponseWriter, r *http.Request, up *upstream, tenant string, rule *snapshot.Rule, d decision.Decision) (held *heldSlot, ok bool) {
	limit := rule.InFlightLimit(h.opts.Region)
	if limit == 0 || h.opts.Slots == nil {
		return nil, true
	}
	key := concurrency.Key(tenant, up.id)
	if _, split := rule.Share(h.opts.Region); split {
		key = concurrency.RegionKey(tenant, up.id, h.opts.Region)
	}
	slot, out := h.opts.Slots.Acquire(r.Context(), concurrency.Limit{Key: key, Max: limit, Lease: rule.Lease(), FailureMode: rule.FailureMode})
	refused := !out.Allowed && !rule.Shadow
	if refused {
		h.refundRefused(w, r, up, tenant, rule, d)
	}
	if h.opts.IETFHeaders {
		remaining := out.Limit - out.Held
		if !out.Allowed {
			remaining = 0
		}
		hd := w.Header()
		hd.Set(headerIETFPolicy, limitheaders.AppendItem(hd.Get(headerIETFPolicy), limitheaders.ConcurrencyPolicy(up.id, out.Limit)))
		hd.Set(headerIETF, limitheaders.AppendItem(hd.Get(headerIETF), limitheaders.ConcurrencyState(up.id, remaining)))
	}
	if out.Allowed {
		if slot == nil {
			return nil, true // fail open: no slot to hold
		}
		g := h.opts.Metrics.ConcurrencyInFlight.WithLabelValues(up.id)
		g.Inc()
		return &heldSlot{slot: slot, gauge: g}, true
	}
	rejections := h.opts.Metrics.ConcurrencyRejections
	if !refused {
		rejections.WithLabelValues(up.id, metrics.ResultShadowRejected, out.Source.String()).Inc()
		w.Header().Set(headerShadow, limitheaders.WouldReject)
		return nil, true
	}
	rejections.WithLabelValues(up.id, metrics.ResultRejected, out.Source.String()).Inc()
	w.Header().Set(headerRetryAfter, "1")
	if out.Source == limiter.SourceFailClosed {
		h.reply(w, up.id, http.StatusServiceUnavailable, "rate limiter unavailable and the rule fails closed")
		return nil, false
	}
	h.reply(w, up.id, http.StatusTooManyRequests, "concurrency limit exceeded")
	return nil, false
}

// refundRefused gives back what decision d took for a request refused its
// slot, before the answer is written, and rewrites the limit headers as the
// refund left the bucket (and quota). A failed refund leaves the tokens
// spent (fewer admissions, never more) and the headers as they were.
func (h *Handler) refundRefused(w http.ResponseWriter, r *http.Request, up *upstream, tenant string, rule *snapshot.Rule, d decision.Decision) {
	d, err := h.opts.Decider.Refund(r.Context(), tenant, up.id, rule, d)
	if err != nil {
		h.log.Error(err, "giving back the tokens of a request refused a concurrency slot failed: they stay spent", "route", up.id)
		return
	}
	setLimitHeaders(w.Header(), up.id, rule, d, h.opts.IETFHeaders)
}
