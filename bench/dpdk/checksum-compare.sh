#!/bin/sh
# Same-run comparison of Sluice's checksum `sum` with DPDK's rte_raw_cksum.
#
# Builds the DPDK harness twice (C, gcc -O3): bench/dpdk/build/cksum_bench with -march=native,
# and build/cksum_bench_pkg with libdpdk's pkg-config flags alone (Debian's -march=corei7: DPDK as
# a program built against the package gets it), and the Rust example `cksum_bench` twice (cargo
# --release): the portable build (runtime dispatch, what `cargo build` gives) and one with `-C
# target-cpu=native` (the same code generation flags as the native DPDK harness: the short-input
# path is then inlined AVX-512 where the CPU has it; target/native). Like for like: the portable
# build against DPDK as packaged, the native build against DPDK built native. Runs the four
# alternately PAIRS times (default 4: each goes first equally often when PAIRS is a multiple of
# 4) with ROUNDS timing rounds each (default 15), checks all
# computed the same sum, and prints the median over runs of each program's per-run median:
#
#   size  sluice GB/s  native  avx2  scalar  dpdk GB/s  dpdk packaged  sluice/dpdk
#   sluice/packaged  native/dpdk  memcpy (C, Rust)
#
# Usage: bench/dpdk/checksum-compare.sh [PAIRS [ROUNDS]]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
pairs=${1:-4}
rounds=${2:-15}

"$here/build.sh" >&2
(cd "$root" && cargo build --release -q -p sluice-checksum --example cksum_bench) >&2
# (cargo's fingerprint keeps the flag's text, not the CPU it resolved to: remove target/native
# after moving the tree to another machine.)
(cd "$root" && RUSTFLAGS="${RUSTFLAGS:-} -C target-cpu=native" CARGO_TARGET_DIR="$root/target/native" \
    cargo build --release -q -p sluice-checksum --example cksum_bench) >&2
rust_bin="$root/target/release/examples/cksum_bench"
native_bin="$root/target/native/release/examples/cksum_bench"
c_bin="$here/build/cksum_bench"
pkg_bin="$here/build/cksum_bench_pkg"

out=$(mktemp)
trap 'rm -f "$out"' EXIT
run_rust() { "$rust_bin" "$rounds" | sed 's/^memcpy /memcpy-rust /' >>"$out"; }
run_native() { "$native_bin" "$rounds" | grep -E '^(sluice|check) ' | sed 's/^sluice /native /' >>"$out"; }
run_c() { "$c_bin" "$rounds" >>"$out"; }
run_pkg() { "$pkg_bin" "$rounds" | grep -E '^(dpdk|check) ' | sed 's/^dpdk /dpdk-pkg /' >>"$out"; }
i=0
while [ "$i" -lt "$pairs" ]; do
    # Rotate which goes first so slow drift on a shared machine hits all four alike.
    case $((i % 4)) in
    0) run_rust; run_native; run_c; run_pkg ;;
    1) run_native; run_c; run_pkg; run_rust ;;
    2) run_c; run_pkg; run_rust; run_native ;;
    *) run_pkg; run_rust; run_native; run_c ;;
    esac
    i=$((i + 1))
done
# A binary that died mid-pipe (SIGILL from a stale native build, say) leaves no lines: refuse.
for prog in sluice native dpdk dpdk-pkg; do
    if ! grep -q "^$prog " "$out"; then
        echo "checksum-compare: no results from $prog" >&2
        exit 1
    fi
done

# Every "check" line for a size must carry the same sum (Rust and C, every run).
if [ "$(awk '$1 == "check" { print $2, $3 }' "$out" | sort -u | awk '{ print $1 }' | uniq -d)" ]; then
    echo "checksum-compare: Sluice and DPDK disagree on a sum:" >&2
    grep '^check' "$out" | sort -u >&2
    exit 1
fi

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $pairs runs x $rounds rounds each"
awk '
function median(key,    n, i, j, t, a) {
    n = split(vals[key], a, " ")
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
    if (n == 0) return 0
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
$1 != "check" { vals[$1 " " $2] = vals[$1 " " $2] " " $4; sizes[$2] = 1 }
END {
    printf "| size (B) | sluice GB/s | sluice native | sluice avx2 | sluice scalar | dpdk GB/s | dpdk packaged | sluice/dpdk | sluice/packaged | native/dpdk | memcpy GB/s (C) | memcpy GB/s (Rust) |\n"
    printf "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    n = 0; for (s in sizes) list[++n] = s + 0
    for (i = 2; i <= n; i++) { t = list[i]; for (j = i - 1; j >= 1 && list[j] > t; j--) list[j + 1] = list[j]; list[j + 1] = t }
    for (i = 1; i <= n; i++) {
        s = list[i]
        sl = median("sluice " s); nt = median("native " s); d = median("dpdk " s); dp = median("dpdk-pkg " s)
        printf "| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2fx | %.2fx | %.2fx | %.1f | %.1f |\n", s, sl, nt, median("sluice-avx2 " s), median("sluice-scalar " s), d, dp, (d > 0 ? sl / d : 0), (dp > 0 ? sl / dp : 0), (d > 0 ? nt / d : 0), median("memcpy " s), median("memcpy-rust " s)
    }
}' "$out"
echo
echo "range over the runs (min-max GB/s):"
awk '$1 != "check" { k = $1 " " $2; v = $4 + 0; if (!(k in lo) || v < lo[k]) lo[k] = v; if (!(k in hi) || v > hi[k]) hi[k] = v }
END { for (k in lo) if (k ~ /^(sluice|native|dpdk|dpdk-pkg) /) printf "  %-14s %6.1f-%.1f\n", k, lo[k], hi[k] }' "$out" | sort -k2n -k1,1
