#!/usr/bin/env python3
"""Writes seeds for the `datapath` target: UDP-GSO frames of VXLAN datagrams (what a hop's
sending side packs, see docs/ports.md) arriving on a GRO port, which the datapath splits in
place before GRO:

    python3 fuzz/seeds/datapath_uso.py fuzz/seeds/datapath

Input layout (fuzz/fuzz_targets/datapath.rs): byte 0 the action list, byte 1 bit 0 GRO on
port `a`, bytes 2-5 port `b`'s features, bytes 6-7 its MTU, then records of
[len: 2 bytes LE][12-byte virtio_net_hdr v1][frame]. Needs scapy.
"""
import struct
import sys
from pathlib import Path

from scapy.all import IP, TCP, UDP, VXLAN, Ether, Raw  # noqa: E402

NEEDS_CSUM, GSO_UDP_L4 = 1, 5
DECAP, ENCAP_VXLAN = 8, 4  # indexes into the target's ACTIONS


def inner(sport, seq, n):
    pkt = (Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
           / IP(src="10.1.0.1", dst="10.1.0.2", id=seq & 0xFFFF)
           / TCP(sport=sport, dport=5201, seq=seq, flags="A")
           / Raw(bytes((seq + i) & 0xFF for i in range(n))))
    return bytes(VXLAN(vni=42) / pkt)


def packed(units):
    """One UDP-GSO frame: the outer headers once, then each datagram's UDP payload."""
    size = len(units[0])
    body = b"".join(units)
    outer = (Ether(src="02:00:00:00:00:0a", dst="02:00:00:00:00:0b")
             / IP(src="198.51.100.1", dst="198.51.100.2", flags="DF")
             / UDP(sport=49152, dport=4789, chksum=0))
    frame = bytearray(bytes(outer / Raw(body)))
    # The outer UDP checksum left to the device: the pseudo-header sum in the field.
    src, dst = bytes(frame[26:30]), bytes(frame[30:34])
    ulen = len(frame) - 34
    words = struct.unpack("!4H", src + dst) + (17, ulen)
    s = sum(words)
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    frame[40:42] = struct.pack("!H", s)
    hdr = struct.pack("<BBHHHHH", NEEDS_CSUM, GSO_UDP_L4, 42, size, 34, 6, 0)
    return hdr, bytes(frame)


def record(hdr, frame):
    return struct.pack("<H", len(frame)) + hdr + frame


def seed(action, records):
    head = bytes([action, 1]) + struct.pack("<I", 0x0FFFFFFF) + struct.pack("<H", 1500)
    return head + b"".join(record(h, f) for h, f in records)


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    n = 200
    one_flow = [inner(40000, 1 + k * n, n) for k in range(5)]
    two_flows = [inner(40000 + (k & 1), 1 + (k // 2) * n, n) for k in range(6)]
    short_last = one_flow[:3] + [inner(40000, 1 + 3 * n, n // 2)]
    seeds = {
        "uso-vxlan-one-flow": seed(DECAP, [packed(one_flow)]),
        "uso-vxlan-two-flows": seed(DECAP, [packed(two_flows), packed(one_flow)]),
        "uso-vxlan-short-last": seed(DECAP, [packed(short_last)]),
        "uso-vxlan-reencap": seed(ENCAP_VXLAN, [packed(one_flow)]),
    }
    for name, data in seeds.items():
        (out / name).write_bytes(data)


if __name__ == "__main__":
    main()
