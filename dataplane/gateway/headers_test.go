package gateway_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// rawExchange writes raw to the gateway and reads the answers until the
// connection closes (or 10s pass).
func rawExchange(t *testing.T, addr, raw string) []*http.Response {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	var out []*http.Response
	for {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			return out
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		res.Header.Set("X-Test-Body", string(body))
		out = append(out, res)
		if res.Close {
			return out
		}
	}
}

// TestHeaderBlockWithBareLFOrCR: a header block that splits a line on a
// bare LF (or holds a bare CR) is refused with 400 and never forwarded, also
// when it follows a good request on the same connection.
func TestHeaderBlockWithBareLFOrCR(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("r", "*", "*", 100, slow))
	gw := start(t, e.options(srv.Addr()), testLogger(t))
	const good = "GET /orders HTTP/1.1\r\nHost: x\r\nX-Api-Key: shop-a\r\n\r\n"
	for _, tc := range []struct {
		name  string
		raw   string
		codes []int // the answers, in order
	}{
		{"bare LF inside the block", "GET /orders HTTP/1.1\r\nHost: x\r\nX-Api-Key: shop-a\r\nX-Note: a\nX-Injected: 1\r\n\r\n", []int{400}},
		{"bare CR inside the block", "GET /orders HTTP/1.1\r\nHost: x\r\nX-Api-Key: shop-a\r\nX-Note: a\rX-Injected: 1\r\n\r\n", []int{400}},
		{"bare LF line ends throughout", "GET /orders HTTP/1.1\nHost: x\nX-Api-Key: shop-a\n\n", []int{400}},
		{"bare LF in a pipelined second request", good + "GET /orders HTTP/1.1\r\nHost: x\r\nX-Api-Key: shop-a\r\nX-Note: a\nX-Injected: 1\r\n\r\n", []int{200, 400}},
		{"bare LF after a body", "POST /orders HTTP/1.1\r\nHost: x\r\nX-Api-Key: shop-a\r\nContent-Length: 3\r\n\r\na\nb" +
			"GET /orders HTTP/1.1\r\nHost: x\r\nX-Api-Key: shop-a\r\nX-Note: a\nX-Injected: 1\r\n\r\n", []int{200, 400}},
		{"LF inside a body is data", "POST /orders HTTP/1.1\r\nHost: x\r\nX-Api-Key: shop-a\r\nContent-Length: 3\r\n\r\na\nb" + good, []int{200, 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := rawExchange(t, gw.Addr(), tc.raw+"GET /orders HTTP/1.1\r\nHost: x\r\nX-Api-Key: shop-a\r\nConnection: close\r\n\r\n")
			var got []int
			for _, r := range res {
				got = append(got, r.StatusCode)
			}
			// A refused block ends the connection; otherwise the closing
			// request answers too.
			want := tc.codes
			if want[len(want)-1] != 400 {
				want = append(want, 200)
			}
			if len(got) != len(want) {
				t.Fatalf("answers %v, want %v", got, want)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("answers %v, want %v", got, want)
				}
			}
		})
	}
}

// TestChunkedBodyEndsConnection: a chunked body is not followed by the
// header check, so its request is the connection's last.
func TestChunkedBodyEndsConnection(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("r", "*", "*", 100, slow))
	gw := start(t, e.options(srv.Addr()), testLogger(t))
	res := rawExchange(t, gw.Addr(), "POST /orders HTTP/1.1\r\nHost: x\r\nX-Api-Key: shop-a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\na\nb\r\n0\r\n\r\n"+
		"GET /orders HTTP/1.1\r\nHost: x\r\nX-Api-Key: shop-a\r\nX-Note: a\nX-Injected: 1\r\n\r\n")
	if len(res) != 1 || res[0].StatusCode != 200 || !res[0].Close || !strings.Contains(res[0].Header.Get("X-Test-Body"), "body=a\nb") {
		for _, r := range res {
			t.Logf("%d close=%v %q", r.StatusCode, r.Close, r.Header.Get("X-Test-Body"))
		}
		t.Fatalf("%d answers, want one 200 with Connection: close", len(res))
	}
}
