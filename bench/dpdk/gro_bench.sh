#!/bin/sh
# Builds the DPDK GRO peer (bench/dpdk/build/gro_bench) and the Sluice GRO benchmark, then runs
# them alternately PAIRS times (default 3) in the same run, prints every line, and a summary:
# the median over runs of each measurement and the ratios Sluice/DPDK (segments/s); see
# docs/bench/gro.md for how the numbers are read.
#
# Usage: bench/dpdk/gro_bench.sh [PAIRS [ROUNDS]]
#   SLUICE_GRO_BENCH=PATH  use this prebuilt Sluice bench binary instead of building one (to
#                          compare a saved "before" build with the current code in one sitting)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
pairs=${1:-3}
rounds=${2:-9}
if ! flags=$(pkg-config --cflags --libs libdpdk 2>/dev/null); then
    echo "gro_bench.sh: pkg-config cannot find libdpdk (install libdpdk-dev)" >&2
    exit 1
fi
mkdir -p "$here/build"
# -march=native AFTER the pkg-config flags (Debian's libdpdk.pc adds -march=corei7).
# shellcheck disable=SC2086
gcc -O3 -Wall -Wextra "$here/gro_bench.c" -o "$here/build/gro_bench" $flags -march=native
if [ -z "${SLUICE_GRO_BENCH:-}" ]; then
    (cd "$root" && cargo bench -q -p sluice-offload --bench gro --no-run) >/dev/null 2>&1
fi
sluice() {
    if [ -n "${SLUICE_GRO_BENCH:-}" ]; then
        "$SLUICE_GRO_BENCH" "$1" 2>/dev/null
    else
        (cd "$root" && cargo bench -q -p sluice-offload --bench gro -- "$1" 2>/dev/null)
    fi
}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
i=0
while [ "$i" -lt "$pairs" ]; do
    # Alternate which goes first so drift on a shared machine hits both equally.
    if [ $((i % 2)) -eq 0 ]; then
        "$here/build/gro_bench" "$rounds" | tee -a "$out"
        sluice "$rounds" | tee -a "$out"
    else
        sluice "$rounds" | tee -a "$out"
        "$here/build/gro_bench" "$rounds" | tee -a "$out"
    fi
    i=$((i + 1))
done
# Both sides must agree on how many packets a burst becomes.
if [ "$(awk '$1 == "check" { print $2, $3 }' "$out" | sort -u | awk '{ print $1 }' | uniq -d)" ]; then
    echo "gro_bench.sh: Sluice and DPDK disagree on the packets per burst" >&2
    exit 1
fi
echo
echo "median over $pairs runs (segments/s in millions; ratio = Sluice / DPDK GRO call alone, / DPDK whole iteration)"
echo "flows  dpdk_gro  dpdk_gross  copy_good  copy_verify  burst_good  burst_verify  copy_good/gro  burst_good/gro  burst_verify/gro"
for flows in 1 4 64; do
    awk -v f="$flows" '
        $2 == f && $1 != "check" { v[$1] = v[$1] " " $4 }
        function med(s,   a, n, i, j, t) {
            n = split(s, a, " ")
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
            return a[int((n + 1) / 2)] / 1e6
        }
        END {
            g = med(v["dpdk_gro"]); gg = med(v["dpdk_gro_gross"])
            s = med(v["sluice_gro_good"]); sv = med(v["sluice_gro_verify"])
            b = med(v["sluice_burst_good"]); bv = med(v["sluice_burst_verify"])
            printf "%5d  %8.2f  %10.2f  %9.2f  %11.2f  %10.2f  %12.2f  %13.2f  %14.2f  %16.2f\n", f, g, gg, s, sv, b, bv, s / g, b / g, bv / g
        }' "$out"
done
