#!/usr/bin/env bash
# The GPU check of issue 28: one script, run once on a machine with one NVIDIA H100 or H200, in
# about 8 minutes, writing its log to $OUT/gpu-check.log (OUT defaults to ./gpu-check-out).
#
#  1. builds the library, the command, the CUDA kernel test and bench_d4pg with this machine's
#     CUDA toolkit (-DRP_CUDA=ON: a build without the CUDA table fails here);
#  2. runs test_kernels_cuda: every slot of the cuda table against the reference table on the
#     same inputs (a skip counts as a failure: a GPU must be here);
#  3. ResNet-20, one training step (no augmentation) on the cuda, cpu and ref tables: cuda's
#     checkpoint within twice the cpu table's own distance from the reference's (at least 1e-4;
#     f32), and the same with --precision bf16 (at least 2e-2);
#  4. 2 replicas (2 threads, 2 streams, one GPU, cross-replica batch norm) against the CPU's 2
#     replicas, and 2 replicas against 1 replica on the same global batch, as on the CPU (bounds:
#     twice the CPU's 2-against-1 difference, at least 1e-4);
#  5. 300 ResNet-20 steps on the GPU: the loss falls (last logged loss below 0.7x the first) and
#     ends within 0.15 of the same run on the CPU;
#  6. an SN-GAN run (2 iterations, small widths) on the cuda, cpu and ref tables: cuda's distance
#     from ref within twice cpu's (at least 1e-3); a D4PG job (learner on the GPU, actors on CPU threads) trains 50 learner steps and
#     saves a finite checkpoint;
#  7. timings beside the PyTorch on the same machine: ResNet-50 training at batch 256 (ours bf16
#     and f32 against PyTorch eager, channels-last and NCHW, f32 and bf16 autocast, its best) and
#     the D4PG learner step (bench_d4pg against bench/d4pg_torch.py --device cuda), with the
#     peak device memory PyTorch reports;
#  8. the tape, runtime, io and model tests again on the cuda table (CTest's cuda_<name>).
# Each step prints PASS or FAIL and the script goes on; the summary at the end lists them, and the
# exit status is 1 if any failed.
#
# UNVERIFIED: written and checked (bash -n; every command it calls builds and runs without a
# GPU, where the CUDA steps report that no device is present) on a machine without a GPU. None
# of the CUDA code has run on a GPU yet. Assumed of the GPU machine: the project's Debian
# packages (scripts/setup.sh's list: it has no network to install them), the CUDA toolkit at
# /usr/local/cuda or on PATH (or a pip-wheel toolkit beside PyTorch), and python3 with PyTorch
# (CUDA) for step 7. Fashion-MNIST is used if present ($RP_GPU_DATA, /usr/share/datasets/
# fashion-mnist, or gpu-data/fashion-mnist carried from here); otherwise ResNet-20 uses the
# synthetic dataset (the loss-falls bound of step 5 is then a guess) and the SN-GAN step fails.
# One command may run 600 s at most on the device: if the whole script does not fit, run it in
# two parts with GPU_CHECK_ONLY (the build is kept between calls on a warm machine).
#
# Usage: OUT=/some/dir scripts/gpu-check.sh [--skip-build]
#        (GPU_CHECK_ONLY=REGEX runs only the steps whose names match, e.g. to rerun one;
#        GPU_BUILD=DIR builds there instead of build-gpu/)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
OUT=${OUT:-$root/gpu-check-out}
mkdir -p "$OUT"
log=$OUT/gpu-check.log
: > "$log"
exec > >(tee -a "$log") 2>&1
build=${GPU_BUILD:-$root/build-gpu}
bin=$build/replicator
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=passive
results=()
t_start=$(date +%s)

# step NAME CMD...: runs CMD, records PASS/FAIL with its time.
step() {
    local name=$1 t0 r
    shift
    if [ -n "${GPU_CHECK_ONLY:-}" ] && ! echo "$name" | grep -Eq "$GPU_CHECK_ONLY"; then
        results+=("SKIP  $name")
        return 0
    fi
    echo
    echo "== $name  (at $(( $(date +%s) - t_start )) s)"
    t0=$(date +%s)
    if "$@"; then r=PASS; else r=FAIL; fi
    echo "== $name: $r ($(( $(date +%s) - t0 )) s)"
    results+=("$r  $name")
}

