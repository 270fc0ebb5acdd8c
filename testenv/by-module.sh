#!/usr/bin/env bash
# Run a test binary one module at a time, each module in a process of its
# own, as if each were a binary of its own (its statics — the control plane
# and operator a module starts — are its alone), while the binary is built
# and linked once:
#
#   testenv/by-module.sh TEST [MODULE...]
#
# Builds `cargo test --workspace --test TEST --no-run` (the workspace's
# features, so nothing `cargo test --workspace` built is built again), lists
# its tests, and
# runs the tests of each module (the first `::` segment of their names; only
# the MODULEs given, if any) with `--exact`, in the package's directory as
# `cargo test` would. Every module runs even after a failure; the last line
# counts them all (`N passed, M failed`) and the exit code is 1 if any
# failed. CARGO and the libtest flags in TEST_ARGS (e.g. --nocapture) are
# passed on.
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: $0 TEST [MODULE...]" >&2; exit 2; }
TEST=$1
shift
CARGO=${CARGO:-cargo}
read -r -a EXTRA <<<"${TEST_ARGS:-}"

# The executable and its package directory, from cargo's JSON messages.
read -r EXE DIR < <("$CARGO" test --locked --workspace --test "$TEST" --no-run --message-format=json |
  python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1] \
            and "test" in m["target"]["kind"]:
        print(m["executable"], os.path.dirname(m["manifest_path"]))
' "$TEST")
[[ -n ${EXE:-} ]] || { echo "by-module: no test executable named $TEST" >&2; exit 1; }

# Test names by module, in the order libtest lists them.
mapfile -t NAMES < <(cd "$DIR" && "$EXE" --list --format terse | sed -n 's/: test$//p')
[[ ${#NAMES[@]} -gt 0 ]] || { echo "by-module: $TEST lists no tests" >&2; exit 1; }
mapfile -t MODULES < <(printf '%s\n' "${NAMES[@]}" | sed 's/::.*//' | awk '!seen[$0]++')
if [[ $# -gt 0 ]]; then MODULES=("$@"); fi
# BY_MODULE_FIRST: modules (of those listed) to start first, in its order,
# the rest after them in list order: with several at a time, the longest
# first end together instead of one running alone at the end.
if [[ -n ${BY_MODULE_FIRST:-} ]]; then
  read -r -a first <<<"$BY_MODULE_FIRST"
  ordered=()
  for m in "${first[@]}"; do
    if printf '%s\n' "${MODULES[@]}" | grep -qx -- "$m"; then ordered+=("$m"); fi
  done
  for m in "${MODULES[@]}"; do
    if ! printf '%s\n' "${ordered[@]}" | grep -qx -- "$m"; then ordered+=("$m"); fi
  done
  MODULES=("${ordered[@]}")
fi

# One module: its tests in a process of its own, output to $OUT/<module>.
OUT=$(mktemp -d "${TMPDIR:-/tmp}/by-module.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
run_module() {
  local module=$1 start rc=0
  local -a tests
  mapfile -t tests < <(printf '%s\n' "${NAMES[@]}" | grep "^$module::" || true)
  start=$(date +%s)
  {
    if [[ ${#tests[@]} -eq 0 ]]; then
      echo "by-module: $TEST has no module $module"
      rc=1
    else
      echo "     Running $TEST, module $module (${#tests[@]} tests)"
      (cd "$DIR" && "$EXE" --exact "${tests[@]}" "${EXTRA[@]}") 2>&1 || rc=$?
    fi
    echo "     $TEST, module $module: $(($(date +%s) - start))s, exit $rc"
  } >"$OUT/$module.log"
  echo "$rc" >"$OUT/$module.rc"
}

# BY_MODULE_JOBS modules at a time (default 1: one after the other, as
# separate test binaries ran); each module's output is printed when it ends.
JOBS=${BY_MODULE_JOBS:-1}
declare -A printed=()
print_done() {
  local m
  for m in "${MODULES[@]}"; do
    if [[ -f $OUT/$m.rc && -z ${printed[$m]:-} ]]; then
      cat "$OUT/$m.log"
      printed[$m]=1
    fi
  done
}
for module in "${MODULES[@]}"; do
  while (($(jobs -rp | wc -l) >= JOBS)); do
    wait -n || true
    print_done
  done
  run_module "$module" &
done
wait || true
print_done

passed=0 failed=0 ignored=0 failed_modules=()
for module in "${MODULES[@]}"; do
  p=0 f=0 i=0
  # libtest: "test result: ok. 3 passed; 0 failed; 1 ignored; ..."
  read -r p f i < <(sed -n 's/^test result: [a-zA-Z]*\. \([0-9]*\) passed; \([0-9]*\) failed; \([0-9]*\) ignored.*/\1 \2 \3/p' "$OUT/$module.log" | tail -1) || true
  passed=$((passed + ${p:-0})) failed=$((failed + ${f:-0})) ignored=$((ignored + ${i:-0}))
  if [[ "$(cat "$OUT/$module.rc")" != 0 ]]; then failed_modules+=("$module"); fi
done
if [[ ${#failed_modules[@]} -gt 0 ]]; then
  echo "by-module: failed modules of $TEST: ${failed_modules[*]}"
fi
echo "$TEST: $passed passed, $failed failed, $ignored skipped"
[[ ${#failed_modules[@]} -eq 0 ]]
