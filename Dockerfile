# SPADE Studio images, built by scripts/docker-test (which makes the two local images first:
# Docker Hub is not reachable from our machines, so nothing here is pulled):
#   spade-base:bookworm     Debian 12 from debootstrap + docker import
#   spade-builder:<key>     base + build deps + the host's Rust toolchain, libtorch, the venv,
#                           wasm-bindgen-cli and cargo-chef (docker/builder.Dockerfile)
# Targets:
#   docker build --build-arg BUILDER=spade-builder:<key> --target server -t spade-server .
#       spade-server + the site; no libtorch, no CPython (API and dashboard only)
#   ... --target worker -t spade-worker .   spade CLI + sandbox runner + libtorch + venv
#   ... --target studio -t spade-studio .   worker + spade-server: the server whose local
#                                           executor starts `spade worker` in its container
#                                           (compose.yaml runs this one)
# Legacy builder (no BuildKit here): every stage before the target is built, so build the
# targets in this order and the later ones are all cache hits.
ARG BUILDER=spade-builder:latest
ARG BASE=spade-base:bookworm

# ---------------------------------------------------------------- dependencies (cargo-chef)
FROM ${BUILDER} AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM ${BUILDER} AS build
# recipe.json changes only with a manifest or Cargo.lock, so a source change reuses this layer:
# every dependency compiled for the native release build and for the wasm bundle. The
# skeleton's dummy workspace crates are built too (cheap); the real sources are touched below
# so that cargo rebuilds them.
COPY --from=planner /src/recipe.json recipe.json
RUN cargo chef cook --no-build --recipe-path recipe.json \
    && cargo build --release -p spade-server -p spade-cli -p spade-sandbox-runner \
    && PATH="/usr/bin:$PATH" RUSTC_BOOTSTRAP=1 RUSTFLAGS="" \
       cargo build --lib -p spade-frontend --target wasm32-unknown-unknown \
       --profile wasm-release -Zbuild-std=std,panic_abort --target-dir target/wasm
# ---------------------------------------------------------------- sources
COPY . .
RUN find app frontend backend crates tests -name '*.rs' -exec touch {} + \
    && scripts/build-site --release \
    && cargo build --release -p spade-server -p spade-cli -p spade-sandbox-runner

# ---------------------------------------------------------------- runtime images
FROM ${BASE} AS runtime
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/*

FROM runtime AS server
COPY --from=build /src/target/release/spade-server /usr/local/bin/
COPY --from=build /src/site /srv/spade/site
WORKDIR /srv/spade
# The generated JWT secret lives in SPADE_DATA_DIR: mount a volume there to keep sessions
# across restarts (or set SPADE_JWT_SECRET). Without the local executor's binaries this image
# is for serving only: run it with SPADE_EXECUTOR=ray, or use spade-studio.
ENV SPADE_ADDR=0.0.0.0:3000 SPADE_SITE_ROOT=/srv/spade/site SPADE_DATA_DIR=/var/lib/spade \
    SPADE_JOBS_DIR=/var/lib/spade/jobs
EXPOSE 3000
ENTRYPOINT ["spade-server"]

FROM runtime AS worker
# Debian's CPython 3.11 (the venv's base; the sandbox runner embeds its libpython).
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        libpython3.11 python3.11 \
    && rm -rf /var/lib/apt/lists/*
# Binaries carry rpaths into /opt/spade-cache (libtorch, the nvidia stubs libtorch_cpu links,
# the venv's site-packages); warm starts are cached in /opt/spade-cache/warmstart (a volume).
COPY --from=build /opt/spade-cache/libtorch /opt/spade-cache/libtorch
COPY --from=build /opt/spade-cache/nvidia /opt/spade-cache/nvidia
COPY --from=build /opt/spade-cache/venv /opt/spade-cache/venv
COPY --from=build /src/target/release/spade /src/target/release/spade-sandbox-runner /usr/local/bin/
COPY envs /srv/spade/envs
COPY configs /srv/spade/configs
COPY corpus /srv/spade/corpus
WORKDIR /srv/spade
ENV SPADE_CACHE=/opt/spade-cache SPADE_SEEDS=/srv/spade/envs/seed OMP_NUM_THREADS=1
ENTRYPOINT ["spade"]

FROM worker AS studio
COPY --from=build /src/target/release/spade-server /usr/local/bin/
COPY --from=build /src/site /srv/spade/site
# Jobs run as local `spade worker` processes in this container and report to the server over
# loopback. Data (JWT secret, jobs, uploaded models/corpora/pools) under /var/lib/spade.
ENV SPADE_ADDR=0.0.0.0:3000 SPADE_SITE_ROOT=/srv/spade/site SPADE_DATA_DIR=/var/lib/spade \
    SPADE_JOBS_DIR=/var/lib/spade/jobs SPADE_PUBLIC_URL=http://127.0.0.1:3000 \
    SPADE_MODEL_ROOTS=/var/lib/spade/models \
    SPADE_CORPUS_ROOTS=/var/lib/spade/corpora:/srv/spade/corpus \
    SPADE_POOL_ROOTS=/var/lib/spade/pools:/srv/spade/envs
EXPOSE 3000
ENTRYPOINT ["spade-server"]
