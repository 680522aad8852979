#!/usr/bin/env bash
# Provides a pinned Helm binary and prints its path. The first run builds it
# from source with `go install` through the Go module proxy (about four
# minutes on two cores; later runs print the cached path at once). bin/ is
# git-ignored.
#
#   helm=$(bash hack/helm.sh) && "$helm" template charts/tollgate
#
# HELM_VERSION overrides the pinned version (a helm.sh/helm/v3 module version).
set -euo pipefail
cd "$(dirname "$0")/.."

version=${HELM_VERSION:-v3.22.0}
dir="$PWD/bin/helm-$version"
if [ ! -x "$dir/helm" ]; then
  echo "helm.sh: building helm $version with go install (first time only)" >&2
  start=$(date +%s)
  mkdir -p "$PWD/bin"
  # Build into a private directory and move it into place, so a concurrent
  # run never sees a half-written binary. GOFLAGS is cleared: flags meant for
  # this module do not apply to helm's.
  tmp=$(mktemp -d "$PWD/bin/.helm-build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  export GOFLAGS=

  # The -X flags of helm's own release build (its Makefile): without them
  # `helm version` says "v3.22" and `helm template`/`helm lint` assume
  # Kubernetes 1.20 (the chart requires 1.30+). Helm's default Kubernetes
  # version is the one of the client-go it is built with, as in its Makefile.
  gomod=$(cd "$tmp" && go mod download -json "helm.sh/helm/v3@$version" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  client_go=$(sed -n 's/^[[:space:]]*k8s\.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod" | head -n1)
  if [ -z "$client_go" ]; then
    echo "helm.sh: cannot find the k8s.io/client-go version in $gomod" >&2
    exit 1
  fi
  pkg=helm.sh/helm/v3
  ldflags="-w -s -X $pkg/internal/version.version=$version -X $pkg/internal/version.metadata="
  for p in pkg/chartutil pkg/lint/rules; do
    ldflags+=" -X $pkg/$p.k8sVersionMajor=1 -X $pkg/$p.k8sVersionMinor=$client_go"
  done

  (cd "$tmp" && GOBIN="$tmp" go install -trimpath -ldflags "$ldflags" "$pkg/cmd/helm@$version") >&2
  mkdir -p "$dir"
  mv -f "$tmp/helm" "$dir/helm"
  echo "helm.sh: built in $(( $(date +%s) - start ))s" >&2
fi
echo "$dir/helm"
