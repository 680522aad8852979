//go:build race

package main

// raceEnabled: this binary was built with -race (as `make test` builds the
// harness's test), so its own figures are not speed figures.
const raceEnabled = true
