#!/bin/sh
# Builds the DPDK checksum peer benchmark into bench/dpdk/build/cksum_bench.
# Needs Debian's libdpdk-dev (22.11) and pkg-config.
set -eu
cd "$(dirname "$0")"
if ! flags=$(pkg-config --cflags --libs libdpdk 2>/dev/null); then
    echo "build.sh: pkg-config cannot find libdpdk (install libdpdk-dev, or set PKG_CONFIG_PATH)" >&2
    exit 1
fi
mkdir -p build
# -march=native must come AFTER the pkg-config flags: Debian's libdpdk.pc adds -march=corei7,
# the last -march wins, and corei7 (SSE4.2 only) halves rte_raw_cksum's auto-vectorised speed.
# shellcheck disable=SC2086
gcc -O3 -Wall -Wextra cksum_bench.c -o build/cksum_bench $flags -march=native
echo "built $(pwd)/build/cksum_bench ($(pkg-config --modversion libdpdk))"
# A copy without AVX-512 for valgrind/callgrind, which cannot execute AVX-512 instructions.
# shellcheck disable=SC2086
gcc -O3 -Wall -Wextra cksum_bench.c -o build/cksum_bench_avx2 $flags -march=native -mno-avx512f
# As Debian ships it: the pkg-config flags alone (their -march=corei7 last), the build a program
# compiled against libdpdk-dev with `pkg-config --cflags` gets; the like-for-like peer of Sluice's
# portable build (what `cargo build` gives).
# shellcheck disable=SC2086
gcc -O3 -Wall -Wextra cksum_bench.c -o build/cksum_bench_pkg $flags
