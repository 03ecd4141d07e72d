#!/usr/bin/env bash
# The dashboard in a real browser. Trains two short runs of the tiny model (the second on the first's
# prepared data and tokenizer, with another learning rate), serves their folder with `alpha dashboard` on
# a free loopback port, loads the page in headless Chromium, checks that the dumped DOM holds both run
# names and drawn SVG lines in every panel, and saves a screenshot. Without Chromium: skipped (77)
# locally, a failure under CI=true.
# Usage: browser_test.sh ALPHA_BINARY WORK_DIR ARTIFACT_DIR
set -euo pipefail
alpha=$1 work=$2 artifacts=$3
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  if [ "${CI:-}" = true ]; then
    echo "FAIL: chromium is not installed (scripts/install-deps.sh installs it)"
    exit 1
  fi
  echo "SKIP: chromium is not installed"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work/runs" "$artifacts"
short=(--config tiny --steps 24 --batch-size 4 --seq-len 64 --eval-every 8 --sample-tokens 20)
"$alpha" train "${short[@]}" --out "$work/runs/tiny-lr3e-3" > "$work/train-a.log"
"$alpha" train "${short[@]}" --lr 1e-3 --data "$work/runs/tiny-lr3e-3/data" --out "$work/runs/tiny-lr1e-3" \
  > "$work/train-b.log"

"$alpha" dashboard "$work/runs" --port 0 > "$work/server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
url=""
for _ in $(seq 100); do  # the server prints its address once bound: 10 s at most
  url=$(grep -o 'http://127\.0\.0\.1:[0-9]*/' "$work/server.log" | head -n 1 || true)
  [ -n "$url" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$work/server.log"; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { echo "FAIL: no address from alpha dashboard"; cat "$work/server.log"; exit 1; }
echo "dashboard at $url"

chrome=("$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run
        --user-data-dir="$work/chromium-profile" --virtual-time-budget=8000 --window-size=1600,1000)
timeout 90 "${chrome[@]}" --dump-dom "$url" > "$work/dom.html" 2> "$work/chromium.log"
timeout 90 "${chrome[@]}" --screenshot="$artifacts/dashboard.png" "$url" 2>> "$work/chromium.log"

fail() { echo "FAIL: $*"; echo "(DOM in $work/dom.html, browser log in $work/chromium.log)"; exit 1; }
panels=7
for run in tiny-lr3e-3 tiny-lr1e-3; do
  grep -q ">$run</span>" "$work/dom.html" || fail "run $run is not in the run list"
  # One drawn line (a path with at least two points) per panel and series at least.
  lines=$(grep -oE "<path class=\"series\" data-run=\"$run\" data-series=\"[^\"]+\" d=\"M[0-9.]+ [0-9.]+L[0-9.]+ [0-9.]+" \
            "$work/dom.html" | wc -l)
  [ "$lines" -ge "$panels" ] || fail "run $run has $lines drawn lines, expected at least $panels"
  grep -q "data-run=\"$run\" data-series=\"validation\"" "$work/dom.html" || fail "run $run has no validation loss line"
done
[ "$(grep -o 'class="chart"' "$work/dom.html" | wc -l)" -eq "$panels" ] || fail "expected $panels chart panels"
! grep -q "waiting for data" "$work/dom.html" || fail "a panel has no data"
grep -q '<span class="status finished">finished</span>' "$work/dom.html" || fail "no run shown as finished"
[ -s "$artifacts/dashboard.png" ] || fail "no screenshot"
echo "PASS: both runs drawn in $panels panels; screenshot in $artifacts/dashboard.png"
