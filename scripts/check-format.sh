#!/usr/bin/env bash
# Fails (exit 1) when a tracked C++ or CUDA file is not as clang-format-14
# would write it (.clang-format: Google style, 100 columns), naming each file.
# Fix with: git ls-files '*.cc' '*.h' '*.cu' | xargs clang-format-14 -i
# Run by ctest as lint.format; .ci/run runs it through scripts/test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

formatter="$(command -v clang-format-14 || true)"
if [[ -z "${formatter}" ]]; then
  echo "check-format.sh: clang-format-14 is missing; scripts/setup.sh installs it" >&2
  exit 1
fi
bad=()
while IFS= read -r -d '' file; do
  "${formatter}" --dry-run -Werror "${file}" >/dev/null 2>&1 || bad+=("${file}")
done < <(git ls-files -z -- '*.cc' '*.h' '*.cu' '*.cuh')
if ((${#bad[@]})); then
  echo "check-format.sh: ${#bad[@]} file(s) not clang-formatted:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "fix: clang-format-14 -i ${bad[*]}" >&2
  exit 1
fi
echo "check-format.sh: every C++ file is formatted"
