#!/usr/bin/env bash
# Makes sure Postgres and RabbitMQ are installed, running and answering on 127.0.0.1, and that
# a C compiler and the Rust toolchain are there: what the demo needs, and nothing more (the test
# command adds its own tools with scripts/test-tools.sh). Idempotent: on a machine where they
# already run it only checks.
# Installs with apt-get (Debian) when something is missing; needs root or sudo for that.
set -euo pipefail

log() { printf '[services] %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

PG_URL=${DATABASE_URL:-postgres://postgres:postgres@127.0.0.1:5432/postgres}

# install_missing PACKAGE...: installs the Debian packages given, if any, with apt-get.
install_missing() {
  [ $# -gt 0 ] || return 0
  log "installing $* with apt-get"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

missing=()
command -v pg_ctlcluster >/dev/null 2>&1 || missing+=(postgresql)
command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)
command -v rabbitmq-server >/dev/null 2>&1 || missing+=(rabbitmq-server)
command -v cc >/dev/null 2>&1 || missing+=(build-essential)
command -v curl >/dev/null 2>&1 || missing+=(curl ca-certificates)
install_missing "${missing[@]}"

if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  log "no Rust toolchain: installing rustup's stable toolchain"
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c rustfmt,clippy >/dev/null
  export PATH="$HOME/.cargo/bin:$PATH"
fi

wait_for() { # name, seconds, command...
  local name=$1 secs=$2; shift 2
  for _ in $(seq 1 "$secs"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  log "$name did not become ready within ${secs}s"; return 1
}

# Postgres: start the cluster if it does not answer.
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  log "starting Postgres $version"
  as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
fi
wait_for Postgres 60 pg_isready -q -h 127.0.0.1 -p 5432
# A fresh Debian install asks for a password on TCP: give the postgres user the one in the URL.
if ! psql "$PG_URL" -qAtc 'SELECT 1' >/dev/null 2>&1; then
  log "setting the postgres user's password for TCP connections"
  as_root su postgres -c "psql -qc \"ALTER USER postgres PASSWORD 'postgres'\"" >/dev/null
fi
psql "$PG_URL" -qAtc 'SELECT 1' >/dev/null

# RabbitMQ: start the broker if its AMQP port is closed.
amqp_open() { (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; }
if ! amqp_open; then
  log "starting RabbitMQ"
  as_root rabbitmq-server -detached >/dev/null 2>&1 || true
fi
wait_for RabbitMQ 120 amqp_open
log "Postgres and RabbitMQ are ready"
