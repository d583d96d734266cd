# pgcorral's container image: docs/deploy.md.
#
#   docker build -t pgcorral:dev .
#   docker run --rm -p 6432:6432 -p 4000:4000 -p 9187:9187 \
#     -v "$PWD/pgcorral.toml:/etc/pgcorral/pgcorral.toml:ro" pgcorral:dev
#
# Needs BuildKit (Docker 23 and later use it by default) for the cache mounts below.

ARG RUST_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

# ---- builder ------------------------------------------------------------------------------
FROM ${RUST_IMAGE} AS builder
# pg_query builds libpg_query with the C compiler (gcc is in the rust image) and generates its
# bindings with bindgen, which needs libclang.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libclang-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The registry and target directory live in BuildKit cache mounts: a rebuild after a source
# change recompiles pgcorral's crates, not its dependencies. The binary is copied out of the
# cache mount, which the next stage cannot see.
RUN --mount=type=cache,id=pgcorral-cargo-registry,target=/usr/local/cargo/registry \
    --mount=type=cache,id=pgcorral-target,target=/src/target \
    cargo build --release --locked -p pgcorral --bin pgcorral \
 && install -D -m 0755 target/release/pgcorral /out/pgcorral

# ---- runtime ------------------------------------------------------------------------------
# glibc (not musl): pgcorral uses io_uring and glibc's malloc_trim.
FROM ${RUNTIME_IMAGE}
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="pgcorral" \
      org.opencontainers.image.description="A multi-threaded PostgreSQL connection pooler" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && groupadd --system --gid 10001 pgcorral \
 && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin pgcorral \
 && mkdir -p /etc/pgcorral
COPY --from=builder /out/pgcorral /usr/local/bin/pgcorral
USER 10001:10001
# 6432: PostgreSQL clients (listen_port); 4000: tenant API and /healthz (api_listen);
# 9187: Prometheus /metrics (metrics_addr).
EXPOSE 6432 4000 9187
# SIGTERM: stop accepting, then exit once the clients have left (docs/operations.md#signals).
# Give `docker stop` a --time long enough for that, or send SIGINT for a drain bounded by
# shutdown_timeout.
STOPSIGNAL SIGTERM
ENTRYPOINT ["pgcorral"]
CMD ["--config", "/etc/pgcorral/pgcorral.toml"]
