#!/usr/bin/env bash
# The one test command (README, `make test`, CI): installs what the tests
# need on a fresh machine, checks formatting and vet, and runs every test with
# the race detector against real redis-server processes and a real
# kube-apiserver + etcd (envtest).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
step() { echo "== $* ($(( $(date +%s) - start ))s)"; }

# The envtest binaries build in the background while the packages install
# and gofmt, vet and the image module's tests run: on a fresh machine the
# build takes about ten minutes, and its single-threaded phases (the links of
# kube-apiserver, etcd and kubectl) leave a core free for the rest.
step "providing envtest binaries (kube-apiserver, etcd, kubectl), in the background"
envtest_out=$(mktemp)
bash hack/envtest.sh >"$envtest_out" &
envtest_pid=$!
norace_pid=
norace_out=$(mktemp)
trap 'kill "$envtest_pid" $norace_pid 2>/dev/null || true; rm -f "$envtest_out" "$norace_out"' EXIT

step "installing redis-server, prometheus (promtool) and the Redis exporter"
bash hack/install-deps.sh

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

# -trimpath keeps the checkout's path out of what the compiler writes, so a
# fresh clone in another directory finds its own packages in the build cache
# (without it, every one of them compiles again: about 90 s of a warm run).
step "go vet"
# -race -trimpath make vet compile the dependencies exactly as the tests
# below do, so they are built once.
go vet -race -trimpath ./...

step "hack/image (its own module: the image builder): vet and test"
(cd hack/image && go vet -race -trimpath ./... && go test -race -trimpath -count=1 ./...)

step "waiting for the envtest binaries"
if ! wait "$envtest_pid"; then
  echo "hack/envtest.sh failed (its messages are above)"; exit 1
fi
KUBEBUILDER_ASSETS=$(cat "$envtest_out")
export KUBEBUILDER_ASSETS

step "go test -race (and beside it, without the race detector, the controllers' specs labelled norace)"
# Those specs (one tenant with 120,000 rules: ~70 s under the race detector,
# in the longest package of this phase, ~15 s without it) run in a normal
# build beside the race phase, which leaves a core idle at times; their
# output follows it.
CGO_ENABLED=0 go test -trimpath -count=1 -timeout 10m -run '^TestControllers$' ./controllers/ "$@" \
  -args -ginkgo.label-filter=norace >"$norace_out" 2>&1 &
norace_pid=$!
go test -race -trimpath -count=1 -timeout 40m ./... "$@"

step "the controllers' specs labelled norace (ran beside the race phase)"
norace_status=0
wait "$norace_pid" || norace_status=$?
norace_pid=
cat "$norace_out"
if [ "$norace_status" -ne 0 ]; then
  echo "the controllers' norace specs failed (exit $norace_status)"; exit 1
fi

step "stress tests without the race detector"
# Exactness under a loaded machine: the race detector would slow the
# gateways themselves 5-10x, so these run once more in a normal build. It
# uses the image's build settings, as the tests' other non-race builds do
# (the image binary, the process tests' gateways, test/upgrade), so that a
# cold run compiles the dependencies without the race detector once.
CGO_ENABLED=0 go test -trimpath -count=1 -timeout 10m -run 'TestClusterExactUnderLoad' ./dataplane/gateway/ "$@"

step "done"
