#!/usr/bin/env bash
# The installed libraries export exactly the installed public headers' functions:
# `cmake --install` into a temporary prefix, then tests/abi_symbols.py on its include/replicator
# and its libreplicator*.so (nm -D), which names every offender.
# Usage: abi_symbols.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(realpath "$1")
src=$(realpath "$2")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cmake --install "$build" --prefix "$dir" > /dev/null
libs=("$dir"/lib*/libreplicator*.so)
[ ${#libs[@]} -eq 3 ] || { echo "FAIL: expected 3 shared libraries, found: ${libs[*]}"; exit 1; }
python3 "$src/tests/abi_symbols.py" "$dir/include/replicator" "${libs[@]}"
