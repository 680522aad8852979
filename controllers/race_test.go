//go:build race

package controllers

// raceEnabled: the suite runs under the race detector (hack/test.sh's main
// phase); specs labelled norace run in its phase without it.
const raceEnabled = true
