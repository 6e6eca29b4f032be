# syntax=docker/dockerfile:1
# The Baton image: `baton` built in release mode, run as an unprivileged user on Debian slim.
#
#   docker build -t baton:0.1.0 .
#
# By default it serves on 0.0.0.0:8080 with auth required (a non-loopback listener always
# needs it), in the embedded tier with its SQLite database under /var/lib/baton. The Helm
# chart (helm/baton) runs it in the team tier instead. docs/deploy.md has the details;
# services/server/tests/deploy/ checks that this file stays consistent.

# Builder and runtime share one Debian release, so the binary finds the glibc it was built with.
# Pin the base images by digest for reproducible builds, e.g.
#   --build-arg RUNTIME_DIGEST=@sha256:<digest of debian:bookworm-slim>
# (and BUILDER_DIGEST likewise); empty, the tags alone are used.
ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm
ARG BUILDER_DIGEST=
ARG RUNTIME_DIGEST=
# The image's version and source revision, for its OCI labels
# (--build-arg BATON_REVISION=$(git rev-parse HEAD)).
ARG BATON_VERSION=0.1.0
ARG BATON_REVISION=unknown

FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE}${BUILDER_DIGEST} AS build
WORKDIR /src
COPY . .
# The target directory is a build cache, so the binary is copied out of it in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin baton \
    && install -D -m 0755 target/release/baton /out/baton

FROM debian:${DEBIAN_RELEASE}-slim${RUNTIME_DIGEST} AS runtime
ARG BATON_VERSION
ARG BATON_REVISION
LABEL org.opencontainers.image.title="baton" \
      org.opencontainers.image.description="Durable control plane for AI agent runs" \
      org.opencontainers.image.version="${BATON_VERSION}" \
      org.opencontainers.image.revision="${BATON_REVISION}" \
      org.opencontainers.image.base.name="debian:${DEBIAN_RELEASE}-slim"
# bubblewrap runs workspace commands (util-linux's prlimit, which sets their limits, is in
# the base image); python3 serves agents' `python` tools.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates bubblewrap python3 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 baton \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/baton \
       --no-create-home --shell /usr/sbin/nologin baton \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/baton
COPY --from=build /out/baton /usr/local/bin/baton
WORKDIR /var/lib/baton
ENV BATON_HTTP__LISTEN=0.0.0.0:8080 \
    BATON_AUTH__REQUIRED=true \
    BATON_DATA_DIR=/var/lib/baton \
    BATON_LOG__FORMAT=json
USER 10001:10001
EXPOSE 8080
# For plain Docker; Kubernetes ignores this and uses the chart's probes (/livez, /readyz).
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s \
    CMD ["/bin/bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080 && printf 'GET /livez HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
ENTRYPOINT ["/usr/local/bin/baton"]
CMD ["serve"]
