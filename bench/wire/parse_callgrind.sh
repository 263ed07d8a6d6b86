#!/bin/sh
# Instructions per frame of the parse benchmark (crates/sluice-wire/benches/parse.rs), counted by
# callgrind. Each frame is parsed LO and HI times untimed (`profile NAME ITERS`); the difference of
# the two instruction totals divided by (HI - LO) is the cost of one parse with setup cancelled
# (`mix8` parses all eight frames per iteration and is reported per frame).
#
# Usage: bench/wire/parse_callgrind.sh [BENCH_BINARY]   (default: builds and uses the parse bench)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
lo=1000
hi=11000
if [ $# -ge 1 ]; then
    bin=$1
else
    bin=$(cd "$root" && cargo bench -q -p sluice-wire --bench parse --no-run --message-format=json 2>/dev/null |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
fi
[ -x "$bin" ] || { echo "parse_callgrind.sh: no bench binary ($bin)" >&2; exit 1; }
ir() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" profile "$1" "$2" 2>&1 |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
echo "frame       instructions per parse"
for name in tcp4 tcp6 qinq_tcp4 vxlan_tcp geneve gre udp4 ipv6_ext mix8; do
    a=$(ir "$name" "$lo")
    b=$(ir "$name" "$hi")
    frames=1
    [ "$name" = mix8 ] && frames=8
    awk -v n="$name" -v a="$a" -v b="$b" -v k=$(((hi - lo) * frames)) 'BEGIN { printf "%-10s %8.1f\n", n, (b - a) / k }'
done
