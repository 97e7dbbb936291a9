#!/bin/bash
# First start: initdb into $PGDATA, password auth over TCP, the database; then run postgres in
# the foreground (SIGINT from `docker stop`, see STOPSIGNAL: fast shutdown).
set -euo pipefail
: "${POSTGRES_USER:=spade}" "${POSTGRES_PASSWORD:=spade}" "${POSTGRES_DB:=spade}"
if [[ ! -s "$PGDATA/PG_VERSION" ]]; then
    pw="$(mktemp)"
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pw"
    initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pw" -E UTF8 --locale=C \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$pw"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    {
        echo "listen_addresses = '*'"
        echo "unix_socket_directories = '/tmp'"
    } >> "$PGDATA/postgresql.conf"
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    if [[ "$POSTGRES_DB" != postgres ]]; then
        psql -X -q -h /tmp -U "$POSTGRES_USER" -d postgres -v ON_ERROR_STOP=1 \
            -c "CREATE DATABASE \"$POSTGRES_DB\""
    fi
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    echo "postgres-entrypoint: initialised $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)"
fi
exec postgres -D "$PGDATA"
