#!/usr/bin/env bash
# Browser test of the HTML reports (docs/report.md): Debian's Chromium,
# headless, opens reports written by the simulator and the planner from
# files, and the test checks that each page rendered (its screenshot is not
# blank), that the DOM Chromium built holds the expected elements, and that
# the page logged nothing to the console (the reports have no script, so any
# console line — an exception, a failed load — is a failure).
#
#   tests/browser/check_report.sh SIMULATOR PLANNER [KEEP_DIR]
#
# Run from the source root (ctest does). KEEP_DIR, when given, keeps the
# reports, screenshots, DOMs and logs there; otherwise they go to a temporary
# folder that is removed. CHROMIUM overrides the browser (default
# /usr/bin/chromium). Exit 0 passed, 1 failed, 77 skipped: no Chromium
# (ctest's SKIP_RETURN_CODE; scripts/setup.sh installs it).
set -euo pipefail

simulator=${1:?usage: check_report.sh SIMULATOR PLANNER [KEEP_DIR]}
planner=${2:?usage: check_report.sh SIMULATOR PLANNER [KEEP_DIR]}
chromium=${CHROMIUM:-/usr/bin/chromium}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# A screenshot counts as rendered with more distinct colours than this (a
# blank or error page has a handful) and more non-white pixels per thousand.
min_colors=50
min_nonwhite_permille=20

log() { echo "check_report.sh: $*" >&2; }

if [[ ! -x "${chromium}" ]]; then
  log "SKIP: no Chromium at ${chromium} (scripts/setup.sh installs the chromium package)"
  exit 77
fi

keep=0
if [[ $# -ge 3 ]]; then
  work=$3
  keep=1
  mkdir -p "${work}"
else
  work=$(mktemp -d)
  trap 'rm -rf "${work}"' EXIT
fi

failures=0
fail() {
  log "FAIL: $*"
  failures=$((failures + 1))
}

# chromium_run NAME ARGS...: one headless run with a fresh profile; its
# stderr (with console messages) goes to NAME.log, its stdout to NAME.out.
chromium_run() {
  local name=$1
  shift
  local profile
  profile=$(mktemp -d)
  timeout 120 "${chromium}" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="${profile}" --enable-logging=stderr --v=0 "$@" \
    >"${work}/${name}.out" 2>"${work}/${name}.log" || true
  rm -rf "${profile}"
}

# Console lines a page logged: Chromium prints every console message, of any
# level, as "...:CONSOLE:<line>] ..." (older builds "CONSOLE(<line>)").
console_lines() { grep -hE ':CONSOLE[:(]|Uncaught' "$@" || true; }

# check_page NAME CLASS...: screenshot and DOM of NAME.html, each CLASS
# (a class="..." prefix) present in the DOM.
check_page() {
  local name=$1
  shift
  local page="file://${work}/${name}.html"
  chromium_run "${name}-shot" --screenshot="${work}/${name}.png" --window-size=1400,2000 "${page}"
  chromium_run "${name}-dom" --dump-dom "${page}"
  if [[ ! -s "${work}/${name}.png" ]]; then
    fail "${name}: no screenshot (see ${name}-shot.log)"
  else
    local stats colors nonwhite
    stats=$(python3 "${here}/png_stats.py" "${work}/${name}.png")
    colors=$(awk '$1 == "colors" {print $2}' <<<"${stats}")
    nonwhite=$(awk '$1 == "nonwhite_permille" {print $2}' <<<"${stats}")
    log "${name}: screenshot ${colors} colours, ${nonwhite}/1000 non-white pixels"
    ((colors > min_colors)) || fail "${name}: screenshot has ${colors} colours: blank?"
    ((nonwhite > min_nonwhite_permille)) ||
      fail "${name}: screenshot has ${nonwhite}/1000 non-white pixels: blank?"
  fi
  local dom="${work}/${name}-dom.out"
  for cls in "$@"; do
    grep -q "class=\"${cls}" "${dom}" || fail "${name}: no class=\"${cls}\" element in the DOM"
  done
  if grep -qE '<script|(src|href)="' "${dom}"; then
    fail "${name}: the DOM loads or links something; a report must stand alone"
  fi
  local console
  console=$(console_lines "${work}/${name}-shot.log" "${work}/${name}-dom.log")
  [[ -z "${console}" ]] || fail "${name}: console output: ${console}"
}

# The console check must see console output at all: a page that logs and
# throws has to be caught, or the check proves nothing.
printf '<!DOCTYPE html><p>x</p><script>console.error("probe"); throw new Error("probe");</script>' \
  >"${work}/probe.html"
chromium_run probe --dump-dom "file://${work}/probe.html"
if [[ -z "$(console_lines "${work}/probe.log")" ]]; then
  fail "Chromium logged nothing for a page that throws: the console check cannot work here"
fi

"${simulator}" --model examples/gpt-7b.json --stages 4 --microbatches 8 --schedule zb-h1 \
  --cluster h100-sxm --data-parallel 2 --report "${work}/simulator.html" >/dev/null
"${simulator}" --model examples/llama-70b.json --stages 64 --microbatches 256 --schedule 1f1b \
  --cluster h100-sxm --report "${work}/simulator-p64.html" >/dev/null
"${planner}" --model examples/gpt-7b.json --gpus 8 --report "${work}/planner.html" \
  >/dev/null 2>&1
# 256 micro-batches: merged at 1x, so the page has zoom buttons (docs/report.md).
# (128 stopped merging once the matmul time model and the memory-aware default
# partition widened each op; the merge rule, not the count, is what is tested.)
"${simulator}" --model examples/gpt-7b.json --stages 8 --microbatches 256 --schedule 1f1b \
  --cluster h100-sxm --report "${work}/simulator-m128.html" >/dev/null
# The same page with the 16x button checked: what a click shows, CSS alone.
sed -e 's/ checked="checked"//' \
  -e 's/id="tl-zoom-16" value="16"/id="tl-zoom-16" value="16" checked="checked"/' \
  "${work}/simulator-m128.html" >"${work}/simulator-m128-zoom16.html"

check_page simulator "op op-F" "op op-I" "op op-W" "idle" "xfer" "crit-mark" "mem\"" \
  "capacity" "metric"
check_page simulator-p64 "busy" "idle" "mem\"" "capacity"
check_page planner "sweep-chart" "op op-F" "mem\"" "capacity" "candidate" "reject-group"
check_page simulator-m128 "zoom" "tl-scroll tl-z16" "timeline-zoomed" "busy"
check_page simulator-m128-zoom16 "timeline-zoomed" "op op-F"

if ((failures > 0)); then
  ((keep)) && log "artefacts in ${work}"
  log "${failures} check(s) failed"
  exit 1
fi
log "passed: 5 reports rendered in $("${chromium}" --version 2>/dev/null | head -1)"
