#!/usr/bin/env bash
# Rules loaded while traffic flows: `bench/e2e/run.sh --systems sluice` (two TAP ports, iperf3
# TCP between two namespaces through `sluice run`, so the datapath threads are busy), and,
# 3 s after iperf3 starts, one `sluice flow add --batch RULES` into that daemon, timed end to
# end. Prints the load's rules/s and the run's Gbit/s. Run it alternating two binaries to
# compare them under traffic (the plain `bench/flows/run.sh` loads into an idle switch).
#
#   sudo bench/flows/under_traffic.sh SLUICE_BIN RULES_FILE [SECONDS]
#
# RULES_FILE: e.g. the first 500 000 lines of the file `bench/flows/run.sh` generates
# (`target/release/examples/bench_flows --emit DIR --rules 1000000 --masks 16`; the daemon's
# default rule limit leaves no room for a million more next to the run's own four rules).
set -euo pipefail
BIN=${1:?sluice binary}
RULES=${2:?rules file}
SECS=${3:-14}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
n=$(grep -c . "$RULES")
log=$(mktemp /tmp/sluice-under-traffic.XXXXXX)
trap 'rm -f "$log" "$log.add"' EXIT
before=$(ls -d /tmp/sluice-e2e.* 2>/dev/null || true)
"$ROOT/bench/e2e/run.sh" --systems sluice --seconds "$SECS" --rounds 1 --streams 1 --no-install \
    --sluice "$BIN" >"$log" 2>&1 &
e2e=$!
# The run's work directory (the one that was not there before) and its iperf3 client.
work=""
for _ in $(seq 600); do
    for d in /tmp/sluice-e2e.*; do
        [[ -d $d && " $before " != *" $d "* ]] && work=$d
    done
    [[ -n $work ]] && pgrep -f "iperf3 -c" >/dev/null && break
    sleep 0.1
done
[[ -n $work ]] || { echo "no e2e run found" >&2; exit 1; }
sleep 3
t0=$(date +%s.%N)
"$BIN" --socket "$work/sluice.sock" flow add --batch "$RULES" >"$log.add"
t1=$(date +%s.%N)
wait "$e2e"
gbit=$(grep -A2 "best of" "$log" | tail -1 | awk '{print $3}')
python3 -c "import sys; print(f'{round($n/($t1-$t0))} rules/s under traffic ({$t1-$t0:.3f} s); iperf3 {sys.argv[1]} Gbit/s; daemon: ' + open(sys.argv[2]).read().strip().splitlines()[-1])" "$gbit" "$log.add"
