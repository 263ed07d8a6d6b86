#!/usr/bin/env bash
# Does an AF_PACKET transmit ring (TPACKET_V2, PACKET_TX_RING) save the kernel's copy of a frame
# sent into a veth, as it would if the skb pointed into the ring? (issue 15, item 4)
#
# For each GRO setting of the receiving veth end (GRO on gives the veth a NAPI receive path, as
# on Sluice's hop ports), one frame of 3 000 bytes is put in the ring and sent; right after
# send() the probe reads the frame's status, writes other bytes over the frame in the ring, and
# only then reads the frame on the peer's packet socket. If the peer sees the new bytes, the
# kernel's skb still pointed into the ring (no copy, but the frame was handed back too early);
# if it sees the bytes sent, the kernel copied them before handing the frame back.
#
# Usage: sudo bench/ports/txring_probe.sh        (needs python3, ethtool, ip; makes one netns)
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
NS=sltxr$$
trap 'ip netns del "$NS" 2>/dev/null || true' EXIT
ip netns add "$NS"
ip -n "$NS" link add va mtu 9000 type veth peer name vb mtu 9000
ip -n "$NS" link set va up
ip -n "$NS" link set vb up
for gro in off on; do
    ip netns exec "$NS" ethtool -K vb gro "$gro" >/dev/null
    printf 'receiving end gro %-3s: ' "$gro"
    ip netns exec "$NS" python3 - va vb <<'PY'
import mmap, socket, struct, sys
SOL_PACKET, PACKET_VERSION, PACKET_TX_RING, TPACKET_V2 = 263, 10, 13, 1
DATA = 32  # TPACKET2_HDRLEN - sizeof(struct sockaddr_ll): where a V2 frame's bytes start
a, b = sys.argv[1], sys.argv[2]
rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
rx.bind((b, 0))
tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
tx.bind((a, 0))
tx.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V2)
BLOCK, FRAME = 1 << 16, 1 << 13
tx.setsockopt(SOL_PACKET, PACKET_TX_RING, struct.pack("IIII", BLOCK, 1, FRAME, BLOCK // FRAME))
ring = mmap.mmap(tx.fileno(), BLOCK, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
while True:  # what b received so far (IPv6 neighbour traffic)
    try:
        rx.recv(65536, socket.MSG_DONTWAIT)
    except BlockingIOError:
        break
eth = bytes.fromhex("020000000002" "020000000001" "88b5")  # local experimental EtherType
frame = eth + b"A" * 3000
ring[DATA:DATA + len(frame)] = frame
struct.pack_into("II", ring, 0, 1, len(frame))  # tp_status = TP_STATUS_SEND_REQUEST, tp_len
tx.send(b"", socket.MSG_DONTWAIT)
status = struct.unpack_from("I", ring, 0)[0]
ring[DATA + 14:DATA + len(frame)] = b"Z" * 3000
got = b""
for _ in range(100):
    try:
        d = rx.recv(65536, socket.MSG_DONTWAIT)
    except BlockingIOError:
        import time
        time.sleep(0.01)
        continue
    if d[12:14] == eth[12:14]:
        got = d
        break
seen = {b"A": "the bytes sent (the kernel copied them)",
        b"Z": "the bytes written after send() (the skb pointed into the ring)"}.get(got[14:15], "nothing")
state = "handed back (TP_STATUS_AVAILABLE)" if status == 0 else f"still held (status {status})"
print(f"frame {state} when send() returned; the peer read {seen}")
PY
done
