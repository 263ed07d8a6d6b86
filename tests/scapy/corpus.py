#!/usr/bin/env python3
"""Scapy side of Sluice's differential tests for `sluice pcap inspect`.

    corpus.py gen OUT.pcap [--seed N] [--count N]   write a varied, seeded corpus of frames
    corpus.py dissect IN.pcap                       print scapy's view of each frame as JSON lines

`dissect` prints, per frame, the same keys `sluice pcap inspect --json` prints (layers, vlans, l3,
l4, offsets, tunnel, csum), computed only with scapy: layer names and header lengths from scapy's
dissection, checksum verdicts by asking scapy to rebuild each checksum field and comparing. It is an
independent oracle: nothing here uses Sluice.
"""
import argparse
import json
import random
import sys
import warnings

warnings.filterwarnings("ignore")
import logging

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)

from scapy.all import (  # noqa: E402
    GRE, ICMP, IP, TCP, UDP, VXLAN, Dot1AD, Dot1Q, Ether, IPv6, IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment, IPv6ExtHdrHopByHop, IPv6ExtHdrRouting, Padding, Raw, bind_layers, raw,
    rdpcap, wrpcap,
)
from scapy.layers.inet6 import ICMPv6EchoReply, ICMPv6EchoRequest  # noqa: E402
from scapy.layers.sctp import SCTP, SCTPChunkData  # noqa: E402
from scapy.contrib.geneve import GENEVE, GeneveOptions  # noqa: E402

# Dissection bindings scapy lacks by default: 0x9100 tags and C-tag-in-C-tag stacks.
for outer in (Ether, Dot1Q, Dot1AD):
    bind_layers(outer, Dot1Q, type=0x9100)
bind_layers(Dot1Q, Dot1Q, type=0x8100)

VXLAN_PORT = 4789
GENEVE_PORT = 6081

# ---------------------------------------------------------------------------------------------
# Corpus generation
# ---------------------------------------------------------------------------------------------

TAG_STACKS = [
    [],
    [(0x8100, 100)],
    [(0x88A8, 100), (0x8100, 200)],
    [(0x88A8, 10), (0x8100, 20), (0x8100, 30)],
    [(0x9100, 7), (0x8100, 8)],
]


def l2(rng, tags, inner_type):
    """Ethernet + a VLAN stack, with explicit type fields (no guessing)."""
    types = [t for t, _ in tags] + [inner_type]
    pkt = Ether(src="02:00:00:00:00:%02x" % rng.randrange(256), dst="02:00:00:00:01:%02x" % rng.randrange(256), type=types[0])
    for i, (_tpid, vid) in enumerate(tags):
        cls = Dot1AD if types[i] == 0x88A8 else Dot1Q
        pkt = pkt / cls(vlan=vid, prio=rng.randrange(8), id=rng.randrange(2), type=types[i + 1])
    return pkt


def l3(rng, v6, proto, ext=False):
    if not v6:
        ip = IP(src="192.0.2.%d" % rng.randrange(1, 255), dst="198.51.100.%d" % rng.randrange(1, 255), ttl=rng.randrange(1, 255), id=rng.randrange(65536), proto=proto, tos=rng.randrange(256))
        if ext:
            ip.options = [b"\x94\x04\x00\x00"]  # router alert
        return ip
    ip6 = IPv6(src="2001:db8::%x" % rng.randrange(1, 65535), dst="2001:db8:1::%x" % rng.randrange(1, 65535), hlim=rng.randrange(1, 255), tc=rng.randrange(256), fl=rng.randrange(1 << 20))
    if not ext:
        ip6.nh = proto
        return ip6
    chain = rng.choice([["hbh"], ["hbh", "do"], ["hbh", "rt", "do"], ["do"], ["hbh", "frag0"]])
    pkt = ip6
    for name in chain:
        if name == "hbh":
            h = IPv6ExtHdrHopByHop()
        elif name == "do":
            h = IPv6ExtHdrDestOpt()
        elif name == "rt":
            h = IPv6ExtHdrRouting(addresses=["2001:db8:2::1"], segleft=0)
        else:
            h = IPv6ExtHdrFragment(offset=0, m=1, id=rng.randrange(1 << 32))
        pkt = pkt / h
    # the last header's nh is set by scapy from the layer that follows when built
    return pkt


