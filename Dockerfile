# The payments example (examples/payments.rs) as a container image.
#
#   docker build -t ruststream-payments .
#   docker run --rm -e NATS_URL=nats://nats:4222 ruststream-payments
#
# Two stages: the build (the workspace's toolchain, rust-version 1.95) and a slim runtime with
# the binary only, run as an unprivileged user. See docs/deployment.md.

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
# --locked: exactly the versions in Cargo.lock. The `production` profile (Cargo.toml) is
# `release` optimised at link time across crates: fewer instructions a message.
RUN cargo build --profile production --locked --example payments \
    && cp target/production/examples/payments /payments

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --no-create-home ruststream
COPY --from=build /payments /usr/local/bin/payments
USER ruststream
# The servers, comma-separated (the generated main's `run` reads NATS_URL; `--url` overrides it).
ENV NATS_URL=nats://nats:4222
# SIGTERM (docker stop, a Kubernetes rollout) drains: no new messages, handlers in flight
# finish and settle. Give it longer than the drain timeout (30 s): docker stop -t 35.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/payments"]
CMD ["run"]
