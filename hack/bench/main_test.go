package main

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve the rls scenario's floor too: the
// scenario starts its own executable with -serve-rls-floor, which under go
// test is this binary.
func TestMain(m *testing.M) {
	if floorMain() {
		return
	}
	os.Exit(m.Run())
}
