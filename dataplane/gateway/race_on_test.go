//go:build race

package gateway_test

// raceEnabled: the race detector slows every goroutine 5-10x, so stress
// tests that measure exactness under load run in a separate, normal build
// (hack/test.sh runs them after the race pass).
const raceEnabled = true
