#!/usr/bin/env bash
# Builds first_touch.c and runs it three times for each of: 1 and 2 threads, 4 KiB pages and
# transparent huge pages asked for (MADV_HUGEPAGE; the system setting must be `madvise` or
# `always`). The figure the in-process insert goal is held against: at 100x OVS bundle
# (~120-150k rules/s here) a 1M-rule insert has 66-83 ms, and it touches MIB (default 174) of
# fresh memory.
#
#   bench/flows/first_touch.sh [MIB]
set -euo pipefail
MIB=${1:-174}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$(mktemp /tmp/sluice-first-touch.XXXXXX)
trap 'rm -f "$BIN"' EXIT
cc -O2 -pthread "$HERE/first_touch.c" -o "$BIN"
echo "# transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
for _ in 1 2 3; do
    for t in 1 2; do
        "$BIN" "$MIB" "$t"
        "$BIN" "$MIB" "$t" huge
    done
done
