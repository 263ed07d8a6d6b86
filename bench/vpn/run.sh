#!/usr/bin/env bash
# Same-run benchmark of the VPN-style example (examples/sluice-vpn): iperf3 TCP between two
# network namespaces through an IP-over-UDP tunnel, one sluice-vpn instance in each namespace,
#   vpn-on   TUN offloads (TSO in, super-packets out) + Sluice L3 GSO/GRO + UDP_SEGMENT / UDP_GRO
#   vpn-off  the naive tunnel: no offloads anywhere, one send / receive per packet
#   vxlan    the kernel's VXLAN devices over a veth pair (the peer)
# Every system runs over its own veth pair (MTU 1500) with the same inner MTU (1450, VXLAN's
# default). Each round runs every system in turn (alternating, so a slow moment of the shared
# machine hits all of them). Printed per run: Gbit/s and the sender's TCP retransmissions; at
# the end the best of the rounds and the ratios. Byte-for-byte verification of the same paths:
# `cargo test -p sluice-vpn --release -- --nocapture` (examples/sluice-vpn/tests/vpn.rs).
#
# Usage: bench/vpn/run.sh [--seconds N] [--rounds N] [--streams N] [--vpn PATH]   (as root)
set -euo pipefail
SECONDS_PER_RUN=4
ROUNDS=2
STREAMS=1
VPN=${SLUICE_VPN:-}
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --streams) STREAMS=$2; shift 2 ;;
        --vpn) VPN=$2; shift 2 ;;
        -h | --help) sed -n 2,13p "$0"; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "$VPN" ]; then
    (cd "$root" && cargo build --release -q -p sluice-vpn)
    VPN=$root/target/release/sluice-vpn
