# Pontoon: everyday commands. `make test` and `make run` do all set-up themselves.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
TESTBED := tests/testbed
KUBECONFIG_TESTBED := $(CURDIR)/.testbed/kubeconfig

.PHONY: deps testbed testbed-up testbed-down testbed-clean test lint fmt run bench-runtime

deps: ## install missing tools (Debian packages, rustup target)
	@scripts/deps.sh

testbed: deps ## build the test bed's binaries (cached per pin set)
	@$(TESTBED)/build.sh

testbed-up: deps ## start etcd, kube-apiserver, controllers, kwok; write .testbed/kubeconfig
	@$(TESTBED)/up.sh

testbed-down: ## stop the test bed's processes (data is kept)
	@$(TESTBED)/down.sh

testbed-clean: testbed-down ## wipe the test bed's data (binaries are kept)
	rm -rf .testbed/etcd .testbed/pki .testbed/logs .testbed/run .testbed/pods .testbed/exec-shim .testbed/kubeconfig

test: deps ## unit + integration tests on the test bed (started and stopped as needed)
	@scripts/test.sh

lint: ## formatting and clippy, warnings are errors
	cargo fmt --all --check
	cargo clippy --workspace --all-targets --locked -- -D warnings

fmt:
	cargo fmt --all

run: testbed-up ## the test bed, ready for kubectl
	@echo; echo "The test bed is up. Use it with:"; \
	echo "  export KUBECONFIG=$(KUBECONFIG_TESTBED)"; \
	echo "  $(CURDIR)/.testbed/bin/kubectl get nodes"; \
	echo "Stop it with: make testbed-down"

bench-runtime: deps ## figures for the plugin runtime: compile, instantiate, host call
	cargo run --release --locked -p pontoon --example bench_runtime
