package procs

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestEcho(t *testing.T) {
	e, err := StartEcho()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	resp, err := http.Post(e.URL+"/orders/1", "text/plain", strings.NewReader("body"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "upstream saw POST /orders/1\n" {
		t.Errorf("echo answered %d %q", resp.StatusCode, b)
	}
	e.Close()
	if _, err := http.Get(e.URL + "/"); err == nil {
		t.Error("echo still answers after Close")
	}
}
