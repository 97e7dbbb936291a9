# PostgreSQL 15 from Debian's package on the local base image (Docker Hub's postgres image
# cannot be pulled here). compose.yaml builds and runs it; the cluster lives in a volume at
# $PGDATA and is made on first start with POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB.
ARG BASE=spade-base:bookworm
FROM ${BASE}
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data && chown postgres:postgres /var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
USER postgres
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["postgres-entrypoint"]
