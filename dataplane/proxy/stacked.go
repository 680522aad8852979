package proxy

import (
	"net/http"
	"net/netip"
	"strconv"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/identity"
	"github.com/tollgate-dev/tollgate/dataplane/limitheaders"
	"github.com/tollgate-dev/tollgate/dataplane/routing"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// clientAddr is r's client address (Options.ClientAddr); a malformed
// forwarding header from a trusted proxy is counted, and the peer is the
// client then.
func (h *Handler) clientAddr(r *http.Request) netip.Addr {
	addr, malformed := h.opts.ClientAddr.Client(r.RemoteAddr, r.Header)
	if malformed {
		h.opts.Metrics.ForwardedMalformed.Inc()
	}
	return addr
}

// identify is the caller of r on up's route, as the route's identity mode
// says: required identifies (no credential is an error), optional
// identifies a request that carries a credential and leaves one without
// anonymous (Caller{}), none never reads a credential.
func (h *Handler) identify(r *http.Request, up *upstream) (identity.Caller, error) {
	switch up.identity {
	case routing.IdentityNone:
		return identity.Caller{}, nil
	case routing.IdentityOptional:
		if !h.chain.Carries(r.Header) {
			return identity.Caller{}, nil
		}
	}
	return h.chain.Identify(r.Context(), r.Header)
}

// ruleMeter is the response meter of rule (nil: none, or no rule).
func ruleMeter(rule *snapshot.Rule) *meter {
	if rule == nil {
		return nil
	}
	return newMeter(rule)
}

// limitStacked decides a request that several limits apply to (limits:
// the default kind's rule first, when the caller has one, then the rules
// of other kinds), each with its own request cost, in order: a refusal
// gives back what the limits before it took. The headers describe the
// limit that binds (the one that refused, else the one with the fewest
// tokens left); the IETF lists have one item per limit decided.
func (h *Handler) limitStacked(w http.ResponseWriter, r *http.Request, up *upstream, caller identity.Caller, req decision.Request, limits []decision.Limit, body *deadlineBody) {
	costs := make([]int64, len(limits))
	for i, l := range limits {
		c, err := requestCost(r, l.Rule.Cost)
		if err != nil {
			h.reply(w, up.id, http.StatusBadRequest, err.Error())
			return
		}
		costs[i] = c
	}
	st, err := h.opts.Decider.DecideStack(r.Context(), req, limits, costs)
	if err != nil {
		h.log.Error(err, "limiter failed", "route", up.id)
		h.reply(w, up.id, http.StatusServiceUnavailable, "rate limiter unavailable")
		return
	}
	d, rule, _ := st.Bound()
	setStackHeaders(w.Header(), &st, h.opts.IETFHeaders)
	if st.Shadowed {
		w.Header().Set(headerShadow, limitheaders.WouldReject)
	}
	if !h.admit(w, up, rule, d, costs[st.Binding]) {
		return
	}
	if caller.Tenant == "" || limits[0].Rule.Kind() != "" {
		h.forward(w, r, up, caller, nil, decision.Decision{}, body, nil)
		return
	}
	// The default kind's rule keeps its concurrency slot and response
	// cost; a slot refused gives back what the other limits took too.
	rest := decision.Stacked{Limits: st.Limits[1:], Decisions: st.Decisions[1:]}
	h.forward(w, r, up, caller, limits[0].Rule, st.Decisions[0], body, func() { h.opts.Decider.Refunds(r.Context(), &rest) })
}

// setStackHeaders writes the limit headers of st: X-RateLimit-Limit and
// -Remaining of the limit that binds, and with ietf one RateLimit-Policy
// and RateLimit item per limit decided (named as snapshot.Rule.Name says:
// the route id for the default kind, login-by-address, all-by-tenant,
// export-shared, ...).
func setStackHeaders(h http.Header, st *decision.Stacked, ietf bool) {
	d, _, _ := st.Bound()
	h[headerLimit] = []string{strconv.FormatInt(limitheaders.LimitOf(d), 10)}
	h[headerRemaining] = []string{strconv.FormatInt(limitheaders.RemainingOf(d), 10)}
	if !ietf {
		return
	}
	var items []limitheaders.Item
	for i, d := range st.Decisions {
		l := st.Limits[i]
		items = append(items, limitheaders.Items(l.Name, l.Rule, d)...)
	}
	h[headerIETFPolicy] = []string{limitheaders.FormatPolicy(items)}
	h[headerIETF] = []string{limitheaders.FormatState(items)}
}
