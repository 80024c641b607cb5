#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang; the library and targets under AddressSanitizer
# and UndefinedBehaviorSanitizer) in build-fuzz/ and runs each for a bounded time from its seeds.
# Exits non-zero on any finding: a crash, a sanitizer report, a leak, a broken check of the
# target's (FUZZ_EXPECT), an input slower than 10 s or one needing over 2 GiB. docs/fuzzing.md
# says what each target checks and how to turn a finding into a regression test.
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   SECONDS per target (default 45); TARGETs of
#                                                idx cifar checkpoint config image tar list
#                                                (default all)
#        scripts/fuzz.sh --seeds                 rewrites fuzz/corpus/ from the seed generator
#
# Each target runs over three corpus directories: build-fuzz/corpus/T (where new inputs go, kept
# between runs), fuzz/corpus/T (the committed seeds and past findings) and the generator's
# fresh output. Findings are saved as build-fuzz/findings/T/crash-* (or leak-, timeout-, oom-).
set -euo pipefail
cd "$(dirname "$0")/.."

build=build-fuzz
all_targets=(idx cifar checkpoint config image tar list)
jobs=$(nproc)

configure_and_build() {
  CC=${FUZZ_CC:-clang} cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRP_FUZZ=ON -DRP_CUDA=OFF \
    -DRP_BUILD_TESTS=OFF -DRP_BUILD_SHARED=OFF >/dev/null
  local names=(fuzz_make_seeds)
  for t in "${all_targets[@]}"; do names+=("fuzz_$t"); done
  cmake --build "$build" -j"$jobs" --target "${names[@]}"
  rm -rf "$build/seeds"
  # The generator is built with the sanitizers too; its own leaks would be ours.
  "$build/fuzz/fuzz_make_seeds" "$build/seeds"
}

if [ "${1:-}" = "--seeds" ]; then
  configure_and_build
  for t in "${all_targets[@]}"; do
    mkdir -p "fuzz/corpus/$t"
    cp "$build/seeds/$t"/* "fuzz/corpus/$t/"
  done
  echo "fuzz: fuzz/corpus/ rewritten from the generator (past findings kept)"
  exit 0
fi

seconds=${1:-45}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")

configure_and_build

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
printf '%-11s %10s %9s %6s %6s %14s  %s\n' target seconds execs cov ft corpus result
for t in "${targets[@]}"; do
  bin="$build/fuzz/fuzz_$t"
  [ -x "$bin" ] || { echo "fuzz: no target $t (one of: ${all_targets[*]})" >&2; exit 2; }
  corpus="$build/corpus/$t" findings="$build/findings/$t" log="$build/fuzz_$t.log"
  mkdir -p "$corpus" "$findings" "fuzz/corpus/$t"
  dict=()
  [ -f "fuzz/dict/$t.dict" ] && dict=(-dict="fuzz/dict/$t.dict")
  result=ok
  if ! "$bin" "${dict[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$findings/" \
      "$corpus" "fuzz/corpus/$t" "$build/seeds/$t" >"$log" 2>&1; then
    result="FINDING (see $log)"
    failed+=("$t")
  fi
  # libFuzzer's last status line ("#N DONE cov: C ft: F corp: K/SIZE ...") and final stats.
  last=$(grep -a -E '^#[0-9]+' "$log" | tail -n 1 || true)
  execs=$(grep -a -o -E 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -o -E '[0-9]+$' || true)
  cov=$(sed -n -E 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
  ft=$(sed -n -E 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
  corp=$(sed -n -E 's/.* corp: ([0-9]+\/[0-9]+[a-zA-Z]*).*/\1/p' <<<"$last")
  printf '%-11s %10s %9s %6s %6s %14s  %s\n' "$t" "$seconds" "${execs:--}" "${cov:--}" \
    "${ft:--}" "${corp:--}" "$result"
done

if [ ${#failed[@]} -gt 0 ]; then
  for t in "${failed[@]}"; do
    echo "== fuzz_$t: the report"
    grep -a -E -A 30 'ERROR|broken promise|runtime error|SUMMARY' "$build/fuzz_$t.log" | head -n 60 || true
    echo "== inputs saved: $(ls "$build/findings/$t" | tr '\n' ' ')"
  done
  echo "fuzz: findings in ${failed[*]}: reproduce with $build/fuzz/fuzz_T FILE; make each a regression test (docs/fuzzing.md)" >&2
  exit 1
fi
echo "fuzz: no findings"
