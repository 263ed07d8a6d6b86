#!/usr/bin/env bash
# Rules loaded while traffic flows: `bench/e2e/run.sh --systems sluice` (two TAP ports, iperf3
# TCP between two namespaces through `sluice run`, so the datapath threads are busy), and,
# 3 s after iperf3 starts, one `sluice flow add --batch RULES` into that daemon, timed end to
# end. Prints the load's rules/s and the run's Gbit/s. Run it alternating two binaries to
# compare them under traffic (the plain `bench/flows/run.sh` loads into an idle switch). The
# e2e run's daemon has no store (`--no-db`), so its rates are not those of `run.sh` (`--db`).
#
#   sudo bench/flows/under_traffic.sh SLUICE_BIN RULES_FILE [SECONDS]
#
# RULES_FILE: rule lines, e.g. the first 500 000 lines of the file `bench/flows/run.sh`
# generates (`target/release/examples/bench_flows --emit DIR --rules 1000000 --masks 16`),
# small enough that the load ends well inside the SECONDS (default 14) of traffic.
set -euo pipefail
BIN=${1:?sluice binary}
RULES=${2:?rules file}
SECS=${3:-14}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
n=$(grep -cv -e '^[[:space:]]*$' -e '^[[:space:]]*#' "$RULES" || true)
[[ $n -gt 0 ]] || { echo "$RULES: no rule lines" >&2; exit 2; }
log=$(mktemp /tmp/sluice-under-traffic.XXXXXX)
# Made before the e2e run starts: its work directory is the one newer than this.
stamp=$(mktemp /tmp/sluice-under-traffic-stamp.XXXXXX)
sleep 0.05
e2e=""
cleanup() {
    if [[ -n $e2e ]] && kill -0 "$e2e" 2>/dev/null; then
        kill "$e2e" 2>/dev/null || true
        wait "$e2e" 2>/dev/null || true
    fi
    rm -f "$log" "$log.add" "$stamp"
}
trap cleanup EXIT
"$ROOT/bench/e2e/run.sh" --systems sluice --seconds "$SECS" --rounds 1 --streams 1 --no-install \
    --sluice "$BIN" >"$log" 2>&1 &
e2e=$!
# The run's work directory: the e2e one made after the stamp, holding the daemon's socket.
work=""
for _ in $(seq 600); do
    work=$(find /tmp -maxdepth 1 -name 'sluice-e2e.*' -type d -newer "$stamp" | head -1)
    if [[ -n $work && -S $work/sluice.sock ]] && pgrep -P "$e2e" -f "iperf3 -c" >/dev/null; then
        break
    fi
    work=""
    sleep 0.1
done
[[ -n $work ]] || { cat "$log" >&2; echo "the e2e run's iperf3 client did not start" >&2; exit 1; }
sleep 3
t0=$(date +%s.%N)
"$BIN" --socket "$work/sluice.sock" flow add --batch "$RULES" >"$log.add" \
    || { cat "$log.add" "$log" >&2; exit 1; }
t1=$(date +%s.%N)
wait "$e2e" || { cat "$log" >&2; exit 1; }
e2e=""
gbit=$(grep -A2 "best of" "$log" | tail -1 | awk '{print $3}' || true)
echo "$n rules in $(python3 -c "print(f'{$t1-$t0:.3f}')") s under traffic: \
$(python3 -c "print(round($n/($t1-$t0)))") rules/s; iperf3 ${gbit:-?} Gbit/s; \
daemon: $(tail -1 "$log.add")"
