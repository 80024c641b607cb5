#!/usr/bin/env bash
# Formats the C sources with the committed .clang-format, or checks them.
# Usage: scripts/format.sh          rewrite every tracked .c/.h/.cu/.cuh file in place
#        scripts/format.sh --check  list the files that differ and fail if any do
# (proto/ holds only the .proto; the generated protobuf-c code lives in the build directory.)
set -euo pipefail
# Pinned: other clang-format versions lay out the same code differently.
clang_format=${CLANG_FORMAT:-clang-format-14}
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    "$clang_format" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    echo "not formatted (run scripts/format.sh): ${bad[*]}" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files match .clang-format"
else
  "$clang_format" -i "${files[@]}"
fi
