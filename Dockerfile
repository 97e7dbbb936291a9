# Multi-stage build following scripts/setup step for step (Docker cannot run on our dev
# machines, so this file is kept short and in step with the script by review).
#   docker build --target server -t spade-server .   # no libtorch, no CPython
#   docker build --target worker -t spade-worker .   # spade CLI + sandbox runner + libtorch

FROM rust:1.95-bookworm AS build
RUN echo 'deb http://deb.debian.org/debian-security bookworm-security main' \
        > /etc/apt/sources.list.d/security.list \
    && apt-get update && apt-get install -y --no-install-recommends python3-pip python3-venv
WORKDIR /src
COPY . .
# Same script as a developer machine; no browser or database inside the image build.
ENV SPADE_CACHE=/opt/spade-cache SPADE_SKIP="browser postgres" SPADE_PYTHON=/usr/bin/python3
RUN scripts/setup \
    && scripts/build-site --release \
    && cargo build --release -p spade-server -p spade-cli -p spade-sandbox-runner

FROM debian:bookworm-slim AS server
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/spade-server /usr/local/bin/
COPY --from=build /src/site /srv/spade/site
WORKDIR /srv/spade
# The generated JWT secret lives in SPADE_DATA_DIR: mount a volume there to keep sessions across
# restarts (or set SPADE_JWT_SECRET).
ENV SPADE_ADDR=0.0.0.0:3000 SPADE_SITE_ROOT=/srv/spade/site SPADE_DATA_DIR=/var/lib/spade
EXPOSE 3000
ENTRYPOINT ["spade-server"]

FROM debian:bookworm-slim AS worker
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates libpython3.11 \
    && rm -rf /var/lib/apt/lists/*
# Binaries carry rpaths into /opt/spade-cache (libtorch, nvidia stubs, the venv's Python).
COPY --from=build /opt/spade-cache/libtorch /opt/spade-cache/libtorch
COPY --from=build /opt/spade-cache/nvidia /opt/spade-cache/nvidia
COPY --from=build /opt/spade-cache/venv /opt/spade-cache/venv
COPY --from=build /src/target/release/spade /src/target/release/spade-sandbox-runner /usr/local/bin/
ENTRYPOINT ["spade"]
