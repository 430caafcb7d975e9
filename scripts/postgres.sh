#!/usr/bin/env bash
# A throwaway PostgreSQL server for the test suite (storage tests on the PostgreSQL engine).
#
#   bash scripts/postgres.sh start   install PostgreSQL if missing (Debian, as root), create a fresh
#                                    cluster, start it on 127.0.0.1:$ARENA_PG_PORT (54329) with
#                                    trust authentication, create the database arena_test, print its URL
#   bash scripts/postgres.sh halt    stop that server, keeping its data (fault tests)
#   bash scripts/postgres.sh resume  start it again on the same data
#   bash scripts/postgres.sh stop    stop that server and delete its data directory
#
# Idempotent: `start` with a server already answering on the port only makes sure arena_test exists;
# `stop` with nothing running only removes the data directory.
# Data directory: $PGDATA_DIR, else target/pg, else (when the postgres user cannot reach target/)
# /tmp/arena-pg-$UID. PostgreSQL refuses to run as root, so as root the server runs as the
# `postgres` system user.
set -euo pipefail

PORT="${ARENA_PG_PORT:-54329}"
DB=arena_test
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
URL="postgres://postgres@127.0.0.1:${PORT}/${DB}"

die() {
    echo "postgres.sh: $*" >&2
    exit 1
}

pg_bin() {
    local dir
    dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
    [[ -n "$dir" && -x "$dir/postgres" ]] && echo "$dir"
}

install_postgres() {
    [[ "$(id -u)" == 0 ]] || die "PostgreSQL is not installed (/usr/lib/postgresql/*/bin/postgres) and installing it needs root"
    command -v apt-get >/dev/null || die "PostgreSQL is not installed and there is no apt-get to install it with"
    echo "postgres.sh: installing PostgreSQL (apt-get)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
}

# Runs a command as the user the server runs as.
as_pg() {
    if [[ "$(id -u)" == 0 ]]; then
        if command -v runuser >/dev/null; then
            runuser -u postgres -- "$@"
        else
            su postgres -s /bin/sh -c "$(printf '%q ' "$@")"
        fi
    else
        "$@"
    fi
}

ensure_pg_user() {
    [[ "$(id -u)" == 0 ]] || return 0
    id -u postgres >/dev/null 2>&1 && return 0
    useradd --system --home-dir /var/lib/postgresql --shell /bin/sh postgres \
        || die "cannot create the postgres system user"
}

# The data directory; creates its parent. Deterministic, so that `stop` finds what `start` made.
data_dir() {
    if [[ -n "${PGDATA_DIR:-}" ]]; then
        mkdir -p "$(dirname "$PGDATA_DIR")"
        echo "$PGDATA_DIR"
        return
    fi
    mkdir -p "$ROOT/target"
    if [[ "$(id -u)" != 0 ]] || as_pg test -x "$ROOT/target" 2>/dev/null; then
        echo "$ROOT/target/pg"
    else
        echo "/tmp/arena-pg-$(id -u)"
    fi
}

running() {
    "$1/pg_isready" -q -h 127.0.0.1 -p "$PORT" >/dev/null 2>&1
}

ensure_db() {
    local bin="$1"
    local exists
    exists="$("$bin/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = '$DB'")"
    if [[ "$exists" != 1 ]]; then
        "$bin/createdb" -h 127.0.0.1 -p "$PORT" -U postgres "$DB"
    fi
}

start() {
    local bin data
    bin="$(pg_bin)" || true
    if [[ -z "$bin" ]]; then
        install_postgres
        bin="$(pg_bin)" || die "PostgreSQL installed, but no /usr/lib/postgresql/*/bin/postgres"
    fi
    if running "$bin"; then
        ensure_db "$bin"
        echo "$URL"
        return
    fi
    ensure_pg_user
    data="$(data_dir)"
    # A leftover directory from a server that is not running: start over (it is throwaway).
    rm -rf "$data"
    mkdir -p "$data"
    [[ "$(id -u)" == 0 ]] && chown postgres:postgres "$data"
    chmod 700 "$data"
    as_pg "$bin/initdb" -D "$data" -A trust -U postgres -E UTF8 --no-locale --no-sync >/dev/null \
        || die "initdb failed in $data"
    make_certificate "$data"
    launch "$bin" "$data"
    ensure_db "$bin"
    echo "$URL"
}

# A self-signed certificate for 127.0.0.1, so that the server takes TLS connections too (the
# arena's client negotiates TLS where the server offers it; a test asks for it with
# sslmode=require). Without openssl the server runs without TLS, and that test says so.
make_certificate() {
    local data="$1"
    command -v openssl >/dev/null || return 0
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=127.0.0.1" \
        -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
        -keyout "$data/server.key" -out "$data/server.crt" >/dev/null 2>&1 || return 0
    chmod 600 "$data/server.key"
    [[ "$(id -u)" == 0 ]] && chown postgres:postgres "$data/server.key" "$data/server.crt"
    return 0
}

launch() {
    local bin="$1" data="$2" tls=""
    [[ -f "$data/server.crt" ]] && tls="-c ssl=on -c ssl_cert_file=server.crt -c ssl_key_file=server.key"
    as_pg "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
        -o "-p $PORT -k /tmp -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off -c synchronous_commit=off -c full_page_writes=off $tls" \
        start >/dev/null || {
        cat "$data/server.log" >&2 || true
        die "the server did not start (data directory $data, port $PORT)"
    }
}

stop() {
    local bin data
    data="$(data_dir)"
    bin="$(pg_bin)" || true
    if [[ -n "$bin" && -f "$data/postmaster.pid" ]]; then
        as_pg "$bin/pg_ctl" -D "$data" stop -m fast -w >/dev/null || echo "postgres.sh: pg_ctl stop failed" >&2
    fi
    rm -rf "$data"
}

# Fault tests: `halt` stops the server keeping its data, `resume` starts it again.
halt() {
    local bin data
    data="$(data_dir)"
    bin="$(pg_bin)" || die "PostgreSQL is not installed"
    [[ -f "$data/postmaster.pid" ]] || die "no server running from $data"
    as_pg "$bin/pg_ctl" -D "$data" stop -m fast -w >/dev/null || die "pg_ctl stop failed ($data)"
}

resume() {
    local bin data
    data="$(data_dir)"
    bin="$(pg_bin)" || die "PostgreSQL is not installed"
    [[ -d "$data" ]] || die "no data directory $data to resume"
    launch "$bin" "$data"
}

case "${1:-}" in
    start) start ;;
    halt) halt ;;
    resume) resume ;;
    stop) stop ;;
    *) die "usage: bash scripts/postgres.sh start|halt|resume|stop" ;;
esac
