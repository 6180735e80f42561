#!/usr/bin/env bash
# A throwaway PostgreSQL server for tests: the PostgreSQL conformance suite
# and the distributed-mode tests run against it.
#
#   scripts/pg-test-server.sh start DIR   # init (once) and start; prints the URL
#   scripts/pg-test-server.sh url DIR     # prints the URL of the running server
#   scripts/pg-test-server.sh stop DIR    # stops it (the data stays in DIR;
#                                         # a start again takes its port back)
#
# The server keeps its data, log and port under DIR, listens on 127.0.0.1
# only, on a free port, with trust authentication (tests only: anyone on
# this machine can connect), and holds a database `kiln_test`. The URL is
# `postgres://kiln@127.0.0.1:PORT/kiln_test`, the form KILN_TEST_POSTGRES
# takes:
#
#   export KILN_TEST_POSTGRES="$(scripts/pg-test-server.sh start /tmp/kiln-pg)"
#
# When Debian's `postgresql` package is missing and we are root, it is
# installed (CI runs as root on a fresh Debian 12 machine). initdb refuses
# to run as root, so as root the server runs as the `postgres` system user
# (created when missing) and DIR is handed to it.
set -euo pipefail

readonly SUPERUSER=kiln
readonly DATABASE=kiln_test
readonly FIRST_PORT=15432

readonly SERVER_NAME=pg-test-server
# shellcheck source=lib/test-server.sh
source "$(dirname "$0")/lib/test-server.sh"

usage() {
    echo "usage: $0 start|stop|url DIR" >&2
    exit 2
}

# The directory holding initdb, pg_ctl and postgres: Debian keeps them
# under /usr/lib/postgresql/<major>/bin, outside PATH; the newest wins.
find_bindir() {
    local dir
    dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    if [[ -n $dir && -x $dir/initdb && -x $dir/pg_ctl ]]; then
        echo "$dir"
        return 0
    fi
    # Another layout (a developer's own build, Homebrew, …): take it from PATH.
    if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
        dirname "$(command -v initdb)"
        return 0
    fi
    return 1
}

install_postgres() {
    [[ $EUID -eq 0 ]] ||
        die "PostgreSQL is not installed and we are not root: run 'sudo apt-get install -y postgresql'"
    echo "pg-test-server: installing Debian's postgresql package" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 || die "apt-get update failed"
    apt-get install -y -qq postgresql >&2 || die "apt-get install postgresql failed"
}

# Runs a command as the user that owns the server: `postgres` when we are
# root (initdb and postgres refuse root), ourselves otherwise.
as_owner() {
    if [[ $EUID -eq 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

ensure_owner_user() {
    [[ $EUID -eq 0 ]] || return 0
    if ! id -u postgres >/dev/null 2>&1; then
        useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres ||
            die "could not create the postgres system user"
    fi
}

url_of() {
    echo "postgres://$SUPERUSER@127.0.0.1:$1/$DATABASE"
}

is_running() {
    [[ -f $DIR/data/PG_VERSION ]] && as_owner "$BINDIR/pg_ctl" status -D "$DIR/data" >/dev/null 2>&1
}

psql_admin() {
    psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$1" -U "$SUPERUSER" -d postgres "${@:2}"
}

cmd_start() {
    if ! BINDIR=$(find_bindir); then
        install_postgres
        BINDIR=$(find_bindir) || die "postgresql is installed but initdb was not found"
    fi
    ensure_owner_user
    mkdir -p "$DIR" || die "could not create $DIR"
    DIR=$(cd "$DIR" && pwd)
    if [[ $EUID -eq 0 ]]; then
        chown postgres: "$DIR" || die "could not hand $DIR to the postgres user"
        as_owner test -w "$DIR" ||
            die "the postgres user cannot write $DIR: a parent directory is not searchable by others (chmod o+x it, or pick a DIR under /tmp)"
    fi

    if is_running; then
        url_of "$(cat "$DIR/port")"
        return 0
    fi

    if [[ ! -f $DIR/data/PG_VERSION ]]; then
        echo "pg-test-server: initdb in $DIR/data" >&2
        as_owner "$BINDIR/initdb" -D "$DIR/data" -U "$SUPERUSER" --auth=trust \
            --encoding=UTF8 --locale=C >"$DIR/initdb.log" 2>&1 ||
            die "initdb failed; see $DIR/initdb.log"
    fi

    # Another process may take the free port before postgres binds it:
    # try a few times, each with a port found free just before. A server
    # started again in the same DIR first tries the port it had, so that
    # clients holding its URL find it again (the fault tests restart it).
    local port attempt
    for attempt in 1 2 3; do
        if [[ $attempt -eq 1 && -f $DIR/port ]] && ! port_in_use "$(cat "$DIR/port")"; then
            port=$(cat "$DIR/port")
        else
            port=$(free_port "$FIRST_PORT")
        fi
        # listen_addresses: loopback only. unix_socket_directories='': no
        # socket file, so DIR's path length and /var/run do not matter.
        if as_owner "$BINDIR/pg_ctl" start -D "$DIR/data" -l "$DIR/postgres.log" -w -t 60 \
            -o "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories=''" >&2; then
            break
        fi
        [[ $attempt -lt 3 ]] || die "postgres did not start; see $DIR/postgres.log"
        echo "pg-test-server: start on port $port failed, trying another port" >&2
    done
    echo "$port" | as_owner tee "$DIR/port" >/dev/null

    if [[ -z $(psql_admin "$port" -tA -c "SELECT 1 FROM pg_database WHERE datname = '$DATABASE'") ]]; then
        psql_admin "$port" -c "CREATE DATABASE $DATABASE" >&2 ||
            die "could not create database $DATABASE"
    fi
    url_of "$port"
}

cmd_stop() {
    BINDIR=$(find_bindir) || die "PostgreSQL is not installed"
    [[ -d $DIR ]] || die "$DIR does not exist"
    DIR=$(cd "$DIR" && pwd)
    if is_running; then
        as_owner "$BINDIR/pg_ctl" stop -D "$DIR/data" -m fast -w >&2 ||
            die "pg_ctl stop failed; see $DIR/postgres.log"
    else
        echo "pg-test-server: no server running in $DIR" >&2
    fi
}

cmd_url() {
    BINDIR=$(find_bindir) || die "PostgreSQL is not installed"
    [[ -d $DIR ]] || die "$DIR does not exist"
    DIR=$(cd "$DIR" && pwd)
    is_running || die "no server running in $DIR (start it with: $0 start $DIR)"
    url_of "$(cat "$DIR/port")"
}

[[ $# -eq 2 ]] || usage
DIR=$2
case $1 in
start) cmd_start ;;
stop) cmd_stop ;;
url) cmd_url ;;
*) usage ;;
esac
