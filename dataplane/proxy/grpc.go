package proxy

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tollgate-dev/tollgate/dataplane/routing"
)

// gRPC through the proxy. A gRPC call is an HTTP/2 request with the
// Content-Type application/grpc (or application/grpc+<codec>), and it is
// forwarded like any other, trailers and all. What changes is the
// gateway's own answers: a gRPC client reads only grpc-status, and gRPC
// libraries turn an HTTP error status into UNAVAILABLE or UNKNOWN, so a
// gRPC request is answered HTTP 200 with a Trailers-Only response whose
// grpc-status and grpc-message say what the gateway refused, and whose
// other headers (X-RateLimit-*, Retry-After, WWW-Authenticate) reach the
// client as metadata: over the limit RESOURCE_EXHAUSTED, a failed
// identification UNAUTHENTICATED, no route UNIMPLEMENTED (grpcCode). A
// call's deadline (grpc-timeout) also bounds its forwarding.

// IsGRPC reports whether r is a gRPC call (routing.IsGRPC).
func IsGRPC(r *http.Request) bool { return routing.IsGRPC(r) }

// grpcWriter is the ResponseWriter of a gRPC call: reply answers on it in
// gRPC's form. Everything else goes to the server's writer (Unwrap lets
// http.ResponseController find its Flush and deadlines).
type grpcWriter struct{ http.ResponseWriter }

func (g grpcWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// Flush flushes the server's writer.
func (g grpcWriter) Flush() { _ = http.NewResponseController(g.ResponseWriter).Flush() }

// grpcCode is the gRPC status code of a gateway answer with HTTP status.
func grpcCode(status int) codes.Code {
	switch status {
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		return codes.Unimplemented
	case http.StatusRequestTimeout, http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests, http.StatusRequestHeaderFieldsTooLarge:
		return codes.ResourceExhausted
	case http.StatusMisdirectedRequest, http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable:
		// 500: a backend that does not resolve (GRPCRoute: UNAVAILABLE).
		return codes.Unavailable
	}
	return codes.Unknown
}

// WriteGRPCStatus answers a gRPC call with the gateway's own answer of
// HTTP status and message msg, in gRPC's form: HTTP 200, grpc-status,
// grpc-message, and no body (a Trailers-Only response: the headers already
// set go with it as metadata).
func WriteGRPCStatus(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h["Content-Type"] = []string{"application/grpc"}
	h["Grpc-Status"] = []string{strconv.Itoa(int(grpcCode(status)))}
	h["Grpc-Message"] = []string{grpcMessage(msg)}
	w.WriteHeader(http.StatusOK)
}

// grpcMessage percent-encodes msg for grpc-message: bytes outside
// printable ASCII, and '%'.
func grpcMessage(msg string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c >= ' ' && c <= '~' && c != '%' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// maxGRPCTimeout bounds a grpc-timeout the gateway applies (the header
// allows 8 digits of hours).
const maxGRPCTimeout = 24 * time.Hour

// grpcTimeout is the deadline a gRPC call carries in grpc-timeout (8
// digits at most and a unit: H, M, S, m, u, n), at most maxGRPCTimeout;
// ok is false without a valid one.
func grpcTimeout(h http.Header) (time.Duration, bool) {
	v := h["Grpc-Timeout"]
	if len(v) != 1 || len(v[0]) < 2 || len(v[0]) > 9 {
		return 0, false
	}
	var n int64
	for _, c := range []byte(v[0][:len(v[0])-1]) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	var unit time.Duration
	switch v[0][len(v[0])-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	if n > int64(maxGRPCTimeout/unit) {
		return maxGRPCTimeout, true
	}
	return time.Duration(n) * unit, true
}

// withGRPCDeadline bounds the forwarding of a gRPC call by its
// grpc-timeout, which goes upstream as it came: the upstream's deadline is
// the client's, and the gateway cancels the call at it (a client that does
// not cancel its calls holds no upstream stream past its deadline).
func withGRPCDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d, ok := grpcTimeout(r.Header); ok {
			ctx, cancel := context.WithTimeout(r.Context(), d)
			defer cancel()
			r = r.WithContext(ctx)
		}
		next.ServeHTTP(w, r)
	})
}
