#!/bin/sh
# Sluice GSO vs DPDK rte_gso_segment, same run: builds the DPDK peer (bench/dpdk/build/gso_bench)
# and the Sluice benchmark (crates/sluice-offload/benches/gso.rs), runs them alternately ROUNDS
# times (default 7; each run reports the median of 9 timing rounds), prints every line, then the
# median segments/s of each measurement and the median of the per-round ratios:
#   zero-copy, checksums left partial      sluice_zc_partial / dpdk_gso
#   full software checksums                 sluice_zc_full    / dpdk_gso_cksum
# See docs/bench/gso.md.
set -eu
cd "$(dirname "$0")"
ROUNDS=${1:-7}
if ! flags=$(pkg-config --cflags --libs libdpdk 2>/dev/null); then
    echo "gso_bench.sh: pkg-config cannot find libdpdk (install libdpdk-dev)" >&2
    exit 1
fi
mkdir -p build
# -march=native AFTER the pkg-config flags (Debian's libdpdk.pc adds -march=corei7).
# shellcheck disable=SC2086
gcc -O3 -Wall -Wextra gso_bench.c -o build/gso_bench $flags -march=native
cd ../..
cargo bench -p sluice-offload --bench gso --no-run
out=$(mktemp)
trap 'rm -f "$out"' EXIT
i=0
while [ "$i" -lt "$ROUNDS" ]; do
    bench/dpdk/build/gso_bench 9 | grep -v '^check' | sed "s/^/$i /" | tee -a "$out"
    cargo bench -q -p sluice-offload --bench gso -- 9 | sed "s/^/$i /" | tee -a "$out"
    i=$((i + 1))
done
python3 - "$out" <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = {}
for r, name, segs, ns, sps in rows:
    by.setdefault(name, {})[int(r)] = float(sps)
print("\nmedian segments/s over %d rounds:" % len(by.get("dpdk_gso", {})))
for name, v in by.items():
    print("  %-20s %12.0f" % (name, statistics.median(v.values())))
for ours, theirs in (("sluice_zc_partial", "dpdk_gso"), ("sluice_zc_full", "dpdk_gso_cksum"),
                     ("sluice_contig_full", "dpdk_gso_cksum")):
    ratios = [by[ours][r] / by[theirs][r] for r in by[ours] if r in by[theirs]]
    print("  %s / %s: median ratio %.2f (min %.2f, max %.2f)" % (
        ours, theirs, statistics.median(ratios), min(ratios), max(ratios)))
PY
