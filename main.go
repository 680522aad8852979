// Command tollgate is a distributed rate limiter for API gateways: a
// Kubernetes controller that compiles RateLimitRules into a rule snapshot, and
// a gateway data plane that enforces them with Redis. Run "tollgate --help".
package main

import (
	_ "embed"
	"os"

	"github.com/tollgate-dev/tollgate/cmd"
	"github.com/tollgate-dev/tollgate/internal/version"
)

// release is the VERSION file: the one place the release version is written
// (the Makefile's image tag and the chart's appVersion follow it).
//
//go:embed VERSION
var release string

func main() {
	version.SetRelease(release)
	os.Exit(cmd.Execute(os.Args[1:]))
}
