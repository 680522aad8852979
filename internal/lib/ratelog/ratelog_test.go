package ratelog

import (
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
)

func TestOneLinePerIntervalWithSuppressedCount(t *testing.T) {
	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	l := New(log, time.Second)
	now := time.Unix(0, 0)
	l.now = func() time.Time { return now }

	for range 100 {
		l.Info("fallback active")
	}
	l.Info("other message")
	now = now.Add(1500 * time.Millisecond)
	l.Info("fallback active")
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want 3: %q", len(lines), lines)
	}
	if want := `"suppressed"=99`; !strings.Contains(lines[2], want) {
		t.Fatalf("third line %q lacks %s", lines[2], want)
	}
}