# run TABLE NAME ARGS...: the command on kernel table TABLE, output in $work/NAME.log.
run() {
    local table=$1 name=$2
    shift 2
    echo "\$ RP_KERNELS=$table replicator $*"
    if ! RP_KERNELS=$table "$bin" "$@" > "$work/$name.log" 2>&1; then
        tail -20 "$work/$name.log"
        return 1
    fi
    grep -iE "kernels|device|error|warn" "$work/$name.log" | head -5 || true
}

compare() { python3 "$root/scripts/st_compare.py" "$@"; }

# Fashion-MNIST: $RP_GPU_DATA, Debian's copy, or a copy carried in gpu-data/fashion-mnist (an
# ignored folder: `cp -r /usr/share/datasets/fashion-mnist gpu-data/` here, then name gpu-data
# in the run's carry list; 30 MB).
data_args=()
gan_data=()
for data in "${RP_GPU_DATA:-}" /usr/share/datasets/fashion-mnist "$root/gpu-data/fashion-mnist"; do
    if [ -n "$data" ] && [ -e "$data/train-images-idx3-ubyte.gz" ]; then
        data_args=(--data "$data")
        gan_data=(--data "$data")
        break
    fi
done
if [ ${#data_args[@]} -eq 0 ]; then
    echo "note: no Fashion-MNIST found: the ResNet-20 runs use --dataset synthetic, and the" \
        "SN-GAN step (which has no synthetic data) fails"
    data_args=(--dataset synthetic)
fi

machine() {
    date -u
    nvidia-smi || echo "(no nvidia-smi)"
    nvcc --version | tail -2 || echo "(no nvcc on PATH)"
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available() and torch.cuda.get_device_name())' ||
        echo "(no PyTorch with CUDA)"
    nproc
    git -C "$root" log --oneline -1 || true
}

do_build() {
    local cuda=()
    # nvcc on PATH or in /usr/local/cuda; else a pip-wheel toolkit beside PyTorch's (nvidia/cu13).
    if ! command -v nvcc > /dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
        local nv
        nv=$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null)
        nv=$(find "${nv:-/nonexistent}/nvidia" -path '*/bin/nvcc' 2>/dev/null | head -1)
        if [ -n "$nv" ]; then
            echo "using the wheel toolkit's $nv"
            cuda=(-DCMAKE_CUDA_COMPILER="$nv" -DCUDAToolkit_ROOT="$(dirname "$(dirname "$nv")")")
        fi
    fi
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DRP_CUDA=ON -DRP_BUILD_SHARED=OFF \
        "${cuda[@]}" > "$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; return 1; }
    grep "replicator: CUDA" "$work/cmake.log"
    cmake --build "$build" -j"$(nproc)" --target replicator_cli test_kernels_cuda bench_d4pg \
        > "$work/build.log" 2>&1 || { tail -40 "$work/build.log"; return 1; }
}

kernel_tests() {
    "$build/test_kernels_cuda"
    local rc=$?
    [ $rc -eq 77 ] && echo "test_kernels_cuda skipped: no usable GPU"
    [ $rc -eq 0 ]
}

info() { RP_KERNELS=cuda "$bin" info; }

r20=(train resnet20 "${data_args[@]}" --limit 512 --quiet --no-augment)

# diffval A B: the largest relative difference between two checkpoints (fails on a non-finite
# value or a missing tensor).
diffval() {
    local line
    line=$(python3 "$root/scripts/st_compare.py" "$1" "$2" inf) || { echo "$line" >&2; return 1; }
    echo "$line" >&2
    echo "$line" | sed -E 's/.*difference ([^ ]+) .*/\1/'
}

# within X BOUND WHAT: X <= BOUND, said either way.
within() {
    python3 -c 'import sys; x, b = float(sys.argv[1]), float(sys.argv[2]); print(f"{sys.argv[3]}: {x:.3g} against the bound {b:.3g}: " + ("ok" if x <= b else "TOO FAR")); sys.exit(0 if x <= b else 1)' "$1" "$2" "$3"
}

