#!/usr/bin/env bash
# Runs a test program on the CUDA kernel table (RP_KERNELS=cuda) where one can run, and exits 77
# (CTest: skipped) where none can: the cuda_<name> tests of CMakeLists.txt, the model and tape
# tests again on a GPU, as strict_<name> runs them on the strict table.
# Usage: cuda_run.sh path/to/test_kernels_cuda path/to/test_program [args...]
set -u
probe=$1
shift
"$probe" probe > /dev/null 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    echo "SKIP: no usable CUDA device (or a build without the CUDA table)"
    exit 77
fi
RP_KERNELS=cuda exec "$@"
