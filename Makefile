# ruleop: the two commands of the README are `make run` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: run test test-unit test-long fuzz bench bench-lsp bench-scale profile cluster cluster-down lint build check-rules docs release

FUZZ_SECONDS ?= 180
N ?= 1000
STEADY ?= 60
SCALE ?= 1000,3000,10000
K8S_COMPAT ?= v1.34.4

## run: local control plane up, CRDs installed, the operator in the foreground with the
## shipped rules, and the examples applied.
run:
	tests/quickstart.sh

## test: builds (or reuses) the control plane, starts it if needed, runs every test,
## and stops what it started.
test:
	tests/run.sh

## test-unit: the tests that need no cluster: unit tests, the command line, typed references, formats, the
## layout, GitOps health and the monitoring package (build the kstatus and promtool tools once).
test-unit:
	$(CARGO) test --lib --bins --test cli --test refs --test formats --test layout --test kstatus --test ruletest --test monitoring --test docs --test lsp --test editors

cluster:
	tests/cluster/up.sh

cluster-down:
	tests/cluster/down.sh

build:
	$(CARGO) build --release

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

check-rules:
	$(CARGO) run --quiet -- check --rules rules/

## docs: the manual (docs/) built as a site in target/book/ with mdBook (installed once into
## the cache); `tests/docs.rs` checks its YAML examples and links.
docs:
	docs/build.sh

## release: the release artifacts of Cargo.toml's version in target/dist/<version>/: the binary,
## the image (an OCI archive), the packaged chart, the SBOM (CycloneDX), the release notes and
## SHA256SUMS (see docs/operating/install.md).
release:
	release/build.sh

## test-long: the fault tests at full size (1000 resources through the outage, 2 minutes of steady state)
## the churn test at full size (2000 steps, a minute of quiet after), and the conversion latency of 1,000-object lists;
## then every suite again on an older Kubernetes (K8S_COMPAT, built once from modules: docs/operating/releases.md).
test-long:
	RULEOP_FAULT_N=1000 RULEOP_CONVERSION_N=1000 RULEOP_STEADY_SECONDS=120 RULEOP_CHURN_STEPS=2000 RULEOP_CHURN_QUIET_SECONDS=60 tests/run.sh
	tests/compat.sh $(K8S_COMPAT)

## fuzz: each cargo-fuzz target for FUZZ_SECONDS (needs the nightly toolchain and cargo-fuzz). New inputs go to
## fuzz/work/ (ignored); the committed seed corpus in fuzz/corpus/ stays small.
fuzz:
	command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	cd fuzz && for t in rules_loader render convert_review rule_review; do \
	  mkdir -p work/$$t && $(CARGO) +nightly fuzz run $$t work/$$t corpus/$$t -- -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 || exit 1; \
	done

## bench: ruleop against the floor, controller-runtime, kopf and kro (N WebSites), then the scale
## runs (SCALE=1000,3000,10000; SCALE= skips them; see BENCHMARKS.md).
bench:
	tests/cluster/build.sh
	bench/build-peers.sh
	$(CARGO) build --release --quiet
	RULEOP_BENCH_N=$(N) RULEOP_BENCH_STEADY_SECONDS=$(STEADY) $(CARGO) bench --bench waves
	$(CARGO) bench --bench pipeline
	$(CARGO) bench --bench lsp
	if [ -n "$(SCALE)" ]; then RULEOP_BENCH_SCALE=$(SCALE) RULEOP_BENCH_STEADY_SECONDS=30 $(CARGO) bench --bench waves; fi

## bench-lsp: the language server's latency after a change and its memory (release build).
bench-lsp:
	$(CARGO) build --release --quiet
	$(CARGO) bench --bench lsp

## bench-scale: only the scale runs (SCALE=1000,3000,10000 by default; see BENCHMARKS.md).
bench-scale:
	tests/cluster/build.sh
	bench/build-peers.sh
	$(CARGO) build --release --quiet
	RULEOP_BENCH_SCALE=$(SCALE) RULEOP_BENCH_STEADY_SECONDS=30 $(CARGO) bench --bench waves

## profile: one create wave of ruleop (N WebSites) with a pprof CPU profile of the API server
## and a perf profile of ruleop; writes target/bench/profiles/{ruleop.svg,apiserver-top.txt}.
## Needs `perf` (Debian: linux-perf); inferno (flame graphs) is installed from crates.io.
profile:
	tests/cluster/build.sh
	$(CARGO) build --release --quiet
	command -v inferno-flamegraph >/dev/null || $(CARGO) install inferno --locked
	RULEOP_BENCH_N=$(N) RULEOP_BENCH_STEADY_SECONDS=0 RULEOP_BENCH_ROUNDS=1 RULEOP_BENCH_PROFILE=10 \
	  RULEOP_BENCH_SYSTEMS=ruleop $(CARGO) bench --bench waves
	cd target/bench/profiles && perf script -i ruleop.perf.data 2>/dev/null | inferno-collapse-perf > ruleop.folded \
	  && inferno-flamegraph < ruleop.folded > ruleop.svg \
	  && go tool pprof -top -cum -nodecount=60 ruleop-apiserver.pprof > apiserver-top.txt 2>/dev/null
	@echo "profile: target/bench/profiles/ruleop.svg, target/bench/profiles/apiserver-top.txt"
