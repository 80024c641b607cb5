#!/usr/bin/env bash
# The examples as a user builds them: `cmake --install` into a temporary prefix, then, from
# directories outside the source tree holding a copy of examples/ only,
#  1. with pkg-config and the compiler: the threads-only examples link with exactly
#     `pkg-config --cflags --libs replicator` (no MPI flag on the line; the shared library
#     carries its dependencies), and one links statically with replicator-static.pc;
#  2. with CMake's find_package(replicator): all of them, on the shared library and on the
#     static one (COMPONENTS static);
# and runs each build, checking what it prints: the regression recovers the true weights on 4
# identical replicas, the MLP classifies held-out points, the hand-written collectives match a
# serial computation, async training under mpirun -np 3 --ps 1 fits its weights, the
# model-parallel toy matches the same model trained on one replica, the job of roles (a learner
# and 2 actors exchanging messages; also under mpirun -np 3) fits its line, the mesh's two-stage
# pipeline on the model axis of 2 replicas and the pipeline of differentiable send/recv match one
# device (these three in f32 and in bf16), and the model on rp_trainer reaches 90% in sync and
# async with a checkpoint and 3 epoch lines, and in bf16 (--precision bf16; its evaluation set to
# f32 through the policy API), as the MLP reaches 95% in bf16.
# Also: the README's code sample is, verbatim, the marked core of examples/mlp.c, and every example
# builds with the README's `cc` line as written there.
# Usage: examples.sh BUILD_DIR SOURCE_DIR   (env: CC, RP_EXAMPLE_FLAGS for sanitizer builds)
set -euo pipefail
build=$(realpath "$1")
src=$(realpath "$2")
cc=${CC:-cc}
flags=(${RP_EXAMPLE_FLAGS:-})
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# The README's sample: the lines between the markers in README.md and in examples/mlp.c.
between() { awk -v m="$2" 'index($0, m) { on = !on; next } on' "$1"; }
readme=$(between "$src/README.md" '<!-- examples/mlp.c -->' | sed '/^```/d')
core=$(between "$src/examples/mlp.c" '/* [readme] */')
[ -n "$readme" ] || fail "README.md has no sample marked <!-- examples/mlp.c -->"
[ "$readme" = "$core" ] || { diff <(echo "$readme") <(echo "$core") || true; fail "README's sample differs from examples/mlp.c"; }
echo "ok: the README's sample is examples/mlp.c's core"

prefix=$dir/prefix
cmake --install "$build" --prefix "$prefix" > /dev/null
cp -r "$src/examples" "$dir/src"
cd "$dir"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
libdir=$(pkg-config --variable=libdir replicator)
examples=$(cd src && ls *.c | sed 's/\.c$//')

