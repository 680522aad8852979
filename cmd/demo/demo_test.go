package demo

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
)

// The demo is the README's first command: run it whole so it never rots.
func TestDemoRuns(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server is not installed; run hack/install-deps.sh")
	}
	var out bytes.Buffer
	if err := Run(context.Background(), Options{Out: &out}); err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"redis-server started",
		"X-Api-Key: shop-a  ->  401",
		"->  200  X-RateLimit-Remaining: 1",
		"->  200  X-RateLimit-Remaining: 0",
		"->  429  X-RateLimit-Remaining: 0  Retry-After: 60",
		"circuit breaker: open",
		"All steps behaved as expected",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}
