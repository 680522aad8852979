//go:build race

package e2e

// raceEnabled: the suite runs under the race detector (make test).
const raceEnabled = true
