#!/bin/sh
# Instructions per segment of Sluice's GRO benchmark workloads (crates/sluice-offload/benches/gro.rs),
# counted by callgrind: the stable signal on a shared, noisy machine. Each workload runs twice
# untimed (`profile MODE FLOWS BURSTS`) with LO and HI bursts of 32 segments; the difference of
# the two instruction totals divided by 32 * (HI - LO) is the cost per segment with setup and
# first-use allocations cancelled out.
#
# Usage: bench/dpdk/gro_callgrind.sh [BENCH_BINARY]   (default: builds and uses the gro bench)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
lo=100
hi=600
if [ $# -ge 1 ]; then
    bin=$1
else
    bin=$(cd "$root" && cargo bench -q -p sluice-offload --bench gro --no-run --message-format=json 2>/dev/null |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
fi
[ -x "$bin" ] || { echo "gro_callgrind.sh: no bench binary ($bin)" >&2; exit 1; }
ir() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" profile "$1" "$2" "$3" 2>&1 |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
echo "instructions per segment (callgrind, ($hi - $lo) bursts of 32)"
echo "flows  copy_good  copy_verify  burst_good  burst_verify"
for flows in 1 4 64; do
    line=$(printf '%5d' "$flows")
    for mode in sluice_gro_good sluice_gro_verify sluice_burst_good sluice_burst_verify; do
        a=$(ir "$mode" "$flows" "$lo")
        b=$(ir "$mode" "$flows" "$hi")
        line="$line  $(awk -v a="$a" -v b="$b" -v n=$((32 * (hi - lo))) 'BEGIN { printf "%10.1f", (b - a) / n }')"
    done
    echo "$line"
done