def l4(rng, v6, kind, payload_len):
    data = bytes(rng.randrange(256) for _ in range(payload_len))
    if kind == "tcp":
        opts = rng.choice([[], [("MSS", 1460)], [("MSS", 1460), ("NOP", None), ("WScale", 7), ("SAckOK", b""), ("Timestamp", (rng.randrange(1 << 32), 0))]])
        return TCP(sport=rng.randrange(1024, 60000), dport=rng.choice([80, 443, 22]), seq=rng.randrange(1 << 32), ack=rng.randrange(1 << 32), flags=rng.choice(["S", "SA", "A", "PA", "FA"]), options=opts) / Raw(data)
    if kind == "udp":
        return UDP(sport=rng.randrange(1024, 4000), dport=rng.choice([53, 123, 5000])) / Raw(data)
    if kind == "sctp":
        return SCTP(sport=rng.randrange(1024, 60000), dport=9899, tag=rng.randrange(1 << 32)) / SCTPChunkData(data=data or b"x")
    if kind == "icmp":
        if v6:
            return ICMPv6EchoRequest(id=rng.randrange(65536), seq=rng.randrange(65536), data=data)
        return ICMP(type=8, id=rng.randrange(65536), seq=rng.randrange(65536)) / Raw(data)
    raise ValueError(kind)


def proto_num(kind, v6):
    return {"tcp": 6, "udp": 17, "sctp": 132, "icmp": 58 if v6 else 1}[kind]


def stack(rng, tags, v6, kind, ext, payload_len):
    return l2(rng, tags, 0x86DD if v6 else 0x0800) / l3(rng, v6, proto_num(kind, v6), ext) / l4(rng, v6, kind, payload_len)


def set_bad(layer, field):
    val = getattr(layer, field)
    setattr(layer, field, (val ^ 0x5A5A) or 1)


def gen(args):
    rng = random.Random(args.seed)
    frames = []
    for i in range(args.count):
        tags = rng.choice(TAG_STACKS)
        v6 = rng.random() < 0.5
        tunnel = rng.choice([None, None, "vxlan", "geneve", "gre-eth", "gre-ip"])
        kind = rng.choice(["tcp", "tcp", "udp", "sctp", "icmp"])
        ext = rng.random() < 0.3
        payload_len = rng.choice([0, 1, 5, 64, 333, 1000])
        if tunnel is None:
            pkt = stack(rng, tags, v6, kind, ext, payload_len)
        else:
            inner_tags = rng.choice(TAG_STACKS[:3])
            inner_v6 = rng.random() < 0.5
            inner_kind = rng.choice(["tcp", "udp", "icmp"])
            outer = l2(rng, tags, 0x86DD if v6 else 0x0800)
            if tunnel in ("vxlan", "geneve"):
                outer = outer / l3(rng, v6, 17) / UDP(sport=rng.randrange(49152, 65535), dport=VXLAN_PORT if tunnel == "vxlan" else GENEVE_PORT)
                if tunnel == "vxlan":
                    outer = outer / VXLAN(vni=rng.randrange(1 << 24), flags=0x08)
                    inner = stack(rng, inner_tags, inner_v6, inner_kind, False, payload_len)
                else:
                    nopts = rng.randrange(3)
                    opts = [GeneveOptions(classid=0x0102, type=0x80 + k, data=b"\x00\x01\x02\x03" * (k + 1)) for k in range(nopts)]
                    if rng.random() < 0.7:
                        outer = outer / GENEVE(vni=rng.randrange(1 << 24), proto=0x6558, options=opts)
                        inner = stack(rng, inner_tags, inner_v6, inner_kind, False, payload_len)
                    else:
                        outer = outer / GENEVE(vni=rng.randrange(1 << 24), proto=0x86DD if inner_v6 else 0x0800, options=opts)
                        inner = l3(rng, inner_v6, proto_num(inner_kind, inner_v6)) / l4(rng, inner_v6, inner_kind, payload_len)
                if rng.random() < 0.3:
                    outer[UDP].chksum = 0
            else:
                gre_kw = {}
                if rng.random() < 0.5:
                    gre_kw["key_present"] = 1
                    gre_kw["key"] = rng.randrange(1 << 32)
                if rng.random() < 0.5:
                    gre_kw["seqnum_present"] = 1
                    gre_kw["seqence_number"] = rng.randrange(1 << 32)
                if rng.random() < 0.5:
                    gre_kw["chksum_present"] = 1
                if tunnel == "gre-eth":
                    outer = outer / l3(rng, v6, 47) / GRE(proto=0x6558, **gre_kw)
                    inner = stack(rng, inner_tags, inner_v6, inner_kind, False, payload_len)
                else:
                    outer = outer / l3(rng, v6, 47) / GRE(proto=0x86DD if inner_v6 else 0x0800, **gre_kw)
                    inner = l3(rng, inner_v6, proto_num(inner_kind, inner_v6)) / l4(rng, inner_v6, inner_kind, payload_len)
            pkt = outer / inner
        # Build once so every field is concrete, then damage some checksums.
        pkt = Ether(raw(pkt))
        if kind == "udp" and not v6 and tunnel is None and rng.random() < 0.2:
            pkt[UDP].chksum = 0
        for idx, layer in enumerate(layers_of(pkt)):
            field = csum_field(layer)
            if field and getattr(layer, field) not in (None, 0) and rng.random() < 0.12:
                set_bad(layer, field)
        frame = raw(pkt)
        if len(frame) < 60 and rng.random() < 0.5:
            frame = frame + b"\x00" * (60 - len(frame))  # Ethernet padding
        frames.append(Ether(frame))
    for i in range(args.malformed):
        frames.append(Ether(malformed(rng, i)))
    wrpcap(args.out, frames)


