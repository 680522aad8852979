package proxy

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

func TestIsGRPC(t *testing.T) {
	for _, tc := range []struct {
		major int
		ct    []string
		want  bool
	}{
		{2, []string{"application/grpc"}, true},
		{2, []string{"application/grpc+proto"}, true},
		{2, []string{"Application/GRPC;charset=utf-8"}, true},
		{2, []string{"application/grpc-web"}, false},
		{2, []string{"application/grpcx"}, false},
		{2, []string{"application/json"}, false},
		{2, nil, false},
		{2, []string{"application/grpc", "application/grpc"}, false},
		{1, []string{"application/grpc"}, false}, // gRPC needs HTTP/2
	} {
		r := httptest.NewRequest("POST", "/s/M", nil)
		r.ProtoMajor = tc.major
		if tc.ct != nil {
			r.Header["Content-Type"] = tc.ct
		}
		if got := IsGRPC(r); got != tc.want {
			t.Errorf("HTTP/%d %q: %v, want %v", tc.major, tc.ct, got, tc.want)
		}
	}
}

// TestWriteGRPCStatus: the gateway's answers to a gRPC call, by HTTP
// status: HTTP 200, the gRPC code, the message percent-encoded, the
// headers already set kept as metadata, no body.
func TestWriteGRPCStatus(t *testing.T) {
	for status, want := range map[int]codes.Code{
		400: codes.InvalidArgument, 401: codes.Unauthenticated, 403: codes.PermissionDenied,
		404: codes.Unimplemented, 405: codes.Unimplemented, 408: codes.DeadlineExceeded,
		413: codes.ResourceExhausted, 421: codes.Unavailable, 429: codes.ResourceExhausted, 431: codes.ResourceExhausted,
		500: codes.Unavailable, 502: codes.Unavailable, 503: codes.Unavailable, 504: codes.DeadlineExceeded, 418: codes.Unknown,
	} {
		w := httptest.NewRecorder()
		w.Header().Set("Retry-After", "3")
		WriteGRPCStatus(w, status, "100% über\nlimit")
		res := w.Result()
		if res.StatusCode != http.StatusOK || res.Header.Get("Grpc-Status") != strconv.Itoa(int(want)) ||
			res.Header.Get("Grpc-Message") != "100%25 %C3%BCber%0Alimit" || res.Header.Get("Retry-After") != "3" ||
			res.Header.Get("Content-Type") != "application/grpc" || w.Body.Len() != 0 {
			t.Errorf("HTTP %d: %d %v body %q, want grpc-status %d", status, res.StatusCode, res.Header, w.Body, want)
		}
	}
}

func TestGRPCTimeout(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"100m": 100 * time.Millisecond, "2S": 2 * time.Second, "1M": time.Minute, "3H": 3 * time.Hour,
		"5u": 5 * time.Microsecond, "7n": 7, "99999999H": maxGRPCTimeout, "0m": 0,
	} {
		h := http.Header{"Grpc-Timeout": {in}}
		if got, ok := grpcTimeout(h); !ok || got != want {
			t.Errorf("%q: %v %v, want %v", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "m", "10", "10x", "+10m", "-1S", "123456789S", "1.5S"} {
		if got, ok := grpcTimeout(http.Header{"Grpc-Timeout": {in}}); ok {
			t.Errorf("%q: %v, want refused", in, got)
		}
	}
	if _, ok := grpcTimeout(http.Header{"Grpc-Timeout": {"1S", "2S"}}); ok {
		t.Error("two grpc-timeout values accepted")
	}
}
