#!/usr/bin/env bash
# The one test command (README, `make test`, CI): installs what the tests
# need on a fresh machine, checks formatting and vet, and runs every test with
# the race detector against real redis-server processes and a real
# kube-apiserver + etcd (envtest).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
step() { echo "== $* ($(( $(date +%s) - start ))s)"; }

step "installing redis-server"
bash hack/install-deps.sh

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

# The envtest binaries (a long build the first time on a machine) and go vet
# (which compiles the tests' dependencies) are independent: run them side by
# side so the link steps of one fill the idle core of the other.
step "providing envtest binaries (kube-apiserver, etcd, kubectl), alongside go vet"
assets_file=$(mktemp)
trap 'rm -f "$assets_file"' EXIT
bash hack/envtest.sh >"$assets_file" &
envtest_pid=$!

step "go vet"
# -race makes vet compile the dependencies exactly as the tests below do, so
# they are built once.
if ! go vet -race ./...; then
  wait "$envtest_pid" || true
  exit 1
fi

step "waiting for the envtest binaries"
wait "$envtest_pid"
KUBEBUILDER_ASSETS=$(cat "$assets_file")
export KUBEBUILDER_ASSETS

step "go test -race"
go test -race -count=1 -timeout 40m ./... "$@"

step "done"