def malformed(rng, i):
    """Damaged frames for the sample capture: a truncated header, a bad IHL, a total length beyond
    the frame, a Geneve option length past the packet."""
    good = raw(stack(rng, [(0x88A8, 100), (0x8100, 200)], False, "tcp", False, 40))
    kind = i % 4
    if kind == 0:
        return good[:18 + 8 + 10]  # cut inside the IPv4 header
    frame = bytearray(good)
    if kind == 1:
        frame[22] = 0x43  # version 4, IHL 3
    elif kind == 2:
        frame[24:26] = (len(frame) + 100).to_bytes(2, "big")
    else:
        g = raw(l2(rng, [], 0x0800) / l3(rng, False, 17) / UDP(sport=50000, dport=GENEVE_PORT) / GENEVE(vni=7, proto=0x6558) / stack(rng, [], False, "udp", False, 8))
        frame = bytearray(g)
        frame[14 + 20 + 8] = 0x3F  # opt_len 63 words: far beyond the packet
    return bytes(frame)


# ---------------------------------------------------------------------------------------------
# Dissection (the oracle)
# ---------------------------------------------------------------------------------------------


def name_of(layer):
    n = type(layer).__name__
    if n == "Ether":
        return "eth"
    if n in ("Dot1Q", "Dot1AD"):
        return "vlan"
    if n == "IP":
        return "ipv4"
    if n == "IPv6":
        return "ipv6"
    if n.startswith("IPv6ExtHdr") or n == "AH":
        return "ipv6-ext"
    if n == "TCP":
        return "tcp"
    if n == "UDP":
        return "udp"
    if n == "SCTP":
        return "sctp"
    if n == "ICMP":
        return "icmp"
    if n.startswith("ICMPv6"):
        return "icmpv6"
    if n == "VXLAN":
        return "vxlan"
    if n == "GENEVE":
        return "geneve"
    if n == "GRE":
        return "gre"
    return None  # Raw, Padding, SCTP chunks, ...


def layers_of(pkt):
    out = []
    layer = pkt
    while layer is not None and not isinstance(layer, (Raw, Padding)) and type(layer).__name__ != "NoPayload":
        out.append(layer)
        layer = layer.payload if layer.payload else None
    return out


def csum_field(layer):
    n = name_of(layer)
    if n in ("ipv4", "tcp", "udp", "icmp", "sctp"):
        return "chksum"
    if n == "icmpv6":
        return "cksum"
    if n == "gre" and layer.chksum_present:
        return "chksum"
    return None


def hdr_len(layer):
    total = len(raw(layer))
    rest = len(raw(layer.payload)) if layer.payload else 0
    return total - rest


