#!/bin/sh
# Instructions per segment of Sluice's GRO benchmark workloads (crates/sluice-offload/benches/gro.rs),
# counted by callgrind: the stable signal on a shared, noisy machine. Each workload runs twice
# untimed (`profile MODE FLOWS BURSTS`) with LO and HI bursts of 32 segments; the difference of
# the two instruction totals divided by 32 * (HI - LO) is the cost per segment with setup and
# first-use allocations cancelled out.
#
# DPDK's side: bench/dpdk/gro_bench.c built for valgrind (-march=haswell: valgrind 3.19 cannot
# decode AVX-512; the GRO library is Debian's generic build either way) and run as
# `gro_bench profile FLOWS BURSTS`, counting rte_gro_reassemble_burst and what it calls
# (--toggle-collect), split into the memset of its per-call tables and the rest. callgrind
# counts a `rep stosb` memset per byte-ish iteration, which real hardware does far faster, so
# "without memset" is the fairer instruction comparison; wall-clock comparisons are
# gro_bench.sh's.
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

if flags=$(pkg-config --cflags --libs libdpdk 2>/dev/null); then
    mkdir -p "$here/build"
    # shellcheck disable=SC2086
    gcc -O3 -Wall -Wextra "$here/gro_bench.c" -o "$here/build/gro_bench_vg" $flags -march=haswell
    dpdk_ir() {
        out=$(mktemp)
        valgrind --tool=callgrind --callgrind-out-file="$out" \
            --toggle-collect=rte_gro_reassemble_burst \
            "$here/build/gro_bench_vg" profile "$1" "$2" >/dev/null 2>&1
        total=$(callgrind_annotate "$out" 2>/dev/null | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
        memset=$(callgrind_annotate "$out" 2>/dev/null | grep -i 'memset' | sed -n 's/^ *\([0-9,]*\) .*/\1/p' | tr -d , |
            awk '{ s += $1 } END { print s + 0 }')
        rm -f "$out"
        echo "$total $memset"
    }
    echo
    echo "DPDK rte_gro_reassemble_burst, instructions per segment (callgrind, same bursts)"
    echo "flows  inclusive  of_which_memset  without_memset"
    for flows in 1 4 64; do
        set -- $(dpdk_ir "$flows" "$lo")
        a=$1 am=$2
        set -- $(dpdk_ir "$flows" "$hi")
        b=$1 bm=$2
        awk -v f="$flows" -v a="$a" -v b="$b" -v am="$am" -v bm="$bm" -v n=$((32 * (hi - lo))) \
            'BEGIN { printf "%5d  %9.1f  %15.1f  %14.1f\n", f, (b - a) / n, (bm - am) / n, ((b - bm) - (a - am)) / n }'
    done
else
    echo "(pkg-config cannot find libdpdk: DPDK's counts skipped; install libdpdk-dev)"
fi
