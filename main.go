// Command tollgate is a distributed rate limiter for API gateways: a
// Kubernetes controller that compiles RateLimitRules into a rule snapshot, and
// a gateway data plane that enforces them with Redis. Run "tollgate --help".
package main

import (
	"os"

	"github.com/tollgate-dev/tollgate/internal/cli"
)

func main() {
	os.Exit(cli.Execute(os.Args[1:]))
}
