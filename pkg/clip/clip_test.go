package clip

import (
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	short := strings.Repeat("a", Max)
	if got := String(short); got != short {
		t.Errorf("String(%d bytes) = %q, want it unchanged", Max, got)
	}
	if got := String(short + "b"); got != short+"..." {
		t.Errorf("String(%d bytes) = %q, want %d bytes and ...", Max+1, got, Max)
	}
}
