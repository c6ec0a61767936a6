# Pontoon: everyday commands. `make test` and `make run` do all set-up themselves.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
TESTBED := tests/testbed
KUBECONFIG_TESTBED := $(CURDIR)/.testbed/kubeconfig

.PHONY: deps testbed testbed-up testbed-down testbed-clean test lint fmt run new-provider providers image-context crds chaos bench-runtime bench-mounts bench-gateway bench-bridges gateway-conformance conformance

deps: ## install missing tools (Debian packages, rustup target)
	@scripts/deps.sh

testbed: deps ## build the test bed's binaries (cached per pin set)
	@$(TESTBED)/build.sh

testbed-up: deps ## start etcd, kube-apiserver, controllers, kwok; write .testbed/kubeconfig
	@$(TESTBED)/up.sh

testbed-down: ## stop the test bed's processes (data is kept)
	@$(TESTBED)/down.sh

testbed-clean: testbed-down ## wipe the test bed's data (binaries are kept)
	rm -rf .testbed/etcd .testbed/pki .testbed/logs .testbed/run .testbed/pods .testbed/process-pods .testbed/exec-shim .testbed/kubeconfig

test: deps ## unit + integration tests on the test bed (started and stopped as needed)
	@scripts/test.sh

lint: ## formatting and clippy, warnings are errors (the workspace, and dataplane/, a workspace of its own)
	cargo fmt --all --check
	cargo fmt --manifest-path dataplane/Cargo.toml --all --check
	cargo clippy --workspace --all-targets --locked -- -D warnings
	cargo clippy --manifest-path dataplane/Cargo.toml --all-targets --locked -- -D warnings

fmt:
	cargo fmt --all
	cargo fmt --manifest-path dataplane/Cargo.toml --all

run: deps ## test bed + CRDs + providers + operator, a sample mount to ACTIVE; Ctrl-C stops the operator
	@scripts/run.sh

new-provider: ## a provider crate of your own from providers/template: make new-provider NAME=my-provider DIR=../my-provider
	@scripts/new-provider.sh "$(NAME)" "$(DIR)"

providers: deps ## build the bundled provider modules into dist/providers/
	@scripts/providers.sh dist/providers

image-context: deps ## assemble target/image-context/: what the Containerfile copies (release binary, bundled modules)
	@scripts/image-context.sh target/image-context

crds: ## write the CRDs (`pontoon crds`) into the chart
	cargo run --quiet --locked -p pontoon -- crds --set gefyra --out-dir charts/pontoon/crds

chaos: testbed-up ## the operator SIGKILLed at 40 kill points over every phase of mounts' lives, then checked to converge and restore exactly (POINTS=40, SEED=<printed seed> to replay)
	PONTOON_CHAOS_POINTS=$(or $(POINTS),40) PONTOON_CHAOS_SEED=$(SEED) KUBECONFIG=$(KUBECONFIG_TESTBED) \
		cargo test --locked -p pontoon --test chaos -- --nocapture

bench-runtime: deps ## figures for the plugin runtime: compile, instantiate, host call
	cargo run --release --locked -p pontoon --example bench_runtime

bench-bridges: deps ## figures for judging a mount's bridges: the most a mount renders, of the largest shape, first look and after
	cargo run --release --locked -p pontoon --example bench_bridges

bench-mounts: testbed-up ## figures for bridge mounts: create -> ACTIVE, delete -> restored, 50 at once, RSS, CPU
	@scripts/providers.sh dist/providers
	cargo build --release --locked -p pontoon
	cargo run --release --locked -p pontoon --example bench_mounts

bench-bridge: testbed-up ## figures for `pontoon bridge`: start -> first request here, added latency, 64 MiB each way, relay and command RSS, kill -> shadow (as root)
	@scripts/providers.sh dist/providers
	cargo build --release --locked -p pontoon
	cargo run --release --locked -p pontoon --example bench_bridge

bench-gateway: testbed-up ## figures for Gateway API: 1000 routes' config via WASM vs native, Gateway -> Programmed, route -> ConfigMap, RSS; pontoon-dataplane vs stock praxis (req/s, p50/p99)
	@scripts/providers.sh dist/providers
	cargo build --release --locked -p pontoon
	cargo run --release --locked -p pontoon --example bench_config
	cargo run --release --locked -p pontoon --example bench_gateway
	@# Pontoon's data plane built as scripts/praxis.sh builds stock praxis (release, opt-level 1).
	CARGO_PROFILE_RELEASE_OPT_LEVEL=1 cargo build --release --locked --manifest-path dataplane/Cargo.toml --target-dir $${CARGO_TARGET_DIR:-target}
	BENCH_DATAPLANE_BIN=$${CARGO_TARGET_DIR:-target}/release/pontoon-dataplane \
		cargo run --release --locked -p pontoon --example bench_dataplane

gateway-conformance: deps ## the official Gateway API conformance suite (GATEWAY-HTTP, GATEWAY-GRPC, GATEWAY-TLS, GATEWAY-TCP) against Pontoon on the test bed; report in .testbed/conformance-report.yaml, filed in docs/conformance/ when it passes on a committed tree
	@scripts/gateway-conformance.sh --publish

# The Gateway API suite's old name, kept for one release: "conformance" alone
# is easily taken for `pontoon conformance`, the provider contract check.
conformance: ## deprecated: use gateway-conformance
	@echo "make conformance is deprecated and will be removed: use make gateway-conformance (the Gateway API suite; pontoon conformance checks providers)" >&2
	@$(MAKE) --no-print-directory gateway-conformance
