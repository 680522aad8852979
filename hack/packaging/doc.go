// Package packaging holds the tests of how tollgate is shipped: the
// Dockerfile (built the way the image builds it, checked to be static), the
// kustomize tree under config/, and the Helm chart under charts/tollgate
// (lint, schema, golden renders, and a server-side dry run of every object
// against a real kube-apiserver from envtest).
//
// Run them with
//
//	go test -count=1 ./hack/packaging/
//
// and rewrite the golden files after an intended chart change with
//
//	go test ./hack/packaging/ -run Golden -update
//
// They need Helm (hack/helm.sh builds a pinned one into bin/ on first use,
// about four minutes on two cores) and the envtest binaries (hack/envtest.sh,
// via internal/testutil/envtestutil). The image build check compiles the
// whole binary with the Dockerfile's flags: with a cold Go build cache that
// alone takes several minutes, so give a first run on a fresh machine
// -timeout 30m (hack/test.sh does); warm, the package takes under a minute.
// -short skips the image build and the API server. The package has no code
// of its own, only tests.
package packaging
