#!/usr/bin/env bash
# The model registry (cli/registry.c): a model that is one folder and one registry line
# (models/clusters/clusters.c, the README's MLP) trains through `replicator train clusters`
# with its own option table: it learns (test accuracy over 95%), a run resumes from its
# directory by its saved configuration (the registry finds the model) and goes on for more
# epochs, a saved option is refused on --resume by name, a bad value is named, and --help lists
# its options and the runtime's. The other models stay reachable by name (sngan, d4pg --help).
# Usage: cli_models.sh path/to/replicator
set -euo pipefail
bin=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

out=$("$bin" train clusters --out "$dir/c" --epochs 2 --replicas 2 --threads-per-replica 1 --quiet) \
    || fail "train clusters: $out"
grep -Eq "^clusters: test accuracy (9[5-9]|100)\.[0-9]+% after 64 steps on 2 replicas" <<< "$out" \
    || fail "train clusters did not learn: $out"
[ -f "$dir/c/checkpoint.safetensors" ] || fail "no checkpoint"
out=$("$bin" train --resume "$dir/c" --epochs 3 --quiet) || fail "resume: $out"
grep -q "after 96 steps" <<< "$out" || fail "the resumed run did not go on to epoch 3: $out"
rc=0; msg=$("$bin" train --resume "$dir/c" --hidden 8 2>&1) || rc=$?
[ $rc -eq 2 ] && grep -q -- "--hidden cannot be changed when resuming" <<< "$msg" \
    || fail "--hidden on resume: rc $rc: $msg"
rc=0; msg=$("$bin" train clusters --epochs 0 2>&1) || rc=$?
[ $rc -eq 2 ] && grep -q -- "--epochs 0: expected an integer in \[1, 1000\]" <<< "$msg" \
    || fail "--epochs 0: rc $rc: $msg"
help=$("$bin" train clusters --help)
for o in --epochs --hidden --init-seed --replicas --regime --precision; do
    grep -q -- "  $o " <<< "$help" || fail "--help lacks $o: $help"
done
# (Captured first: grep -q on a pipe exits at its match, and with pipefail the writer's SIGPIPE
# would fail a help text longer than one stdio buffer.)
out=$("$bin" train sngan --help) && grep -q -- "--ch-g" <<< "$out" || fail "train sngan --help"
out=$("$bin" train d4pg --help) && grep -q -- "--env-steps" <<< "$out" || fail "train d4pg --help"
echo "ok: cli_models"
