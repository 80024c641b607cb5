# lib.sh - what the shell tests share. Source it after setting $bin (the program under test).

# need_fashion_mnist: sets $data to the Fashion-MNIST directory, or prints SKIP and exits 0.
need_fashion_mnist() {
    data=/usr/share/datasets/fashion-mnist
    if [ ! -e "$data/train-images-idx3-ubyte.gz" ]; then
        echo "SKIP: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
        exit 0
    fi
}

# need_mpirun: sets mpi=(mpirun ...) for this machine (oversubscribed, root allowed, passive
# OpenMP waits and no leak report of OpenMPI's own allocations forwarded), or prints SKIP and
# exits 0.
need_mpirun() {
    if ! command -v mpirun > /dev/null; then
        echo "SKIP: mpirun is not installed"
        exit 0
    fi
    export OMP_WAIT_POLICY=passive
    export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
    mpi=(mpirun --oversubscribe -x OMP_WAIT_POLICY -x ASAN_OPTIONS)
    [ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
    return 0
}

# ours PID: PID is still a live process of $bin (not a zombie, nor a pid reused since).
ours() { [ "$(readlink "/proc/$1/exe" 2> /dev/null)" = "$bin" ]; }

# kill_ours PID...: each one still ours is continued (if stopped) and killed.
kill_ours() {
    local p
    for p in "$@"; do
        ours "$p" || continue
        kill -CONT "$p" 2> /dev/null || true
        kill -KILL "$p" 2> /dev/null || true
    done
}
