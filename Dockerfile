# Multi-stage build of the operator: a static-enough binary on a distroless, non-root base.
FROM rust:1.95-bookworm AS build
WORKDIR /src
# The manifest names the bench targets, so cargo needs their files to read it.
COPY Cargo.toml Cargo.lock build.rs ./
COPY src ./src
COPY benches ./benches
COPY schemas/kubernetes.json ./schemas/kubernetes.json
# The commit `ruleop --version` names (no .git in the context): --build-arg RULEOP_COMMIT=...
ARG RULEOP_COMMIT=unknown
ENV RULEOP_COMMIT=$RULEOP_COMMIT
RUN cargo build --release --locked --bin ruleop

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/ruleop /usr/local/bin/ruleop
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/ruleop"]
CMD ["run", "--rules=/etc/ruleop/rules", "--admin-addr=0.0.0.0:8080"]
