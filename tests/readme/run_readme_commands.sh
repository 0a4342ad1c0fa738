#!/usr/bin/env bash
# The README-commands test (issue 17, docs/errors.md): every command in
# README.md's ```sh blocks runs as written, against this build, in document
# order, in one scratch folder (so a file one block writes, such as
# cpu-mlp.json, is there for the next).
#
#   tests/readme/run_readme_commands.sh BUILD_DIR [README]
#
# Run from the source root (ctest does). In the scratch folder `build` links
# to BUILD_DIR and `examples` to the source's examples/, and the tools'
# folders are on PATH, so `build/planner/planner ...` and `planner ...` both
# run this build's binaries; `tests` links to the source's tests/ (the
# published trace excerpts docs/measured-runs.md reads).
#
# Markers, as HTML comments on the lines just before a block's opening fence
# (GitHub does not show them):
#   <!-- readme-test: skip REASON -->      the block is not run; REASON is printed
#   <!-- readme-test: small FROM => TO --> the block runs with the text FROM
#                                          replaced by TO (smaller sizes); repeatable
#   <!-- readme-test: exits 0 3: REASON --> the block's commands may exit with
#                                          any of these codes (default: 0 only)
# A command whose program is not installed here (mpirun) is skipped, saying
# so. Each command has 300 s. Exit 0 when every command that ran exited 0,
# 1 otherwise, with the failing command and the tail of its output.
set -uo pipefail

build=$(cd "${1:?usage: run_readme_commands.sh BUILD_DIR [README]}" && pwd)
readme=$(cd "$(dirname "${2:-README.md}")" && pwd)/$(basename "${2:-README.md}")
source_root=$(pwd)

log() { echo "readme: $*"; }

work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT
ln -s "${build}" "${work}/build"
ln -s "${source_root}/examples" "${work}/examples"
ln -s "${source_root}/tests" "${work}/tests"
export PATH="${build}/planner:${build}/sim:${build}/profiler:${build}/validate:${build}/bench:${PATH}"

ran=0 skipped=0 failed=0

# run_command TEXT: one command (continuation lines joined) in the folder.
run_command() {
  local text=$1
  local program
  program=$(sed -E 's/^([A-Z_]+=[^ ]* +)*//; s/ .*//' <<<"${text}")
  if ! (cd "${work}" && command -v "${program}" >/dev/null 2>&1) && [[ ! -x "${work}/${program}" ]]; then
    log "SKIP (${program} is not installed here): ${text}"
    skipped=$((skipped + 1))
    return
  fi
  # As ValidatorLoop.ProfilerCpuLayersOnTheMpiBackend: real layers in two
  # sanitized MPI processes are not run in a sanitizer build (they failed 1
  # run in 2 under load there); the normal build runs this command.
  if [[ "${program}" == mpirun ]] && grep -q '^PIPECAST_SANITIZE:BOOL=ON' "${build}/CMakeCache.txt" 2>/dev/null; then
    log "SKIP (real layers under MPI are not run in a sanitizer build): ${text}"
    skipped=$((skipped + 1))
    return
  fi
  log "RUN: ${text}"
  local rc=0
  (cd "${work}" && timeout 300 bash -c "${text}") >"${work}/.out" 2>&1 || rc=$?
  if [[ " ${exits} " == *" ${rc} "* ]]; then
    ((rc == 0)) || log "exit ${rc}, allowed here (${exits_reason})"
    ran=$((ran + 1))
  else
    log "FAIL (exit ${rc}): ${text}"
    tail -n 20 "${work}/.out" | sed 's/^/  | /'
    failed=$((failed + 1))
  fi
}

in_block=0 skip_reason="" subs=() pending="" line_no=0 exits="0" exits_reason=""
while IFS= read -r line || [[ -n "${line}" ]]; do
  line_no=$((line_no + 1))
  if [[ ${in_block} -eq 0 ]]; then
    if [[ "${line}" =~ ^\<\!--\ readme-test:\ skip\ (.*)\ --\>$ ]]; then
      skip_reason=${BASH_REMATCH[1]}
    elif [[ "${line}" =~ ^\<\!--\ readme-test:\ small\ (.*)\ =\>\ (.*)\ --\>$ ]]; then
      subs+=("${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}")
    elif [[ "${line}" =~ ^\<\!--\ readme-test:\ exits\ ([0-9\ ]+):\ (.*)\ --\>$ ]]; then
      exits=${BASH_REMATCH[1]} exits_reason=${BASH_REMATCH[2]}
    elif [[ "${line}" == '```sh' ]]; then
      in_block=1
    elif [[ -n "${line}" ]]; then
      skip_reason="" subs=() exits="0" exits_reason=""  # markers apply to the next block
    fi
    continue
  fi
  if [[ "${line}" == '```' ]]; then
    in_block=0 skip_reason="" subs=() pending="" exits="0" exits_reason=""
    continue
  fi
  if [[ -n "${skip_reason}" ]]; then
    [[ -n "${line// /}" ]] && log "SKIP (${skip_reason}): ${line}" && skipped=$((skipped + 1))
    continue
  fi
  if [[ "${line}" == *\\ ]]; then
    pending+="${line%\\} "
    continue
  fi
  text="${pending}${line}"
  pending=""
  for ((i = 0; i < ${#subs[@]}; i += 2)); do text=${text//"${subs[i]}"/"${subs[i + 1]}"}; done
  text=$(sed -E 's/[[:space:]]+#.*$//; s/^[[:space:]]+//' <<<"${text}")
  [[ -z "${text}" ]] && continue
  run_command "${text}"
done <"${readme}"

log "${ran} commands ran, ${skipped} skipped, ${failed} failed"
[[ ${failed} -eq 0 && ${ran} -gt 0 ]]
