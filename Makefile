# ruleop: the two commands of the README are `make run` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: run test cluster cluster-down lint build check-rules

## run: local control plane up, CRDs installed, the operator in the foreground with the
## shipped rules, and the examples applied.
run:
	tests/quickstart.sh

## test: builds (or reuses) the control plane, starts it if needed, runs every test,
## and stops what it started.
test:
	tests/run.sh

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
