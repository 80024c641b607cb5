#!/usr/bin/env bash
# Installs every Debian package replicator needs, idempotently: one
# `apt-get update`, then only what is missing. Then configures and builds.
# Usage: scripts/setup.sh [build-dir] [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config
  libopenblas-dev        # GEMM
  libdnnl-dev            # oneDNN 2.6: convolution, pooling
  libcjson-dev           # checkpoint headers, configs
  zlib1g-dev             # gzip data files
  libpng-dev             # image grids; PNG datasets (src/data/image_decode.c)
  libturbojpeg0-dev      # libjpeg-turbo's TurboJPEG API: JPEG datasets (src/data/image_decode.c)
  libjpeg62-turbo-dev    # its libjpeg API: a training crop's region decoded alone (src/data/image_region.c)
  libmujoco-dev          # MuJoCo 2.2: physics of the rl environments (src/rl/)
  libcairo2-dev          # line charts (learning curves): antialiased lines and text, PNG
  fonts-dejavu-core      # the charts' font (cairo draws with whatever fontconfig finds)
  libegl-dev libegl-mesa0 libgl1-mesa-dri  # headless GL (Mesa's surfaceless EGL) for MuJoCo's renderer: episode frames
  libgif-dev             # animated GIFs of an episode's frames (the D4PG model)
  liblapacke-dev         # LAPACK's symmetric eigensolver: the Fréchet distance (FID)
  libprotobuf-c-dev protobuf-c-compiler  # TensorBoard event files: protobuf-c and protoc-c (proto/)
  libcmocka-dev          # unit tests
  clang libclang-rt-14-dev libomp-dev  # scripts/fuzz.sh: clang 14, its libFuzzer (in compiler-rt) and OpenMP runtime
  clang-format-14        # scripts/format.sh: the committed .clang-format (versions format differently)
  libopenmpi-dev openmpi-bin  # the MPI backend; the all-reduce peer benchmark
  iproute2               # tests/mpi_two_hosts.sh: network namespaces and a veth pair
  dataset-fashion-mnist  # the default training data
  python3                # tests/cli_memory.sh: reads bench's JSON report and plays the peer
  python3-onnx python3-opencv  # tests/cli_onnx.sh: onnx.checker and OpenCV's dnn run the exported models
  slurmctld slurmd slurm-client munge libpmix-dev  # tests/cli_slurm.sh: a one-node Slurm; srun --mpi=pmix loads libpmix.so (in -dev)
  python3-torchvision    # bench/compare_loader_folder.sh: torchvision's ImageFolder + DataLoader, the loader's peer
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

build=${1:-build}
shift || true
# The main build (build/, what the README's commands run) is tuned for this machine's CPU: the
# library's own batch-norm and activation loops run several times slower at the portable
# baseline (docs/building.md). Other directories (the sanitizer builds) stay portable, so the
# tests cover both; a later -DRP_NATIVE=OFF in the arguments wins.
opts=()
[ "$build" = build ] && opts=(-DRP_NATIVE=ON)
# Where the CUDA toolkit is (this project's machines and CI: /usr/local/cuda-13.0), the CUDA
# kernel table must build: RP_CUDA=ON turns a toolkit that stopped being found into an error
# instead of a build that quietly leaves the table out. A later -DRP_CUDA=... wins.
if command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  opts+=(-DRP_CUDA=ON)
fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "${opts[@]}" "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
