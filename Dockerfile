# syntax=docker/dockerfile:1
#
# tollgate in a container.
#
#   docker build -t tollgate .
#   docker run --rm -p 8080:8080 \
#     -v tollgate-books:/var/lib/tollgate \
#     -e OPENAI_API_KEY -e ANTHROPIC_API_KEY \
#     tollgate
#
# The image's /etc/tollgate/tollgate.toml is the shipped config/tollgate.toml
# listening on all interfaces and keeping the SQLite store's books in
# /var/lib/tollgate/tollgate.db, on the volume, which outlives the
# container. A config mounted over it should do the same:
#   [server]
#   listen = "0.0.0.0:8080"
#   [store]
#   sqlite_path = "/var/lib/tollgate/tollgate.db"
# and may use the price table shipped in the image:
#   [prices]
#   file = "config/prices.toml"        # /etc/tollgate/config/prices.toml

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
COPY config/tollgate.toml /etc/tollgate/tollgate.toml
RUN sed -i \
        -e 's|^listen = .*|listen = "0.0.0.0:8080"|' \
        -e 's|^sqlite_path = .*|sqlite_path = "/var/lib/tollgate/tollgate.db"|' \
        /etc/tollgate/tollgate.toml \
    && grep -q '^listen = "0.0.0.0:8080"$' /etc/tollgate/tollgate.toml \
    && grep -q '^sqlite_path = "/var/lib/tollgate/tollgate.db"$' /etc/tollgate/tollgate.toml
# The SQLite store's file (and its -wal, -shm and .lock files beside it).
VOLUME /var/lib/tollgate

USER tollgate
EXPOSE 8080
ENTRYPOINT ["tollgate"]
CMD ["serve", "--config", "/etc/tollgate/tollgate.toml"]
