#!/usr/bin/env bash
# Mistakes refused up front with what is wrong, before anything trains or fills memory (issue 26,
# a robustness campaign's findings):
#  1. a corrupt checkpoint on the documented resume lines (train --resume DIR --iters N for an
#     SN-GAN, --env-steps N for D4PG) is reported as the checkpoint's fault, not as an unknown
#     option.
# Usage: cli_refusals.sh path/to/replicator
set -euo pipefail
bin=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$dir"
fail() { echo "FAIL: $*"; exit 1; }
expect_error() { # expect_error RC PATTERN command...: exit code RC and PATTERN in its output
    local want=$1 pattern=$2 msg rc
    shift 2
    set +e
    msg=$("$@" 2>&1); rc=$?
    set -e
    [ $rc -eq "$want" ] && grep -q -- "$pattern" <<< "$msg" || fail "$* gave rc $rc: $msg"
    ! grep -q -- "unknown option" <<< "$msg" || fail "$* blamed an option: $msg"
}

# 1. A checkpoint cut short (any of the campaign's corruptions fails the same way: at load).
mkdir bad
printf 'EFGHIJKL{"__metadata__":' > bad/checkpoint.safetensors
for line in "train --resume bad --iters 8" "train --resume bad --env-steps 4000" \
    "train sngan --resume bad --iters 8" "train d4pg --resume bad --env-steps 4000" \
    "train --resume bad --epochs 3"; do
    # shellcheck disable=SC2086 # the line's words are the arguments
    expect_error 1 "bad/checkpoint.safetensors" "$bin" $line
done
echo "ok: a corrupt checkpoint on every resume line is reported as the checkpoint's fault"
