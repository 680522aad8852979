// Package gobuild builds the tollgate command for tests that run it as a
// process.
package gobuild

import (
	"fmt"
	"os"
	"os/exec"
)

// Tollgate builds the tollgate main package in src (a checkout of this
// repository) into bin, with env added to the environment. It uses the
// image's settings (-trimpath, CGO_ENABLED=0), as every non-race build in
// the tests does (hack/packaging's image binary, the stress pass of
// hack/test.sh), so that a cold run compiles the dependencies without the
// race detector once.
func Tollgate(src, bin string, env ...string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	cmd.Dir = src
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build in %s: %v\n%s", src, err, out)
	}
	return nil
}
