#!/bin/sh
# Instructions per operation of the parse and GSO benchmarks, counted by callgrind: the stable
# signal on a shared, noisy machine. Each measurement runs twice, short and long, untimed; the
# difference of the two instruction totals divided by the difference in operations is the cost
# of one operation with setup and warm-up cancelled out.
#
# - parse: crates/sluice-wire/benches/parse.rs (`profile NAME ITERS`), each frame parsed 1 000
#   and 11 000 times; `mix8` parses all eight frames per iteration and is reported per frame.
# - gso: crates/sluice-offload/benches/gso.rs (GSO_BENCH_ONLY=NAME, 1 and 2 timing rounds of
#   20 000 calls): instructions per 64 000-byte super-packet (MSS 1448, 45 segments).
# - gro: crates/sluice-offload/benches/gro.rs (`profile MODE FLOWS BURSTS`, 100 and 600 bursts
#   of 32 segments): instructions per segment, 1 and 4 flows.
# - datapath: crates/sluice-datapath/benches/datapath.rs (`profile SCENARIO POLLS`, 128 and 1 152
#   polls): instructions per received packet of the whole datapath loop with in-memory ports
#   (small: 64 UDP flows through 9 rules; many: 8 192 flows, mostly exact-match cache misses;
#   tcp_gso: GRO then software GSO; tcp_vlan: GRO, push_vlan, TSO egress; tso_vlan: TSO
#   super-frames through a GRO port, push_vlan, TSO egress, per super-frame; vxlan_rx: packed
#   UDP-GSO frames of VXLAN datagrams split, merged, decapsulated, per packed frame; vxlan_tx:
#   super-frames encapsulated, segmented and packed as UDP-GSO frames, per super-frame).
#
# Usage: bench/callgrind_counts.sh parse|gso|gro|datapath [BENCH_BINARY]   (default: builds the bench)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
what=${1:?usage: callgrind_counts.sh parse|gso|gro|datapath [BENCH_BINARY]}
case $what in
parse) package=sluice-wire ;;
gso | gro) package=sluice-offload ;;
datapath) package=sluice-datapath ;;
*) echo "callgrind_counts.sh: parse, gso, gro or datapath, not $what" >&2; exit 2 ;;
esac
if [ $# -ge 2 ]; then
    bin=$2
else
    bin=$(cd "$root" && cargo bench -q -p "$package" --bench "$what" --no-run --message-format=json 2>/dev/null |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
fi
[ -x "$bin" ] || { echo "callgrind_counts.sh: no bench binary ($bin)" >&2; exit 1; }
collected() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
per_op() {
    awk -v n="$1" -v a="$2" -v b="$3" -v k="$4" 'BEGIN { printf "%-20s %9.1f\n", n, (b - a) / k }'
}
if [ "$what" = parse ]; then
    echo "frame                instructions per parse"
    for name in tcp4 tcp6 qinq_tcp4 vxlan_tcp geneve gre udp4 ipv6_ext mix8; do
        frames=1
        [ "$name" = mix8 ] && frames=8
        per_op "$name" "$(collected "$bin" profile "$name" 1000)" \
            "$(collected "$bin" profile "$name" 11000)" $((10000 * frames))
    done
elif [ "$what" = gro ]; then
    echo "measurement          instructions per segment"
    for mode in sluice_gro_good sluice_burst_good sluice_gro_verify; do
        for flows in 1 4; do
            per_op "$mode/$flows" "$(collected "$bin" profile "$mode" "$flows" 100)" \
                "$(collected "$bin" profile "$mode" "$flows" 600)" 16000
        done
    done
elif [ "$what" = datapath ]; then
    echo "scenario             instructions per received packet"
    for name in small many tcp_gso tcp_vlan tso_vlan vxlan_rx vxlan_tx; do
        per_poll=44
        case $name in small | many) per_poll=64 ;; tso_vlan | vxlan_tx) per_poll=4 ;; vxlan_rx) per_poll=2 ;; esac
        per_op "$name" "$(collected "$bin" profile "$name" 128)" \
            "$(collected "$bin" profile "$name" 1152)" $((1024 * per_poll))
    done
else
    echo "measurement          instructions per super-packet (45 segments)"
    for name in sluice_zc_partial sluice_zc_full sluice_contig_full; do
        per_op "$name" "$(GSO_BENCH_ONLY=$name collected "$bin" 1)" \
            "$(GSO_BENCH_ONLY=$name collected "$bin" 2)" 20000
    done
fi
