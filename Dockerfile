# syntax=docker/dockerfile:1
#
# tollgate in a container.
#
#   docker build -t tollgate .
#   docker run --rm -p 8080:8080 \
#     -v ./config/tollgate.toml:/etc/tollgate/tollgate.toml:ro \
#     -e OPENAI_API_KEY -e ANTHROPIC_API_KEY \
#     tollgate
#
# The mounted config must listen on all interfaces inside the container:
#   [server]
#   listen = "0.0.0.0:8080"
# and point at the price table shipped in the image (or mount your own):
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
    && useradd --system --no-create-home --shell /usr/sbin/nologin tollgate

COPY --from=build /usr/local/bin/tollgate /usr/local/bin/tollgate
WORKDIR /etc/tollgate
COPY config/prices.toml /etc/tollgate/config/prices.toml

USER tollgate
EXPOSE 8080
ENTRYPOINT ["tollgate"]
CMD ["serve", "--config", "/etc/tollgate/tollgate.toml"]
