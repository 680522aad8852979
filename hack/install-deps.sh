#!/usr/bin/env bash
# Installs what tollgate's tests and demo need from the machine's package
# manager: redis-server and redis-cli, and prometheus with promtool and the
# Redis exporter (the alert rule unit tests and the dashboard test against a
# real Prometheus), all Debian packages. With the argument
# "nginx" also nginx, the plain reverse proxy `make bench` measures as a
# reference. Does nothing when they are already installed. Needs root or
# passwordless sudo to install.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  missing+=(prometheus)
fi
command -v prometheus-redis-exporter >/dev/null 2>&1 || missing+=(prometheus-redis-exporter)
if [ "${1:-}" = nginx ] && [ ! -x /usr/sbin/nginx ]; then
  missing+=(nginx-light)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo="sudo -n"
  else
    echo "install-deps: ${missing[*]} missing and this user cannot install packages; install them as root: apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: ${missing[*]} missing and apt-get is not available; install Redis 7 and Prometheus (with promtool) with your package manager" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The packages start system services where systemd runs (Prometheus on
# :9090, the gateway's default admin port, which `make demo` uses; the
# exporter on :9121). Tests start their own servers on free ports and need
# neither: stop and disable them.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  for unit in prometheus prometheus-redis-exporter; do
    $sudo systemctl disable --now "$unit" >/dev/null 2>&1 || true
  done
fi
