#!/usr/bin/env bash
# bench/http_cost.sh: what the HTTP endpoint (`weir run --http`) costs the
# counter job: its throughput without --http and with it while a scraper
# reads /metrics every second, runs alternating, medians printed.
#
#   bench/http_cost.sh [WEIR] [RUNS] [-- COUNTER ARGS...]
#
# WEIR: the weir binary (default build/rel/weir, a Release build); RUNS:
# runs of each kind (default 5); the counter's arguments default to
# --records 50M --keys 100k --state-dir none. Each run's rate is the
# summary's records_per_s (--summary-json). Prints one line per run and
# "without: MEDIAN rec/s  with: MEDIAN rec/s  ratio R  scrapes S". Needs
# curl. The address of a run's endpoint (port 0: a free one) is read from
# its log line, as the state directory is off.
set -euo pipefail
weir=${1:-build/rel/weir}
runs=${2:-5}
shift $(($# >= 2 ? 2 : $#))
[ "${1:-}" = "--" ] && shift
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--records 50M --keys 100k --state-dir none)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

rate() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["records_per_s"])' "$1"; }

without=() with=() scrapes=0
for i in $(seq "$runs"); do
  "$weir" run counter "${args[@]}" --quiet --summary-json "$tmp/s.json"
  r=$(rate "$tmp/s.json")
  without+=("$r")
  WEIR_LOG=info "$weir" run counter "${args[@]}" --http 127.0.0.1:0 \
    --summary-json "$tmp/s.json" 2>"$tmp/err" &
  pid=$!
  addr=
  while kill -0 "$pid" 2>/dev/null && [ -z "$addr" ]; do
    addr=$(sed -n 's|.*http endpoint on http://\([^/]*\)/.*|\1|p' "$tmp/err" | head -n 1)
    [ -n "$addr" ] || sleep 0.01
  done
  n=0
  while kill -0 "$pid" 2>/dev/null; do
    if curl -sf -o /dev/null "http://$addr/metrics"; then n=$((n + 1)); fi
    sleep 1
  done
  wait "$pid"
  w=$(rate "$tmp/s.json")
  with+=("$w")
  scrapes=$((scrapes + n))
  printf 'run %d: without %.0f rec/s, with --http %.0f rec/s (%d scrapes)\n' "$i" "$r" "$w" "$n"
done
python3 - "${without[*]}" "${with[*]}" "$scrapes" <<'PY'
import statistics, sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
ma, mb = statistics.median(a), statistics.median(b)
print("without: %.2fM rec/s  with: %.2fM rec/s  ratio %.3f  scrapes %s  (spread %.0f%% / %.0f%%)"
      % (ma / 1e6, mb / 1e6, mb / ma, sys.argv[3],
         100 * (max(a) - min(a)) / ma, 100 * (max(b) - min(b)) / mb))
PY