mpi=""
if readelf -d "$libdir/libreplicator.so" | grep -q 'NEEDED.*libmpi'; then
    command -v mpirun > /dev/null || fail "the library is built with MPI but mpirun is not installed"
    mpi=(mpirun --oversubscribe -x OMP_WAIT_POLICY -x ASAN_OPTIONS)
    [ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
fi

# run_all DIR: runs every example built in DIR and checks its output.
run_all() {
    local d=$1 out
    out=$("$d/linear_regression") || fail "$d/linear_regression: $out"
    echo "$out" | grep -q '^replicas 4 .* identical: yes$' || fail "$d/linear_regression: $out"
    out=$("$d/mlp" --replicas 4) || fail "$d/mlp: $out"
    echo "$out" | grep -q '^replicas 4  test accuracy 0\.9[5-9]' || fail "$d/mlp: $out"
    out=$("$d/collectives") || fail "$d/collectives: $out"
    echo "$out" | grep -q '^replicas 4: every result matches' || fail "$d/collectives: $out"
    out=$("$d/async_mpi") || fail "$d/async_mpi: $out"
    echo "$out" | grep -q '^backend threads, 2 replicas, 1 server(s): 600 batches' || fail "$d/async_mpi: $out"
    if [ -n "${mpi:-}" ]; then
        out=$("${mpi[@]}" -np 3 "$d/async_mpi" --ps 1 2>&1) || fail "mpirun -np 3 $d/async_mpi --ps 1: $out"
        echo "$out" | grep -q '^backend mpi, 2 replicas, 1 server(s): 600 batches' || fail "mpirun $d/async_mpi: $out"
    fi
    # The model-parallel examples match one device in either precision (in bf16 the device too
    # runs in bf16: against an f32 device they differ by about 6e-4, past their 1e-5).
    local prec
    for prec in f32 bf16; do
        out=$("$d/model_parallel" --precision $prec) || fail "$d/model_parallel --precision $prec: $out"
        echo "$out" | grep -q 'the parameters match one replica' || fail "$d/model_parallel --precision $prec: $out"
    done
    out=$("$d/roles") || fail "$d/roles: $out"
    echo "$out" | grep -q '^learner and 2 actors: after 300 rounds y = 3\.0' || fail "$d/roles: $out"
    if [ -n "${mpi:-}" ]; then
        out=$("${mpi[@]}" -np 3 "$d/roles" 2>&1) || fail "mpirun -np 3 $d/roles: $out"
        echo "$out" | grep -q '^learner and 2 actors: after 300 rounds' || fail "mpirun $d/roles: $out"
    fi
    for prec in f32 bf16; do
        out=$("$d/mesh_pipeline" --precision $prec) || fail "$d/mesh_pipeline --precision $prec: $out"
        echo "$out" | grep -q "^2 replicas x 2 stages: .* every worker's layer matches one device's" \
            || fail "$d/mesh_pipeline --precision $prec: $out"
        out=$("$d/diff_sendrecv" --precision $prec) || fail "$d/diff_sendrecv --precision $prec: $out"
        echo "$out" | grep -q "^2 stages, rp_tensor_send/recv: .* the parameters match one device's" \
            || fail "$d/diff_sendrecv --precision $prec: $out"
    done
    local regime runs
    runs=$(mktemp -d)
    for regime in sync async; do
        out=$("$d/trainer_model" --out "$runs/$regime" --regime $regime 2>/dev/null) \
            || fail "$d/trainer_model --regime $regime: $out"
        echo "$out" | grep -q '^trainer: 36 steps on 2 replicas, test accuracy 9[0-9]\.' \
            || fail "$d/trainer_model --regime $regime: $out"
        [ -f "$runs/$regime/checkpoint.safetensors" ] && [ "$(grep -c '"train_loss"' "$runs/$regime/metrics.jsonl")" -eq 3 ] \
            || fail "$d/trainer_model --regime $regime: no checkpoint, or not 3 epoch lines"
    done
    # Mixed precision from the command line; the evaluation sets f32 through the policy API.
    out=$("$d/trainer_model" --out "$runs/bf16" --precision bf16 2>/dev/null) \
        || fail "$d/trainer_model --precision bf16: $out"
    echo "$out" | grep -q '^trainer: 36 steps on 2 replicas, test accuracy 9[0-9]\..*trained in bf16, evaluated in f32$' \
        || fail "$d/trainer_model --precision bf16: $out"
    out=$("$d/mlp" --precision bf16) || fail "$d/mlp --precision bf16: $out"
    echo "$out" | grep -q '^replicas 2  test accuracy 0\.9[5-9]' || fail "$d/mlp --precision bf16: $out"
    rm -rf "$runs"
    echo "ok: $d: $(echo "$examples" | tr '\n' ' ')ran and checked out (and in bf16)"
}

# 1. pkg-config. A threads-only program's line names no MPI library or directory.
line=$(pkg-config --cflags --libs replicator)
case "$line" in *mpi*) fail "pkg-config --libs replicator names MPI: $line" ;; esac
echo "ok: pkg-config --cflags --libs replicator: $line"
mkdir pc
for e in $examples; do
    # shellcheck disable=SC2086
    "$cc" -std=c11 -Wall -Wextra -Werror -O2 "${flags[@]}" "src/$e.c" -o "pc/$e" $line \
        -Wl,-rpath,"$libdir" -lm || fail "$e does not build with pkg-config"
done
# shellcheck disable=SC2046
"$cc" -std=c11 -O2 "${flags[@]}" src/linear_regression.c -o pc/linear_regression_static \
    $(pkg-config --cflags --libs replicator-static) -lm || fail "the static line is incomplete"
readelf -d pc/linear_regression_static | grep -q 'NEEDED.*libreplicator' && fail "linked the shared library"
out=$(pc/linear_regression_static) || fail "the static build: $out"
echo "$out" | grep -q 'identical: yes$' || fail "the static build: $out"
echo "ok: pkg-config --libs replicator-static: $(pkg-config --libs replicator-static)"
run_all pc

# 1b. The README's own line ("Building against it"), as written there, for every example: only the
# source and the output change (and the compiler and sanitizer flags of this build, when set).
readme_line=$(grep -E '^cc .*examples/mlp\.c -o mlp ' "$src/README.md" | sed 's/ *#.*//')
[ -n "$readme_line" ] || fail "README.md has no 'cc ... examples/mlp.c -o mlp ...' line"
cc() { command "$cc" "${flags[@]}" "$@"; } # the line's `cc`: this build's compiler and flags
mkdir readme
for e in $examples; do
    line=${readme_line//examples\/mlp.c/src\/$e.c}
    line=${line//-o mlp/-o readme\/$e}
    eval "$line" || fail "$e does not build with the README's line: $readme_line"
done
unset -f cc
out=$(LD_LIBRARY_PATH=$libdir readme/mlp --replicas 2) || fail "the README's mlp: $out"
echo "$out" | grep -q '^replicas 2  test accuracy 0\.9[5-9]' || fail "the README's mlp: $out"
echo "ok: every example builds with the README's line: $readme_line"

# 2. CMake's find_package, shared and static.
for kind in shared static; do
    static=OFF
    [ $kind = static ] && static=ON
    cmake -S src -B "cmake-$kind" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
        -DCMAKE_C_FLAGS="${flags[*]}" -DCMAKE_BUILD_TYPE=Release -DEXAMPLES_STATIC=$static > /dev/null ||
        fail "find_package(replicator) ($kind) does not configure"
    cmake --build "cmake-$kind" -j2 > cmake-$kind.log 2>&1 || { cat cmake-$kind.log; fail "the $kind examples do not build"; }
    if [ $kind = static ]; then
        readelf -d cmake-static/mlp | grep -q 'NEEDED.*libreplicator' && fail "the static build linked the shared library"
    fi
    run_all "cmake-$kind"
done
echo "PASS"
