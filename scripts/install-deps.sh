#!/usr/bin/env bash
# install-deps.sh -- Installs what a fresh Debian 12 machine lacks to build, test and demo outbox-relay.
set -euo pipefail

pkgs=(build-essential meson ninja-build pkg-config
      librdkafka-dev libpq-dev libconfig-dev libsystemd-dev libcmocka-dev libyajl-dev libmicrohttpd-dev libcurl4-openssl-dev prometheus clang libclang-rt-14-dev valgrind
      postgresql-15 postgresql-client-15 postgresql-contrib
      openjdk-17-jre-headless maven systemd clang-format procps iproute2 python3 pgbouncer
      python3-psycopg2 python3-confluent-kafka
      debhelper dpkg-dev fakeroot lintian man-db groff-base)

missing=()
for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
        echo "install-deps: all packages present"
        exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
        echo "install-deps: missing packages: ${missing[*]} (run as root or install them)" >&2
        exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
# pgbouncer is here for test_pooler, which starts its own; the package's system service (port
# 6432, no database configured) serves nothing, so a machine booted with systemd does not keep it.
if [[ " ${missing[*]} " == *" pgbouncer "* ]] && [ -d /run/systemd/system ]; then
        systemctl disable --now pgbouncer.service >/dev/null 2>&1 || true
fi
