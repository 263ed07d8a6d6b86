#!/usr/bin/env python3
"""Independent generator of the SCTP GSO vectors in tests/gso_sctp.rs (no Sluice code).

The expected segments follow Linux's code, read from net/sctp/output.c (sctp_packet_pack: chunks
packed greedily into packets of at most pathmtu = IP header + 12-byte common header + chunks
padded to 4), net/sctp/offload.c (sctp_gso_segment: skb_segment at the frag-list boundaries,
then sctp_compute_cksum per segment, stored little-endian), net/ipv4/af_inet.c
(inet_gso_segment: tot_len, id++ per segment, ip_send_check) and net/ipv6/ip6_offload.c
(ipv6_gso_segment: payload_len). The kernel here has no SCTP (CONFIG_IP_SCTP unset), so it
cannot be run as an oracle. Run: python3 sctp_gso_vectors.py > vectors.txt
"""


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def ip_csum(h):
    s = sum((h[i] << 8) | h[i + 1] for i in range(0, len(h), 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def chunk(ctype, flags, length, seed):
    body = bytes(((i * 7 + seed) & 0xFF) for i in range(length - 4))
    c = bytes([ctype, flags]) + length.to_bytes(2, "big") + body
    return c + bytes((-len(c)) % 4)


def common(crc=b"\0\0\0\0"):
    return bytes([0x13, 0x88, 0x0B, 0xB8, 0xDE, 0xAD, 0xBE, 0xEF]) + crc


def eth(ethertype, vlan=None):
    h = bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1])
    if vlan is not None:
        h += bytes([0x81, 0x00]) + vlan.to_bytes(2, "big")
    return h + ethertype.to_bytes(2, "big")


def ipv4(payload_len, ident, csum=True):
    h = bytearray([0x45, 0x02]) + (20 + payload_len).to_bytes(2, "big")
    h += ident.to_bytes(2, "big") + bytes([0x40, 0, 64, 132, 0, 0])
    h += bytes([192, 0, 2, 1, 198, 51, 100, 7])
    if csum:
        h[10:12] = ip_csum(bytes(h)).to_bytes(2, "big")
    return bytes(h)


def ipv6(payload_len):
    h = bytes([0x60, 0x00, 0x00, 0x00]) + payload_len.to_bytes(2, "big") + bytes([132, 64])
    h += bytes.fromhex("20010db8000000000000000000000001")
    h += bytes.fromhex("20010db8000000000000000000000002")
    return h


def sctp_packet(chunks):
    body = common() + b"".join(chunks)
    crc = crc32c(body).to_bytes(4, "little")
    return common(crc) + b"".join(chunks)


def groups(chunks, room):
    out, cur, size = [], [], 0
    for c in chunks:
        assert len(c) <= room
        if size + len(c) > room:
            out.append(cur)
            cur, size = [], 0
        cur.append(c)
        size += len(c)
    out.append(cur)
    return out


def case(name, l2, v4, mtu, chunks, ident=0x1234):
    overhead = (20 if v4 else 40) + 12
    whole = b"".join(chunks)
    # The GSO packet as the kernel's SCTP socket hands it down: lengths of the whole, CRC zero
    # (left to the device or to sctp_gso_segment).
    l3 = ipv4(12 + len(whole), ident) if v4 else ipv6(12 + len(whole))
    inp = l2 + l3 + common() + whole
    segs = []
    for i, g in enumerate(groups(chunks, mtu - overhead)):
        s = sctp_packet(g)
        l3 = ipv4(len(s), (ident + i) & 0xFFFF) if v4 else ipv6(len(s))
        segs.append(l2 + l3 + s)
    print(f"// {name}: mtu {mtu}, {len(segs)} segments")
    print(f'const {name}_IN: &str = "{inp.hex()}";')
    print(f"const {name}_OUT: &[&str] = &[")
    for s in segs:
        print(f'    "{s.hex()}",')
    print("];")


# IPv4, room 600 - 32 = 568: [SACK 16, DATA 100, DATA 203 (+1 pad)] [DATA 400, DATA 52]
# [DATA 500, DATA 17 (+3 pad)].
v4_chunks = [
    chunk(3, 0, 16, 1),
    chunk(0, 3, 100, 2),
    chunk(0, 3, 203, 3),
    chunk(0, 3, 400, 4),
    chunk(0, 3, 52, 5),
    chunk(0, 3, 500, 6),
    chunk(0, 3, 17, 7),
]
case("V4", eth(0x0800), True, 600, v4_chunks)
# IPv6 behind a VLAN tag, room 1280 - 52 = 1228: DATA chunks of 1200, 600, 628 (exactly full),
# 30 (+2 pad), a HEARTBEAT of 44.
v6_chunks = [
    chunk(0, 3, 1200, 11),
    chunk(0, 3, 600, 12),
    chunk(0, 3, 628, 13),
    chunk(0, 3, 30, 14),
    chunk(4, 0, 44, 15),
]
case("V6", eth(0x86DD, vlan=100), False, 1280, v6_chunks)
