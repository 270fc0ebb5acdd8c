# syntax=docker/dockerfile:1
# The Trainforge operator image.
#
#   docker build -t trainforge:dev .
#
# Stage 1 builds `trainforge` in release with the builtin plugins (built for
# wasm32-wasip2 by host/build.rs and embedded) and precompiles them for its
# wasmtime configuration (`trainforge plugin precompile`); stage 2 is distroless with
# glibc, running as the non-root user 65532. The builder is bookworm so the
# binary's glibc matches distroless' debian12.

FROM rust:1.95-bookworm AS builder
WORKDIR /src
# The toolchain pinned by rust-toolchain.toml (1.95.0 + wasm32-wasip2).
COPY rust-toolchain.toml ./
RUN rustup toolchain install && rustup target add wasm32-wasip2
COPY . .
# A builtin plugin that fails to build fails the image build (host/build.rs).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p trainforge --bin trainforge \
 && cp target/release/trainforge /trainforge \
 && /trainforge plugin precompile --out /trainforge-artifacts

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /trainforge /trainforge
# The builtin plugins compiled for this binary: a fresh operator loads them
# instead of compiling at start (a node whose CPU lacks features the builder
# had compiles them itself, as without these files).
COPY --from=builder /trainforge-artifacts /trainforge-artifacts
USER 65532:65532
# Metrics, health probes (see manifests/operator/deployment.yaml).
EXPOSE 8080 8081
ENTRYPOINT ["/trainforge"]
CMD ["operator"]
