#!/usr/bin/env python3
"""Writes 64 KiB super-frame seeds for the `gso` and `virtio_tx` targets (too big to commit):

    python3 fuzz/seeds/big_frames.py fuzz/corpus/gso-big fuzz/corpus/virtio_tx-big

then pass each directory after the target's corpus (`docs/fuzz.md`). Needs scapy.
"""
import struct
import sys
from pathlib import Path

from scapy.all import IP, TCP, UDP, Ether, IPv6, Raw  # noqa: E402


def frames():
    # The largest IP packets: 65535 bytes of IPv4, a 65535-byte IPv6 payload.
    yield "tcp4", 1, Ether() / IP(dst="10.0.0.2") / TCP(flags="A") / Raw(b"\x5a" * (65535 - 40))
    yield "tcp6", 2, Ether() / IPv6(dst="fd00::2") / TCP(flags="A") / Raw(b"\x5a" * (65535 - 20))
    yield "udp4", 3, Ether() / IP(dst="10.0.0.2") / UDP(dport=9) / Raw(b"\x5a" * (65535 - 28))


def main():
    gso_dir, vio_dir = (Path(d) for d in sys.argv[1:3])
    gso_dir.mkdir(parents=True, exist_ok=True)
    vio_dir.mkdir(parents=True, exist_ok=True)
    for name, ty, pkt in frames():
        frame = bytes(pkt)
        l3 = 14
        l4 = l3 + (20 if pkt.haslayer(IP) else 40)
        hdr_len = l4 + (20 if pkt.haslayer(TCP) else 8)
        # gso: type, segment size 1448 (BE), 64 segments, frame limit 65535 (BE).
        (gso_dir / f"{name}.bin").write_bytes(bytes([ty]) + struct.pack(">HBH", 1448, 64, 0xFFFF) + frame)
        # virtio_tx: format v0, every feature, MTU 1500, no envelope, then a v0 header
        # (NEEDS_CSUM, GSO TCPV4=1 / TCPV6=4 / UDP_L4=5) padded to 24 bytes.
        gso_type = {1: 1, 2: 4, 3: 5}[ty]
        csum_off = 16 if pkt.haslayer(TCP) else 6
        hdr = struct.pack("<BBHHHH", 1, gso_type, hdr_len, 1448, l4, csum_off).ljust(24, b"\0")
        head = bytes([0]) + struct.pack("<I", 0x0FFFFFFF) + struct.pack("<H", 1500) + bytes([0])
        (vio_dir / f"{name}.bin").write_bytes(head + hdr + frame)


if __name__ == "__main__":
    main()
