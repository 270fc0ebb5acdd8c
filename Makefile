# Trainforge developer entry points. CI runs `.ci/run`, which runs `make test`.
#
#   make controlplane  build the test control plane (Go; cached by version,
#                      a no-op when up to date, tens of minutes when cold)
#   make test          all tests; control-plane tests are required here
#   make demo          full control plane + our CRDs + the operator; runs an
#                      example TrainJob to Complete, then stays up until
#                      Ctrl-C (DEMO_ARGS="--exit-after 0 --figures" ...)

CARGO ?= cargo
DEMO_ARGS ?=

.PHONY: test controlplane demo

controlplane:
	testenv/build.sh

# Control-plane tests and builtin plugin builds are required: a missing
# binary or a plugin that does not build fails the run instead of skipping.
test: controlplane
	TRAINFORGE_TESTENV_REQUIRED=1 TRAINFORGE_REQUIRE_BUILTIN_PLUGINS=1 $(CARGO) test --workspace --no-fail-fast

demo: controlplane
	$(CARGO) build -p trainforge
	$(CARGO) run -p trainforge-testenv --bin trainforge-demo -- $(DEMO_ARGS)
