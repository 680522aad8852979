package httpguard

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testutil/certtest"
)

func serverConfig(t *testing.T) *tls.Config {
	t.Helper()
	crt, key := certtest.New("example.com", "example.com")
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, NextProtos: []string{ProtoH2, "http/1.1"}}
}

// acceptOne accepts the next connection of ln within a bound.
func acceptOne(t *testing.T, ln net.Listener) net.Conn {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := ln.Accept(); ch <- res{c, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Cleanup(func() { r.c.Close() })
		return r.c
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted")
	}
	return nil
}

// TestTLSListenerByALPN: a connection that chose h2 is the *tls.Conn
// itself (net/http's HTTP/2 server takes no other, and its frames are not
// scanned); one that chose http/1.1 or nothing is a scanned Conn that
// reports the connection's TLS state, and a bare LF in its headers is
// refused.
func TestTLSListenerByALPN(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := TLSListener(raw, serverConfig(t), 5*time.Second)
	defer ln.Close()
	for _, tc := range []struct {
		protos []string
		h2     bool
	}{{[]string{"h2", "http/1.1"}, true}, {[]string{"http/1.1"}, false}, {nil, false}} {
		done := make(chan *tls.Conn, 1)
		go func() {
			c, err := tls.Dial("tcp", raw.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: tc.protos, ServerName: "example.com"})
			if err != nil {
				t.Error(err)
				done <- nil
				return
			}
			done <- c
		}()
		c := acceptOne(t, ln)
		client := <-done
		if client == nil {
			return
		}
		defer client.Close()
		_, isTLS := c.(*tls.Conn)
		if isTLS != tc.h2 {
			t.Fatalf("ALPN %v: accepted a %T, want the *tls.Conn: %v", tc.protos, c, tc.h2)
		}
		if tc.h2 {
			continue
		}
		st, ok := c.(interface{ ConnectionState() tls.ConnectionState })
		if !ok || st.ConnectionState().ServerName != "example.com" {
			t.Fatalf("ALPN %v: %T reports no TLS state with the server name", tc.protos, c)
		}
		go func() { _, _ = io.WriteString(client, "GET / HTTP/1.1\r\nA: 1\nB: 2\r\n\r\n") }()
		b, _ := io.ReadAll(io.LimitReader(c, 64))
		if !strings.HasSuffix(string(b), "\x00\r\n\r\n") {
			t.Fatalf("ALPN %v: read %q, want the block cut at the bare LF", tc.protos, b)
		}
	}
}

// TestTLSListenerSlowHandshake: a client that connects and sends nothing
// keeps nobody else from being accepted, and is closed at the handshake
// timeout.
func TestTLSListenerSlowHandshake(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := TLSListener(raw, serverConfig(t), 300*time.Millisecond)
	defer ln.Close()
	silent, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		if c, err := tls.Dial("tcp", raw.Addr().String(), &tls.Config{InsecureSkipVerify: true}); err == nil {
			defer c.Close()
			_, _ = c.Read(make([]byte, 1))
		}
	}()
	acceptOne(t, ln)
	_ = silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the silent client read %v, want EOF (closed at the handshake timeout)", err)
	}
}

// TestTLSListenerClose: Close ends Accept with net.ErrClosed.
func TestTLSListenerClose(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := TLSListener(raw, serverConfig(t), time.Second)
	errc := make(chan error, 1)
	go func() { _, err := ln.Accept(); errc <- err }()
	_ = ln.Close()
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "closed") {
			t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept still blocked after Close")
	}
}
