#!/bin/sh
# The cost of the durable store on rule insertion through the daemon (issue 18, item 3):
# 1M rules sent with `sluice flow add --batch FILE` (50,000 per request) to `sluice run
# --threads 1` with `--db DIR` and with `--no-db`, alternated; prints the CLI's rules/s, the wall
# clock, the daemon's CPU time, and for --db the store's size and the restart time.
#
#   bench/store-engines/daemon-rules.sh [RULES] [ROUNDS]
#
# Rule file: `bench_flows --emit` (16 masks, the same rules as bench/ovs/flows-vs-ovs.sh).
set -eu
RULES=${1:-1000000}
ROUNDS=${2:-3}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=${BENCH_DIR:-/var/tmp/sluice-store-daemon-bench}
mkdir -p "$W"
cd "$ROOT"
cargo build --release -q -p sluice --bin sluice --example bench_flows
B="$ROOT/target/release/sluice"
"$ROOT/target/release/examples/bench_flows" --rules "$RULES" --masks 16 --emit "$W"
S="$W/s.sock"
one() {
    rm -rf "$W/db" "$W/daemon.log"
    if [ "$1" = db ]; then A="--db $W/db"; else A="--no-db"; fi
    "$B" --socket "$S" run --threads 1 --max-rules $((RULES * 2)) $A 2>"$W/daemon.log" &
    P=$!
    while ! grep -qs listening "$W/daemon.log"; do sleep 0.05; done
    T0=$(date +%s.%N)
    "$B" --socket "$S" flow add --batch "$W/sluice.rules" | tail -1
    T1=$(date +%s.%N)
    echo "wall: $(echo "$T1 - $T0" | bc) s"
    TICK=$(getconf CLK_TCK)
    awk -v t="$TICK" '{printf "daemon cpu: user %.2f s, sys %.2f s\n", $14 / t, $15 / t}' "/proc/$P/stat"
    kill -TERM $P; wait $P || true
    if [ "$1" = db ]; then
        du -sb "$W/db" | awk '{printf "store: %.1f bytes/rule\n", $1 / '"$RULES"'}'
        rm -f "$W/daemon.log"
        "$B" --socket "$S" run --threads 1 --max-rules $((RULES * 2)) --db "$W/db" 2>"$W/daemon.log" &
        P=$!
        T0=$(date +%s.%N)
        while ! grep -qs listening "$W/daemon.log"; do sleep 0.02; done
        T1=$(date +%s.%N)
        echo "restart restoring $RULES rules: $(echo "$T1 - $T0" | bc) s"
        kill -TERM $P; wait $P || true
    fi
}
for i in $(seq "$ROUNDS"); do
    echo "== --no-db"; one nodb
    echo "== --db"; one db
done
rm -rf "$W/db"
