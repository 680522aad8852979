package gateway_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// silentUpstream accepts connections, reads what comes and never answers.
func silentUpstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestUpstreamTimeoutDefault: a route without a timeout of its own gets
// --upstream-timeout; an upstream that accepts and never answers is a 504.
func TestUpstreamTimeoutDefault(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, silentUpstream(t), rule("r", "*", "*", 100, slow))
	o := e.options(srv.Addr())
	o.UpstreamTimeout = 300 * time.Millisecond
	gw := start(t, o, testLogger(t))
	c := &http.Client{Timeout: 20 * time.Second}
	req, _ := http.NewRequest("GET", gw.url+"/orders", nil)
	req.Header.Set("X-Api-Key", "shop-a")
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("no answer from the gateway while the upstream is silent: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(body), "upstream timed out") {
		t.Fatalf("%d %s, want 504 upstream timed out", res.StatusCode, body)
	}
}

// TestClientBodyTimeout: a client that trickles its body over a raw socket
// gets 408 and a closed connection after --client-body-timeout, however it
// keeps sending; a body sent in time still goes through.
func TestClientBodyTimeout(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("r", "*", "*", 100, slow))
	o := e.options(srv.Addr())
	o.ClientBodyTimeout = time.Second
	gw := start(t, o, testLogger(t))

	conn, err := net.Dial("tcp", gw.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const size = 100
	if _, err := fmt.Fprintf(conn, "POST /orders HTTP/1.1\r\nHost: x\r\nX-Api-Key: shop-a\r\nContent-Length: %d\r\n\r\n", size); err != nil {
		t.Fatal(err)
	}
	// One byte every 200ms: the whole body would take 20s.
	stop := make(chan struct{})
	go func() {
		for range size {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			if _, err := conn.Write([]byte("x")); err != nil {
				return
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no 408 within 10s of trickling a body (client body timeout 1s): %v", err)
	}
	msg, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(msg), "request body not received in time") {
		t.Fatalf("%d %s, want 408", res.StatusCode, msg)
	}
	// The gateway closes the connection; the client may still have a byte
	// of the trickle in flight, and a byte that reaches a closed socket
	// makes the kernel answer with a reset. Both EOF and a reset mean
	// closed; a connection left open times out the read below instead.
	close(stop)
	if rest, err := io.ReadAll(br); (err != nil && !errors.Is(err, syscall.ECONNRESET)) || len(rest) != 0 {
		t.Fatalf("after the 408 the connection is not closed: %v, then %q", err, rest)
	}

	// A body sent at once passes, on a connection that keeps the deadline
	// only while the body is read: a slower upstream answer is fine.
	res2, body := sendBody(t, gw.url+"/orders", "shop-a", strings.Repeat("y", 1000))
	if res2.StatusCode != 200 || !strings.Contains(body, "body=yyy") {
		t.Fatalf("a prompt body: %d %.80s", res2.StatusCode, body)
	}
}

// sendBody POSTs body with key.
func sendBody(t *testing.T, url, key, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", key)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(b)
}