# One step on the cuda, cpu and ref tables; the bound is the cpu table's own distance from the
# reference (measured here: on this project's CPU the momentum buffers of a ResNet-20 step differ
# by about 6e-4 from the reference's, summation order alone), doubled, and at least FLOOR.
resnet_step() {
    local prec=$1 floor=$2 t
    for t in ref cpu cuda; do
        run $t "r20-$prec-$t" "${r20[@]}" --batch 32 --max-steps 1 --threads 4 --precision "$prec" \
            --out "$work/r20-$prec-$t" || return 1
    done
    local d_cpu d_cuda
    d_cpu=$(diffval "$work/r20-$prec-cpu/checkpoint.safetensors" "$work/r20-$prec-ref/checkpoint.safetensors") || return 1
    d_cuda=$(diffval "$work/r20-$prec-cuda/checkpoint.safetensors" "$work/r20-$prec-ref/checkpoint.safetensors") || return 1
    within "$d_cuda" "$(python3 -c "print(max($floor, 2 * $d_cpu))")" "cuda against ref (cpu against ref: $d_cpu)"
}

# 2 replicas (2 threads, 2 streams, one GPU, cross-replica batch norm) against the CPU's 2
# replicas, and 2 replicas against 1 with the same global batch on the GPU as on the CPU (on the
# CPU they differ by about 5e-4 after one step: the bound is twice the CPU's difference).
two_streams() {
    local t r
    for t in cpu cuda; do
        for r in 1 2; do
            run $t "r20-$t-rep$r" "${r20[@]}" --batch 32 --max-steps 1 --replicas $r --threads 2 \
                --out "$work/r20-$t-rep$r" || return 1
        done
    done
    local d_same d_cpu d_cuda ok=0
    d_same=$(diffval "$work/r20-cuda-rep2/checkpoint.safetensors" "$work/r20-cpu-rep2/checkpoint.safetensors") || return 1
    d_cpu=$(diffval "$work/r20-cpu-rep2/checkpoint.safetensors" "$work/r20-cpu-rep1/checkpoint.safetensors") || return 1
    d_cuda=$(diffval "$work/r20-cuda-rep2/checkpoint.safetensors" "$work/r20-cuda-rep1/checkpoint.safetensors") || return 1
    within "$d_same" "$(python3 -c "print(max(1e-4, 2 * $d_cpu))")" "2 replicas: cuda against cpu" || ok=1
    within "$d_cuda" "$(python3 -c "print(max(1e-4, 2 * $d_cpu))")" "cuda: 2 replicas against 1 (cpu: $d_cpu)" || ok=1
    return $ok
}

# The "loss" values of a run's metrics.jsonl, one per line.
losses() {
    python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "loss" in r: print(r["loss"])' "$1/metrics.jsonl"
}

loss_falls() {
    local long=(train resnet20 "${data_args[@]}" --batch 128 --max-steps 300 --quiet)
    run cuda r20-long-cuda "${long[@]}" --threads 1 --out "$work/r20-long-cuda" || return 1
    run cpu r20-long-cpu "${long[@]}" --threads "$(nproc)" --out "$work/r20-long-cpu" || return 1
    local g c
    g=$(losses "$work/r20-long-cuda") c=$(losses "$work/r20-long-cpu")
    echo "cuda losses: $(echo $g)"
    echo "cpu losses:  $(echo $c)"
    python3 - "$(echo "$g" | head -1)" "$(echo "$g" | tail -1)" "$(echo "$c" | tail -1)" <<'PY'
import sys
first, last, cpu_last = map(float, sys.argv[1:])
ok = last < 0.7 * first and abs(last - cpu_last) <= 0.15
print(f"first {first:.4f} last {last:.4f} (cpu last {cpu_last:.4f}): "
      f"{'falls as on CPU' if ok else 'does NOT fall as on CPU'}")
sys.exit(0 if ok else 1)
PY
}

