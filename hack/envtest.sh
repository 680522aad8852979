#!/usr/bin/env bash
# Provides the envtest binaries (kube-apiserver, etcd) and a matching kubectl,
# and prints the directory that holds them (use it as KUBEBUILDER_ASSETS).
#
# The binaries are pinned to the Kubernetes release that matches k8s.io/api in
# go.mod. They are taken, in order, from:
#   1. bin/k8s/<version>/ when already there (the cache; bin/ is git-ignored);
#   2. the standard setup-envtest download, when its release index answers;
#   3. a build from the Go module proxy (hack/envtest/go.mod): about ten to
#      twenty minutes on two cores the first time, seconds once the Go build
#      cache is warm.
# kubectl is always built from the module proxy so it matches the server.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(go list -m -f '{{.Version}}' k8s.io/api)   # v0.37.2
k8s_version="1.${version#v0.}"                        # 1.37.2
dir="$PWD/bin/k8s/$k8s_version"
mkdir -p "$dir"
if ! grep -q "k8s.io/kubernetes v$k8s_version\$" hack/envtest/go.mod; then
  echo "envtest: hack/envtest/go.mod must require k8s.io/kubernetes v$k8s_version to match k8s.io/api $version" >&2
  exit 1
fi

log() { echo "envtest: $*" >&2; }

have() { [ -x "$dir/kube-apiserver" ] && [ -x "$dir/etcd" ]; }

if ! have && [ "${ENVTEST_NO_DOWNLOAD:-}" != 1 ]; then
  index=https://raw.githubusercontent.com/kubernetes-sigs/controller-tools/HEAD/envtest-releases.yaml
  if curl -fsS --max-time 5 -o /dev/null "$index" 2>/dev/null; then
    log "downloading envtest $k8s_version with setup-envtest"
    if assets=$(go run sigs.k8s.io/controller-runtime/tools/setup-envtest@v0.25.1 use "$k8s_version" \
        --bin-dir "$PWD/bin/setup-envtest" -p path 2>/dev/null) && [ -x "$assets/kube-apiserver" ]; then
      cp "$assets/kube-apiserver" "$assets/etcd" "$dir/"
    else
      log "download failed; building from the Go module proxy instead"
    fi
  else
    log "the envtest download is unreachable; building from the Go module proxy"
  fi
fi

ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$k8s_version \
  -X k8s.io/component-base/version.gitMajor=${k8s_version%%.*} \
  -X k8s.io/component-base/version.gitMinor=$(echo "$k8s_version" | cut -d. -f2) \
  -X k8s.io/component-base/version.gitTreeState=clean"

targets=()
have || targets+=(./kube-apiserver ./etcd)
[ -x "$dir/kubectl" ] || targets+=(./kubectl)
if [ ${#targets[@]} -gt 0 ]; then
  log "building ${targets[*]} for Kubernetes $k8s_version (slow the first time)"
  start=$(date +%s)
  # CGO_ENABLED=0 and -trimpath as in the Dockerfile, so the Kubernetes
  # packages both builds share compile once.
  (cd hack/envtest && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$dir/" "${targets[@]}")
  log "built in $(( $(date +%s) - start ))s"
fi
echo "$dir"
