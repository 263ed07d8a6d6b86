#!/bin/sh
# Instructions per super-packet of Sluice's GSO benchmark (crates/sluice-offload/benches/gso.rs),
# counted by callgrind: the stable signal on a shared, noisy machine. Each measurement runs alone
# (GSO_BENCH_ONLY) with one timing round and two rounds; the difference of the two instruction
# totals divided by the 20 000 calls of one round is the cost of one call (64 000 payload bytes,
# MSS 1448: 45 segments) with setup and warm-up cancelled out.
#
# Usage: bench/dpdk/gso_callgrind.sh [BENCH_BINARY]   (default: builds and uses the gso bench)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ $# -ge 1 ]; then
    bin=$1
else
    bin=$(cd "$root" && cargo bench -q -p sluice-offload --bench gso --no-run --message-format=json 2>/dev/null |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
fi
[ -x "$bin" ] || { echo "gso_callgrind.sh: no bench binary ($bin)" >&2; exit 1; }
ir() {
    GSO_BENCH_ONLY=$1 valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$2" 2>&1 |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
echo "measurement          instructions per super-packet (45 segments)"
for name in sluice_zc_partial sluice_zc_full sluice_contig_full; do
    a=$(ir "$name" 1)
    b=$(ir "$name" 2)
    awk -v n="$name" -v a="$a" -v b="$b" 'BEGIN { printf "%-20s %9.1f\n", n, (b - a) / 20000 }'
done
