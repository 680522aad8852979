package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// bodyKey is the request context key of a forwarded request's *deadlineBody.
type bodyKey struct{}

// deadlineBody is a request body with a read deadline on the client
// connection (Options.ClientBodyTimeout). At the end of the body the
// deadline is lifted again, so the wait for the upstream's answer is not
// bounded by it; a read that hits it marks the body timed out, and the
// forwarding error is then answered 408.
type deadlineBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	timedOut atomic.Bool
}

// boundBody sets the client body deadline for a request with a body and
// returns its body wrapper; nil when there is no body or no bound. The
// deadline also bounds what the server reads (and discards) of the body of a
// request that is answered without forwarding. A gRPC call has none: its
// request is its stream, open as long as the call (its grpc-timeout bounds
// it, withGRPCDeadline).
func (h *Handler) boundBody(w http.ResponseWriter, r *http.Request) *deadlineBody {
	if h.opts.ClientBodyTimeout <= 0 || r.Body == nil || r.Body == http.NoBody || IsGRPC(r) {
		return nil
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(h.opts.ClientBodyTimeout)) != nil {
		return nil // not a connection with deadlines (e.g. a test recorder)
	}
	return &deadlineBody{ReadCloser: r.Body, rc: rc}
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		_ = b.rc.SetReadDeadline(time.Time{})
	case err != nil:
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			b.timedOut.Store(true)
		}
	}
	return n, err
}
