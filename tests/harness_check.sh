#!/usr/bin/env bash
# The runner's own check (docs/testing.md): a case that hangs is killed at its timeout and named,
# and the other cases of its program still run and pass.
#  1. tests/harness_hang.c's cases, as the build listed them (--list, tests/cmake/list_cases.cmake),
#     are registered by tests/cmake/cases.cmake - the code that registers the suite's - with a
#     3 s timeout, in a CTest run of their own: harness_hang.hangs must time out, by that name,
#     within bounded time, and harness_hang.passes_before and .passes_after must pass;
#  2. the runner itself: --list prints the cases, --case runs one (a passing case exits 0 and says
#     which case it ran) or says it skipped one RP_TEST_SKIP names, an unknown case and bad
#     arguments exit 2 naming what was wrong, and a table with two cases of one name is refused
#     by name.
# Usage: harness_check.sh HARNESS_HANG LIST CASES_CMAKE [CTEST]
set -euo pipefail
prog=$(realpath "$1") list=$(realpath "$2") cases=$(realpath "$3") ctest=${4:-ctest}
fail() { echo "FAIL: $*"; exit 1; }

dir=$(mktemp -d /tmp/rp_harness_check_XXXXXX)
trap 'rm -rf "$dir"' EXIT

# 1. The hang, in a CTest run of its own.
cat > "$dir/CTestTestfile.cmake" <<CT
include([==[$cases]==])
rp_cases(harness_hang [==[$list]==] 3 "")
CT
start=$(date +%s)
set +e
(cd "$dir" && "$ctest" -j2 --output-on-failure) > "$dir/out.txt" 2>&1
rc=$?
set -e
took=$(( $(date +%s) - start ))
cat "$dir/out.txt"
[ "$rc" -ne 0 ] || fail "ctest passed with a case that never returns"
grep -Eq 'harness_hang\.hangs \.*\*\*\*Timeout' "$dir/out.txt" ||
  fail "the hanging case is not reported as harness_hang.hangs timing out"
grep -Eq 'harness_hang\.passes_before \.*   Passed' "$dir/out.txt" ||
  fail "harness_hang.passes_before did not pass beside the hang"
grep -Eq 'harness_hang\.passes_after \.*   Passed' "$dir/out.txt" ||
  fail "harness_hang.passes_after did not pass beside the hang"
grep -Eq '67% tests passed, 1 tests failed out of 3' "$dir/out.txt" ||
  fail "expected exactly 3 cases, 1 failed"
# The timeout is 3 s; the whole run, started in parallel, well within 30 s.
[ "$took" -lt 30 ] || fail "the run took ${took} s: the hang was not cut off at its 3 s timeout"

# 2. The runner's arguments.
[ "$("$prog" --list | tr '\n' ' ')" = "test_passes_before test_hangs test_passes_after " ] ||
  fail "--list: $("$prog" --list | tr '\n' ' ')"
out=$("$prog" --case test_passes_after 2>&1) || fail "--case test_passes_after failed: $out"
grep -q '\[       OK \] test_passes_after' <<< "$out" || fail "--case did not run the case: $out"
grep -q 'test_passes_before' <<< "$out" && fail "--case ran another case too: $out"
out=$(RP_TEST_SKIP='*_after' "$prog" --case test_passes_after 2>&1) ||
  fail "--case of a case RP_TEST_SKIP names failed: $out"
grep -q '\[  SKIPPED \] test_passes_after' <<< "$out" ||
  fail "--case ran a case RP_TEST_SKIP names, or did not say it skipped it: $out"
set +e
out=$("$prog" --case test_nonesuch 2>&1); rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q 'no case named test_nonesuch' <<< "$out" ||
  fail "an unknown case: exit $rc, $out"
set +e
out=$("$prog" --bogus 2>&1); rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q 'usage:' <<< "$out" || fail "a bad argument: exit $rc, $out"
set +e
out=$(HARNESS_HANG_TABLE=duplicate "$prog" --list 2>&1); rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q 'two cases are named test_passes_before' <<< "$out" ||
  fail "two cases of one name: exit $rc, $out"
echo "harness_check: ok (the hang named and cut off in ${took} s; the other cases passed)"
