package proxy

import (
	"errors"
	"net/http"

	"github.com/tollgate-dev/tollgate/dataplane/identity"
	"github.com/tollgate-dev/tollgate/dataplane/jwtauth"
)

// refuseIdentity answers a request whose identification failed with err:
// 401 with the challenges of the identity methods (RFC 6750's
// error="invalid_token" for a bad token), or 400 for a malformed API key;
// it counts the failure by reason.
func (h *Handler) refuseIdentity(w http.ResponseWriter, route string, err error) {
	h.failures(err).Inc()
	var ie *jwtauth.InvalidError
	if h.opts.JWT != nil && errors.As(err, &ie) {
		h.opts.JWT.Refused.WithLabelValues(ie.Reason).Inc()
	}
	status := identity.Status(err)
	if status == http.StatusUnauthorized {
		w.Header()["Www-Authenticate"] = h.chain.Challenges(err)
	}
	h.reply(w, route, status, errorText(err))
}

// stripCredential removes the Authorization header from a request whose
// identity came from it, unless the route forwards it
// (forwardAuthorization: the upstream verifies the token too). A header
// that did not identify the request (an API key did) goes through.
func stripCredential(r *http.Request, up *upstream, caller identity.Caller) {
	if caller.Bearer && !up.forwardAuthorization {
		r.Header.Del("Authorization")
	}
}
