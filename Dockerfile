# The Leasehold image: one binary, linked only to glibc, that plays every role (`leasehold
# serve`, `leasehold agent`, `leasehold sim`, `leasehold demo`). The dashboard's templates and
# assets, the SQL migrations and the Swagger UI are compiled into it, so the runtime image holds
# nothing else.
#
#   docker build -t leasehold:0.1.0 .
#
# The same image as `scripts/image.sh` builds without a container engine (CI builds that one):
# the build stage runs its `rootfs` step, and the final stage declares the same user,
# entrypoint, labels, env and port — `scripts/image.sh check` compares them with the image it
# built, so change both together.

# --- build ------------------------------------------------------------------------------
# sqlx 0.9 needs Rust 1.94 (Cargo.toml: rust-version). Debian bookworm: the glibc and CA
# certificates the runtime files are taken from.
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
# Make sure cargo sees the real sources as newer than the stub build. Then the image's files:
# the binary (debug line tables stripped) at /leasehold, the loader and libraries it links,
# the CA bundle, copyright files, passwd/group naming 65532, /tmp (scripts/image.sh says why).
RUN touch src/main.rs src/lib.rs crates/kube-sim/src/lib.rs \
 && cargo build --release --locked --bin leasehold \
 && scripts/image.sh rootfs /out/rootfs target/release/leasehold

# --- run --------------------------------------------------------------------------------
# Nothing but those files: no shell, no package manager. Command hooks (`leasehold agent
# --on-acquire`) run through `sh -c`, which this image lacks: members use `--hook-url`, or
# build the agent on an image with a shell.
FROM scratch
COPY --from=build /out/rootfs/ /
USER 65532:65532
# The allocator (mimalloc) returns freed pages at once and commits memory as it is used
# (deploy/base/deployment.yaml says why).
ENV MIMALLOC_PURGE_DELAY=0 MIMALLOC_EAGER_COMMIT=0 MIMALLOC_ARENA_EAGER_COMMIT=0
EXPOSE 8080
LABEL org.opencontainers.image.source="https://github.com/leasehold/leasehold" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.title="leasehold"
ENTRYPOINT ["/leasehold"]
CMD ["serve", "--config", "/etc/leasehold/leasehold.yaml"]