def verdict(frame, pkt, idx, layer, under_tunnel_ipv6_udp=False):
    field = csum_field(layer)
    if field is None:
        return "none"
    value = getattr(layer, field)
    n = name_of(layer)
    if n == "udp" and value == 0:
        if isinstance(layer.underlayer, IP) or under_tunnel_ipv6_udp:
            return "none"
        return "bad"
    # A fragment's L4 checksum cannot be verified from one fragment.
    under = layer.underlayer
    while under is not None and name_of(under) == "ipv6-ext":
        if isinstance(under, IPv6ExtHdrFragment):
            return "none"
        under = under.underlayer
    if n in ("tcp", "udp", "sctp", "icmp") and isinstance(layer.underlayer, IP) and (layer.underlayer.flags.MF or layer.underlayer.frag):
        return "none"
    copy = Ether(frame)
    target = layers_of(copy)[idx]
    setattr(target, field, None)
    rebuilt = Ether(raw(copy))
    want = getattr(layers_of(rebuilt)[idx], field)
    return "good" if want == value else "bad"


def describe(frame):
    pkt = Ether(frame)
    ls = layers_of(pkt)
    names, offs = [], []
    off = 0
    for layer in ls:
        n = name_of(layer)
        if n is None:
            break
        names.append(n)
        offs.append(off)
        off += hdr_len(layer)
    ls = ls[: len(names)]
    ends = [o + hdr_len(l) for o, l in zip(offs, ls)]

    tun_idx = next((i for i, n in enumerate(names) if n in ("vxlan", "geneve", "gre")), None)

    def half(lo, hi, with_l2):
        rng = range(lo, hi)
        vlans = [
            {"tpid": ls[i].underlayer.type, "vid": ls[i].vlan, "pcp": ls[i].prio, "dei": bool(ls[i].id)}
            for i in rng if names[i] == "vlan"
        ]
        l3i = next((i for i in rng if names[i] in ("ipv4", "ipv6")), None)
        l4i = next((i for i in rng if names[i] in ("tcp", "udp", "sctp", "icmp", "icmpv6", "gre")), None)
        res = {
            "vlans": vlans,
            "l3": names[l3i] if l3i is not None else None,
            "l4": names[l4i] if l4i is not None else None,
            "offsets": {
                "l3": offs[l3i] if l3i is not None else None,
                "l4": offs[l4i] if l4i is not None else None,
                "payload": ends[l4i] if l4i is not None else None,
            },
        }
        if with_l2:
            res["offsets"]["l2"] = offs[lo] if lo < hi and names[lo] == "eth" else None
        return res, l3i, l4i

    outer_hi = (tun_idx + 1) if tun_idx is not None else len(names)
    outer, l3i, l4i = half(0, outer_hi, False)
    if tun_idx is not None and names[tun_idx] != "gre":
        outer["offsets"]["payload"] = offs[tun_idx]
    tunnel = None
    inner_l3i = inner_l4i = None
    if tun_idx is not None:
        t = ls[tun_idx]
        kind = names[tun_idx]
        if kind == "gre":
            tid = t.key if t.key_present else None
        else:
            tid = t.vni
        inner, inner_l3i, inner_l4i = half(tun_idx + 1, len(names), True)
        tunnel = {"kind": kind, "id": tid, "inner": inner}

    csum = {"ip": "none", "l4": "none", "inner_ip": "none", "inner_l4": "none"}
    tunnel_udp = tun_idx is not None and names[tun_idx] in ("vxlan", "geneve")
    if l3i is not None:
        csum["ip"] = verdict(frame, pkt, l3i, ls[l3i])
    if l4i is not None:
        csum["l4"] = verdict(frame, pkt, l4i, ls[l4i], under_tunnel_ipv6_udp=tunnel_udp)
    if inner_l3i is not None:
        csum["inner_ip"] = verdict(frame, pkt, inner_l3i, ls[inner_l3i])
    if inner_l4i is not None:
        csum["inner_l4"] = verdict(frame, pkt, inner_l4i, ls[inner_l4i])

    return {
        "len": len(frame),
        "layers": names,
        "vlans": outer["vlans"],
        "l3": outer["l3"],
        "l4": outer["l4"],
        "offsets": outer["offsets"],
        "tunnel": tunnel,
        "csum": csum,
    }


def dissect(args):
    for i, p in enumerate(rdpcap(args.pcap), start=1):
        d = describe(bytes(p))
        d["frame"] = i
        print(json.dumps(d, sort_keys=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("out")
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--count", type=int, default=400)
    g.add_argument("--malformed", type=int, default=0, help="append this many damaged frames")
    d = sub.add_parser("dissect")
    d.add_argument("pcap")
    args = ap.parse_args()
    {"gen": gen, "dissect": dissect}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
