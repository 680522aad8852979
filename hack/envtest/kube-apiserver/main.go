// Command kube-apiserver is the upstream Kubernetes API server, built from the
// Go module proxy so that envtest can run where the usual binary download is
// unreachable. It adds nothing to upstream behaviour.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
