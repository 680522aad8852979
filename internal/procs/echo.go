package procs

import (
	"io"
	"net"
	"net/http"
	"time"
)

// Echo is an HTTP upstream on a free loopback port that answers every
// request with 200 and "upstream saw METHOD PATH". The demo, the benchmark
// harness and the end-to-end tests route to it.
type Echo struct {
	// URL is the upstream's base URL, "http://127.0.0.1:port".
	URL string
	srv *http.Server
}

// StartEcho serves an echo upstream until Close.
func StartEcho() (*Echo, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       2 * time.Minute,
		Handler:           http.HandlerFunc(echo),
	}
	go func() { _ = srv.Serve(ln) }()
	return &Echo{URL: "http://" + ln.Addr().String(), srv: srv}, nil
}

// Close stops the upstream and closes its connections.
func (e *Echo) Close() { _ = e.srv.Close() }

func echo(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "upstream saw "+r.Method+" "+r.URL.Path+"\n")
}
