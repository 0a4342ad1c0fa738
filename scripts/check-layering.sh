#!/usr/bin/env bash
# Fails (exit 1) when an #include breaks the library layering of
# docs/architecture.md ("Folders and targets"), naming the file, the line and
# the rule. Every folder that holds C++ has a row below; a folder without one
# fails too, so a new folder must state what it may include:
#   1. a folder's internal/ headers are included only inside that folder;
#   2. testing/ is included only by tests (*_test.cc) and testing/ itself;
#   3. tools/ is included only by tools/ (no library depends on a tool);
#   4. each folder includes only the folders of its row (its tests also those
#      of the row's "tests also" column), with two narrower grants: in
#      report/ only the planner's page and progress display (planner_report*,
#      search_progress*) include planner/, and validate/ includes of profiler/
#      only profiler/cpu/ (the CPU workload it runs).
# Run by ctest as lint.layering.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

libraries="base sim formats frameworks report planner profiler validate measured"

# folder -> the folders it may include (besides itself).
declare -A allowed=(
  [base]=""
  [sim]="base"
  [formats]="base sim"
  [frameworks]="base sim formats"
  [report]="base sim formats planner"
  [planner]="base sim formats"
  [profiler]="base sim formats"
  [validate]="base sim formats report profiler"
  [measured]="base sim formats report profiler validate"
  [tools]="${libraries}"
  [testing]="${libraries}"
  [bench]="${libraries}"
  [fuzz]="${libraries}"
  [tests]="${libraries} testing"
)
# folder -> what its tests (*_test.cc) may include besides.
declare -A tests_also=(
  [sim]="formats testing"
  [formats]="report testing"
  [frameworks]="testing"
  [report]="testing"
  [planner]="testing"
  [profiler]="testing"
  [validate]="testing"
  [measured]="testing"
  [tools]="testing"
)

failures=0
fail() {
  echo "check-layering.sh: $1: $2" >&2
  failures=$((failures + 1))
}

# Whether word $1 is in the space-separated list $2.
listed() { [[ " $2 " == *" $1 "* ]]; }

while IFS= read -r -d '' file; do
  folder="${file%%/*}"
  [[ "${file}" == */* ]] || folder="."
  if [[ -z "${allowed[${folder}]+set}" ]]; then
    fail "${file}" "folder ${folder}/ has no layering rule: add its row to scripts/check-layering.sh and docs/architecture.md"
    continue
  fi
  is_test=0
  [[ "${file}" == *_test.cc ]] && is_test=1
  may="${allowed[${folder}]}"
  ((is_test)) && may="${may} ${tests_also[${folder}]:-}"
  base_name="${file##*/}"
  while IFS=: read -r line include; do
    target="$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"${include}")"
    target_folder="${target%%/*}"
    where="${file}:${line}"
    if [[ "${target}" == */internal/* && "${target_folder}" != "${folder}" ]]; then
      fail "${where}" "includes ${target}, internal to ${target_folder}/"
    fi
    [[ "${target_folder}" == "${folder}" ]] && continue
    if [[ "${target_folder}" == testing ]]; then
      ((is_test)) || fail "${where}" "includes ${target}: testing/ is for tests only"
      continue
    fi
    if [[ "${target_folder}" == tools ]]; then
      fail "${where}" "includes ${target}: tools/ is included only by tools/"
      continue
    fi
    if ! listed "${target_folder}" "${may}"; then
      fail "${where}" "${folder}/ includes ${target}; it may include ${may:-nothing} besides ${folder}/"
      continue
    fi
    if [[ "${folder}" == report && "${target_folder}" == planner &&
      "${base_name}" != planner_report* && "${base_name}" != search_progress* ]]; then
      fail "${where}" "includes ${target}: in report/ only planner_report* and search_progress* present the planner"
    fi
    if [[ "${folder}" == validate && "${target_folder}" == profiler && "${target}" != profiler/cpu/* ]]; then
      fail "${where}" "includes ${target}: validate/ uses only the profiler's CPU workload (profiler/cpu/)"
    fi
  done < <(grep -n '^#include "' "${file}" || true)
done < <(git ls-files -z --cached --others --exclude-standard -- '*.cc' '*.h' '*.cu' '*.cuh')

if ((failures)); then
  echo "check-layering.sh: ${failures} include(s) break the layering (docs/architecture.md)" >&2
  exit 1
fi
echo "check-layering.sh: every include follows the layering"