fi
command -v iperf3 >/dev/null || apt-get install -y -qq iperf3 >/dev/null
ID=$$
NSS=()
PIDS=()
WORK=$(mktemp -d)
cleanup() {
    local f
    for f in "$WORK"/*.pid; do [ -e "$f" ] && PIDS+=("$(cat "$f")"); done
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -f "$WORK"/*.pid
    for n in "${NSS[@]}"; do ip netns del "$n" 2>/dev/null || true; done
}
trap cleanup EXIT
mkns() { ip netns add "$1"; NSS+=("$1"); ip -n "$1" link set lo up; }
# Two namespaces $1a, $1b joined by a veth pair with underlay addresses $2.1 / $2.2.
underlay() {
    mkns "${1}a"; mkns "${1}b"
    ip -n "${1}a" link add "u${1}" type veth peer name "v${1}" netns "${1}b"
    ip -n "${1}a" addr add "$2.1/24" dev "u${1}"
    ip -n "${1}b" addr add "$2.2/24" dev "v${1}"
    ip -n "${1}a" link set "u${1}" up
    ip -n "${1}b" link set "v${1}" up
}
wait_link() {
    for _ in $(seq 100); do ip -n "$1" link show "$2" >/dev/null 2>&1 && return; sleep 0.05; done
    echo "no $2 in $1" >&2; exit 1
}
# sluice-vpn in both namespaces of $1 (underlay $2), inner addresses $3.1 / $3.2, extra args $4.
setup_vpn() {
    local ns=$1 u=$2 inner=$3 extra=$4
    underlay "$ns" "$u"
    ip netns exec "${ns}a" "$VPN" --tun tv0 --bind "$u.1:51820" --peer "$u.2:51820" --mtu 1450 $extra 2>"$WORK/$ns-a.log" &
    PIDS+=($!)
    ip netns exec "${ns}b" "$VPN" --tun tv0 --bind "$u.2:51820" --peer "$u.1:51820" --mtu 1450 $extra 2>"$WORK/$ns-b.log" &
    PIDS+=($!)
    for s in a b; do
        wait_link "${ns}$s" tv0
        local n=1; [ $s = b ] && n=2
        ip -n "${ns}$s" addr add "$inner.$n/24" dev tv0
        ip -n "${ns}$s" link set tv0 mtu 1450 up
    done
    ip netns exec "${ns}b" iperf3 -s -D -p 5201 --pidfile "$WORK/iperf-$ns.pid"
}
setup_vxlan() {
    local ns=$1 u=$2 inner=$3
    underlay "$ns" "$u"
    ip -n "${ns}a" link add vx0 type vxlan id 42 local "$u.1" remote "$u.2" dstport 4789 dev "u${ns}"
    ip -n "${ns}b" link add vx0 type vxlan id 42 local "$u.2" remote "$u.1" dstport 4789 dev "v${ns}"
    ip -n "${ns}a" addr add "$inner.1/24" dev vx0
    ip -n "${ns}b" addr add "$inner.2/24" dev vx0
    ip -n "${ns}a" link set vx0 up
    ip -n "${ns}b" link set vx0 up
    ip netns exec "${ns}b" iperf3 -s -D -p 5201 --pidfile "$WORK/iperf-$ns.pid"
}
ON=von$ID; OFF=vof$ID; VX=vvx$ID
setup_vpn "$ON" 10.96.1 10.96.0 ""
setup_vpn "$OFF" 10.97.1 10.97.0 "--no-offloads"
setup_vxlan "$VX" 10.98.1 10.98.0
declare -A NS=([vpn-on]=$ON [vpn-off]=$OFF [vxlan]=$VX)
declare -A NET=([vpn-on]=10.96.0 [vpn-off]=10.97.0 [vxlan]=10.98.0)
SYSTEMS=(vpn-on vpn-off vxlan)
for s in "${SYSTEMS[@]}"; do  # the path is up before the first timed run
    ip netns exec "${NS[$s]}a" ping -c 1 -W 2 "${NET[$s]}.2" >/dev/null
done
declare -A RESULT
echo "# bench/vpn: $SECONDS_PER_RUN s per run, $ROUNDS rounds, $STREAMS stream(s); $(uname -r), $(nproc) CPUs"
for round in $(seq "$ROUNDS"); do
    for s in "${SYSTEMS[@]}"; do
        json=$(ip netns exec "${NS[$s]}a" iperf3 -c "${NET[$s]}.2" -p 5201 -t "$SECONDS_PER_RUN" -P "$STREAMS" -J)
        read -r g r < <(python3 -c '
import json, sys
e = json.loads(sys.stdin.read())["end"]
print("%.2f %d" % (e["sum_received"]["bits_per_second"] / 1e9, e["sum_sent"].get("retransmits", 0)))' <<<"$json")
        RESULT["$s $round"]="$g $r"
        printf 'round %d  %-8s %6.2f Gbit/s  retransmits %d\n' "$round" "$s" "$g" "$r"
    done
done
best() {
    local b="0 -" r
    for r in $(seq "$ROUNDS"); do
        read -r g _ <<<"${RESULT["$1 $r"]}"
        python3 -c "import sys; sys.exit(0 if $g > ${b%% *} else 1)" && b=${RESULT["$1 $r"]}
    done
    echo "$b"
}
echo
echo "# best of $ROUNDS rounds"
for s in "${SYSTEMS[@]}"; do read -r g r <<<"$(best "$s")"; printf '%-8s %6s Gbit/s  retransmits %s\n' "$s" "$g" "$r"; done
read -r on _ <<<"$(best vpn-on)"; read -r off _ <<<"$(best vpn-off)"; read -r vx _ <<<"$(best vxlan)"
python3 -c "print('vpn-on/vpn-off %.2f   vpn-on/vxlan %.2f' % ($on / max($off, 1e-9), $on / max($vx, 1e-9)))"
cleanup
trap - EXIT
echo
echo "# sluice-vpn counters (offloads on: sender a, receiver b)"
paste "$WORK/$ON-a.log" "$WORK/$ON-b.log" | column -t
rm -rf "$WORK"
