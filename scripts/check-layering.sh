#!/usr/bin/env bash
# Fails (exit 1) when an #include breaks the library layering of
# docs/architecture.md, naming the file, the line and the rule:
#   1. a folder's internal/ headers are included only inside that folder;
#   2. the core (sim/) and base/ include no formats/, report/, planner/,
#      profiler/, validate/ or tools/ header (sim's tests may use formats/
#      and testing/, never report/);
#   3. formats/ includes no report/, planner/, profiler/, validate/ header
#      (its tests may use report/ and testing/);
#   4. testing/ is included only by tests (*_test.cc) and testing/ itself;
#   5. measured/ (real runs read in) is included only by measured/, the tools
#      (tools/, profiler/tools/), fuzz/ and tests; the libraries below it
#      (report/, planner/, profiler/, validate/) never include it.
# Run by ctest as lint.layering.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

failures=0
fail() {
  echo "check-layering.sh: $1: $2" >&2
  failures=$((failures + 1))
}

while IFS= read -r -d '' file; do
  folder="${file%%/*}"
  is_test=0
  [[ "${file}" == *_test.cc ]] && is_test=1
  while IFS=: read -r line include; do
    target="$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"${include}")"
    target_folder="${target%%/*}"
    if [[ "${target}" == */internal/* && "${target_folder}" != "${folder}" ]]; then
      fail "${file}:${line}" "includes ${target}, internal to ${target_folder}/"
    fi
    if [[ "${target_folder}" == testing && ${is_test} == 0 && "${folder}" != testing ]]; then
      fail "${file}:${line}" "includes ${target}: testing/ is for tests only"
    fi
    if [[ "${target_folder}" == measured ]]; then
      case "${file}" in
        measured/* | tools/* | profiler/tools/* | fuzz/* | tests/*) ;;
        *) ((is_test)) || fail "${file}:${line}" "includes ${target}: measured/ sits above ${folder}/" ;;
      esac
    fi
    case "${folder}" in
      base)
        [[ "${target_folder}" == base ]] || fail "${file}:${line}" "base/ includes ${target}"
        ;;
      sim)
        case "${target_folder}" in
          base | sim) ;;
          formats | testing) ((is_test)) || fail "${file}:${line}" "the core includes ${target}" ;;
          *) fail "${file}:${line}" "the core includes ${target}" ;;
        esac
        ;;
      formats)
        case "${target_folder}" in
          base | sim | formats) ;;
          report | testing) ((is_test)) || fail "${file}:${line}" "formats/ includes ${target}" ;;
          *) fail "${file}:${line}" "formats/ includes ${target}" ;;
        esac
        ;;
    esac
  done < <(grep -n '^#include "' "${file}" || true)
done < <(git ls-files -z -- '*.cc' '*.h' '*.cu' '*.cuh')

if ((failures)); then
  echo "check-layering.sh: ${failures} include(s) break the layering (docs/architecture.md)" >&2
  exit 1
fi
echo "check-layering.sh: every include follows the layering"
