package proxy

import (
	"net/http"
)

// route asks the router in force for the route of r and returns its
// upstream and the request to forward. A request the router refuses (404,
// 405, 500, 503) it answers itself, under the matched route's id or
// "none", and returns nil then.
func (h *Handler) route(w http.ResponseWriter, r *http.Request) (*upstream, *http.Request) {
	router := h.opts.Router()
	route, out, refusal := router.Route(r)
	id := "none"
	var up *upstream
	if route != nil {
		// Built even for a refusal: the route's metric series exist from
		// its first request on.
		up = h.upstreams.get(router, route)
		id = up.id
	}
	if refusal.Status == 0 {
		return up, out
	}
	if refusal.Log != "" {
		h.log.Error(nil, refusal.Log, append([]any{"route", id}, refusal.LogValues...)...)
	}
	if refusal.Allow != nil {
		w.Header()["Allow"] = refusal.Allow
	}
	h.reply(w, id, refusal.Status, refusal.Message)
	return nil, r
}
