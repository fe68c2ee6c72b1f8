# The Leasehold image: one static-ish binary (linked only to libc) that plays every role
# (`leasehold serve`, `leasehold agent`, `leasehold sim`, `leasehold demo`). The dashboard's
# templates and assets, the SQL migrations and the Swagger UI are compiled into it, so the
# runtime image holds nothing else.
#
#   docker build -t leasehold:0.1.0 .
#
# Not built in CI: the project's machines have no container engine (docs/getting-started.md).

# --- build ------------------------------------------------------------------------------
# sqlx 0.9 needs Rust 1.94 (Cargo.toml: rust-version).
FROM rust:1.94-bookworm AS build
WORKDIR /src
# Dependencies first, so a source change does not rebuild them: a stub crate with the real
# manifest and lock file.
COPY Cargo.toml Cargo.lock ./
COPY crates/kube-sim/Cargo.toml crates/kube-sim/
RUN mkdir -p src benches crates/kube-sim/src crates/kube-sim/benches \
 && echo 'fn main() {}' > src/main.rs && touch src/lib.rs crates/kube-sim/src/lib.rs \
 && echo 'fn main() {}' > crates/kube-sim/benches/sim_load.rs \
 && for b in $(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | tail -n +3); do echo 'fn main() {}' > "benches/$b.rs"; done \
 && cargo build --release --locked --bin leasehold || true
COPY . .
# Make sure cargo sees the real sources as newer than the stub build.
RUN touch src/main.rs src/lib.rs crates/kube-sim/src/lib.rs \
 && cargo build --release --locked --bin leasehold \
 && install -D -m 0755 target/release/leasehold /out/leasehold

# --- run --------------------------------------------------------------------------------
# glibc, CA certificates, tzdata, no shell, no package manager; user 65532 ("nonroot").
# Command hooks (`leasehold agent --on-acquire`) run through `sh -c`, which this image lacks:
# members use `--hook-url`, or build the agent on an image with a shell.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/leasehold /usr/local/bin/leasehold
USER 65532:65532
# The allocator (mimalloc) returns freed pages at once (deploy/base/deployment.yaml says why).
ENV MIMALLOC_PURGE_DELAY=0
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/leasehold"]
CMD ["serve", "--config", "/etc/leasehold/leasehold.yaml"]
