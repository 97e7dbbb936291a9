# The builder image: spade-base (debootstrap'd Debian 12) + build dependencies + the host's Rust
# toolchain + what scripts/setup makes (venv, wasm-bindgen-cli), with libtorch copied from the
# host's cache. scripts/docker-test stages its context (target/docker/builder/):
#   rust/      the host's rustup toolchain (bin, lib, libexec, etc; no docs)
#   cache/     libtorch/ and nvidia/ from the host's $SPADE_CACHE (no 540 MB download again)
#   setup/     scripts/setup and scripts/requirements.txt
#   ca/        the machine's own CA certificates (/usr/local/share/ca-certificates/*.crt):
#              PyPI and crates.io are reached through a TLS-inspecting proxy here
# Docker Hub is not reachable from our machines and rustup cannot download a toolchain, hence
# the local base and the copied toolchain.
ARG BASE=spade-base:bookworm
FROM ${BASE}
# rustc-web and lld-22 (the wasm32 route of scripts/build-site) come from bookworm-security.
RUN echo 'deb http://deb.debian.org/debian-security bookworm-security main' \
        > /etc/apt/sources.list.d/security.list \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ca-certificates gcc g++ libc6-dev make pkg-config unzip \
        python3 python3-venv python3-pip python3-dev \
        rustc-web cargo-web rust-web-src rust-web-llvm lld-22 \
    && rm -rf /var/lib/apt/lists/*
COPY rust /opt/rust
COPY cache /opt/spade-cache
# Absolute paths (they override .cargo/config.toml's relative ones): the binaries' rpaths and the
# runner's baked site-packages then point at /opt/spade-cache, where the runtime images put them.
ENV CARGO_HOME=/usr/local/cargo \
    PATH=/opt/rust/bin:/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    SPADE_CACHE=/opt/spade-cache \
    LIBTORCH=/opt/spade-cache/libtorch \
    PYO3_PYTHON=/opt/spade-cache/venv/bin/python3 \
    SPADE_PYTHON=/usr/bin/python3 \
    SPADE_SKIP="browser postgres ray"
COPY ca /usr/local/share/ca-certificates/
RUN update-ca-certificates >/dev/null
COPY setup /opt/setup/scripts
# The venv and wasm-bindgen-cli (scripts/setup; libtorch is already there), then cargo-chef.
RUN /opt/setup/scripts/setup \
    && cargo install -q cargo-chef --locked --root /usr/local/cargo \
    && rm -rf /usr/local/cargo/registry /root/.cache/pip
WORKDIR /src
