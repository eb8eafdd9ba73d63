# syntax=docker/dockerfile:1
#
# tollgate in a container.
#
#   docker build -t tollgate .
#   docker run --rm -p 8080:8080 \
#     -v ./config/tollgate.toml:/etc/tollgate/tollgate.toml:ro \
#     -v tollgate-books:/var/lib/tollgate \
#     -e OPENAI_API_KEY -e ANTHROPIC_API_KEY \
#     tollgate
#
# The mounted config must listen on all interfaces inside the container:
#   [server]
#   listen = "0.0.0.0:8080"
# point at the price table shipped in the image (or mount your own):
#   [prices]
#   file = "config/prices.toml"        # /etc/tollgate/config/prices.toml
# and keep the SQLite store's books on the volume, which outlives the
# container:
#   [store]
#   sqlite_path = "/var/lib/tollgate/tollgate.db"

# === build ===
FROM rust:1-slim-bookworm AS build
WORKDIR /src

# Cache mounts keep the crate registry and compiled dependencies between
# builds, so a source change recompiles only tollgate itself; the binary is
# copied out of the cached target dir within the same step.
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin tollgate \
    && cp target/release/tollgate /usr/local/bin/tollgate

# === run ===
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --no-create-home --shell /usr/sbin/nologin tollgate \
    && mkdir -p /var/lib/tollgate \
    && chown tollgate:tollgate /var/lib/tollgate

COPY --from=build /usr/local/bin/tollgate /usr/local/bin/tollgate
WORKDIR /etc/tollgate
COPY config/prices.toml /etc/tollgate/config/prices.toml
# The SQLite store's file (and its -wal, -shm and .lock files beside it).
VOLUME /var/lib/tollgate

USER tollgate
EXPOSE 8080
ENTRYPOINT ["tollgate"]
CMD ["serve", "--config", "/etc/tollgate/tollgate.toml"]