sngan() {
    [ ${#gan_data[@]} -gt 0 ] || { echo "no Fashion-MNIST for the SN-GAN"; return 1; }
    local gan=(train sngan "${gan_data[@]}" --limit 256 --ch-g 8 --ch-d 8 --z-dim 16 --d-batch 16
               --g-batch 16 --n-dis 2 --iters 2 --sample-every 0 --checkpoint-every 0 --threads 1 --quiet)
    local t d_cpu d_cuda
    for t in ref cpu cuda; do
        run $t "gan-$t" "${gan[@]}" --out "$work/gan-$t" || return 1
    done
    d_cpu=$(diffval "$work/gan-cpu/checkpoint.safetensors" "$work/gan-ref/checkpoint.safetensors") || return 1
    d_cuda=$(diffval "$work/gan-cuda/checkpoint.safetensors" "$work/gan-ref/checkpoint.safetensors") || return 1
    within "$d_cuda" "$(python3 -c "print(max(1e-3, 2 * $d_cpu))")" "cuda against ref (cpu against ref: $d_cpu)"
}

d4pg() {
    run cuda d4pg train d4pg --task cartpole-swingup --policy-layers 64,64 --critic-layers 64,64 \
        --batch 64 --min-replay 400 --eval-every 1000 --eval-episodes 1 --checkpoint-every 1000 \
        --env-steps 1000 --actors 1 --envs 2 --replicas 1 --threads 1 --max-steps 50 --quiet \
        --out "$work/d4pg" || return 1
    compare "$work/d4pg/checkpoint.safetensors" "$work/d4pg/checkpoint.safetensors" 0
}

# Informational, but fails when one of ours fails to run.
timings() {
    local ok=0 p
    echo "-- ResNet-50, batch 256, training (ours)"
    for p in bf16 f32; do
        RP_KERNELS=cuda "$bin" bench resnet --model resnet50 --batch 256 --iters 5 --warmup 2 \
            --threads 1 --precision $p --json > "$work/r50-$p.log" 2>&1 || ok=1
        tail -3 "$work/r50-$p.log"
    done
    echo "-- ResNet-50, batch 256, training (PyTorch eager: channels-last and NCHW, f32 and bf16 autocast)"
    python3 "$root/bench/resnet_torch.py" --device cuda --model resnet50 --batch 256 --iters 10 \
        --warmup 3 --format both --precision both --json 2>&1 | tail -6
    echo "-- D4PG learner step (ours, then PyTorch)"
    RP_KERNELS=cuda "$build/bench_d4pg" --batch 256 --threads 1 > "$work/d4pg-bench.log" 2>&1 || ok=1
    tail -3 "$work/d4pg-bench.log"
    python3 "$root/bench/d4pg_torch.py" --device cuda --batch 256 --precision both --json 2>&1 | tail -2
    nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv 2>&1 || true
    return $ok
}

# Last, as it builds ~30 more programs: the tape, runtime, io and model tests again on the cuda
# table (CTest's cuda_<name>, as strict_<name> on the strict table).
model_tests() {
    local names
    names=$(ctest --test-dir "$build" -N -R '^cuda_' | sed -nE 's/.*Test +#[0-9]+: cuda_(.*)$/\1/p')
    # shellcheck disable=SC2086
    cmake --build "$build" -j"$(nproc)" --target $names > "$work/build-tests.log" 2>&1 ||
        { tail -20 "$work/build-tests.log"; return 1; }
    ctest --test-dir "$build" -R '^cuda_' --output-on-failure --timeout 120
}

step "machine" machine
if [ "${1:-}" != "--skip-build" ]; then
    step "build (RP_CUDA=ON)" do_build || true
fi
if [ ! -x "$bin" ]; then
    echo "no $bin: nothing more can run"
else
    step "replicator info on the cuda table" info
    step "kernel tests: cuda against ref, every slot" kernel_tests
    step "ResNet-20 step, f32: cuda within the cpu table's distance from ref" resnet_step f32 1e-4
    step "ResNet-20 step, bf16: cuda within the cpu table's distance from ref" resnet_step bf16 2e-2
    step "2 replicas on 2 streams of one GPU: as on the CPU" two_streams
    step "300 ResNet-20 steps: the loss falls as on CPU" loss_falls
    step "SN-GAN iterations: cuda within the cpu table's distance from ref" sngan
    step "D4PG learner on the GPU, actors on CPU threads" d4pg
    step "timings against PyTorch (ResNet-50 b256, D4PG learner)" timings
    step "model and tape tests on the cuda table (ctest -R ^cuda_)" model_tests
fi
echo
echo "== summary ($(( $(date +%s) - t_start )) s)"
status=0
for r in "${results[@]}"; do
    echo "$r"
    case $r in FAIL*) status=1 ;; esac
done
exit $status
