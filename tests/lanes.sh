#!/usr/bin/env bash
# The test binaries, built once and run side by side in lanes against the one control
# plane (tests/run.sh calls it; KUBECONFIG is set). Each binary's output goes to
# target/test-logs/run-<binary>.log; a line per binary says how it went, and the output
# of each failing binary is printed at the end.
#
# Why lanes are safe: the suites on the shared cluster each work in their own namespaces
# (`<prefix>-<pid>`), Rule objects under their own `--rule-selector`, leases in their own
# namespaces, and ports the kernel gives. What is not namespaced decides the phases:
#  1. `alone`, one after another, with only the no-cluster binaries beside them: origin
#     swaps the myapps CRD for one without a status subresource; production installs
#     deploy/ cluster-wide (a webhook on every Rule, admission policies); operator checks
#     that no ClusterRole of ruleop's appears.
#  2. three lanes: the suites that start control planes of their own or load the machine
#     (`heavy_a`, `heavy_b`, about equal in time), and every other suite in the third.
# RULEOP_TEST_LANES=1 runs every binary one after another instead (as `cargo test` does).
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
threads="${RULEOP_TEST_THREADS:-4}"
logs="$repo/target/test-logs"
mkdir -p "$logs"

offline="lib main cli formats layout kstatus monitoring ruletest refs dockerfile conversion chart docs lsp editors"
alone="origin production operator"
heavy_a="rollout churn_rules helm identity guard budget"
heavy_b="churn faults leadership image security requests"

# name=path of each test executable, as cargo lists them.
declare -A exe=()
listing="$(cargo test --no-run --lib --bins --tests 2>&1)" || { echo "$listing" >&2; exit 101; }
while read -r name path; do
  exe[$name]="$path"
done < <(echo "$listing" | sed -n \
  -e 's#^ *Executable unittests src/\(lib\|main\)\.rs (\(.*\))$#\1 \2#p' \
  -e 's#^ *Executable tests/\(.*\)\.rs (\(.*\))$#\1 \2#p')

# Every binary cargo built and no list names runs in the third lane.
named=" $offline $alone $heavy_a $heavy_b "
rest=""
for n in $(printf '%s\n' "${!exe[@]}" | sort); do
  case "$named" in *" $n "*) ;; *) rest="$rest $n" ;; esac
done

failed_file="$(mktemp)"
trap 'rm -f "$failed_file"' EXIT

# Runs the binaries named, one after another; a line each.
lane() {
  local label="$1" n start rc
  shift
  for n in "$@"; do
    [ -n "${exe[$n]:-}" ] || continue
    start=$SECONDS
    "${exe[$n]}" --test-threads "$threads" >"$logs/run-$n.log" 2>&1
    rc=$?
    if [ "$rc" = 0 ]; then
      printf '[%s] %-16s ok      %4ss\n' "$label" "$n" "$((SECONDS - start))"
    else
      printf '[%s] %-16s FAILED  %4ss (target/test-logs/run-%s.log)\n' "$label" "$n" "$((SECONDS - start))" "$n"
      echo "$n" >>"$failed_file"
    fi
  done
}

start=$SECONDS
if [ "${RULEOP_TEST_LANES:-3}" = 1 ]; then
  # shellcheck disable=SC2086
  lane seq $offline $alone $heavy_a $heavy_b $rest
else
  # shellcheck disable=SC2086
  { lane alone $alone & lane unit $offline & wait; }
  # shellcheck disable=SC2086
  { lane heavy-a $heavy_a & lane heavy-b $heavy_b & lane shared $rest & wait; }
fi
echo "tests: $((SECONDS - start))s"

if [ -s "$failed_file" ]; then
  while read -r n; do
    echo
    echo "==================== $n (target/test-logs/run-$n.log) ===================="
    # The failures section of libtest's output, or the whole log when there is none.
    if grep -q '^failures:' "$logs/run-$n.log"; then
      sed -n '/^failures:/,$p' "$logs/run-$n.log"
    else
      cat "$logs/run-$n.log"
    fi
  done <"$failed_file"
  echo
  echo "tests failed: $(tr '\n' ' ' <"$failed_file")"
  exit 101
fi
