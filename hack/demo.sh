#!/usr/bin/env bash
# The main job on a fresh machine: installs redis-server where it is missing
# (and this user may), builds tollgate and runs its local demo.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! bash hack/install-deps.sh; then
  echo "demo: continuing without redis-server (the demo uses the in-process limiter)" >&2
fi
go build -o bin/tollgate .
exec bin/tollgate demo "$@"
