"""More shapes: Geneve, IPv6 inside VXLAN, GRE, Frame independence."""

from __future__ import annotations

from scapy.all import GRE, IP, TCP, UDP, Dot1Q, Ether, IPv6, Raw
from scapy.contrib.geneve import GENEVE
from scapy.layers.vxlan import VXLAN

import sluice
from scapy_util import recomputed


def test_geneve_tunnel_and_inner_ipv6():
    pkt = (
        Ether()
        / IPv6(src="2001:db8::a", dst="2001:db8::b")
        / UDP(sport=3000, dport=6081)
        / GENEVE(vni=0x123456, proto=0x6558)
        / Ether()
        / Dot1Q(vlan=9)
        / IPv6(src="fd00::1", dst="fd00::2")
        / UDP(sport=7, dport=8)
        / Raw(b"g" * 20)
    )
    raw = bytes(pkt)
    f = sluice.parse(raw)
    assert f.tunnel is not None
    assert (f.tunnel["kind"], f.tunnel["id"]) == ("geneve", 0x123456)
    inner = f.tunnel["inner"]
    assert inner["l3"] == "ipv6" and inner["l4"] == "udp"
    assert [v["vid"] for v in inner["vlans"]] == [9]
    assert inner["offsets"]["l3"] == len(pkt) - len(pkt.getlayer(IPv6, nb=2))
    assert f.csum == {"ip": "none", "l4": "good", "inner_ip": "none", "inner_l4": "good"}


def test_gre_key_is_the_tunnel_id():
    pkt = Ether() / IP() / GRE(key_present=1, key=0xDEADBEEF) / IP() / TCP(flags="A")
    f = sluice.parse(bytes(pkt))
    assert f.tunnel is not None
    assert (f.tunnel["kind"], f.tunnel["id"]) == ("gre", 0xDEADBEEF)
    assert f.tunnel["inner"]["l4"] == "tcp"
    assert f.csum["inner_l4"] == "good"


def test_gso_of_ipv6_in_vxlan_and_back():
    payload = bytes(range(256)) * 120
    pkt = (
        Ether()
        / IP(src="192.0.2.1", dst="192.0.2.2", flags="DF")
        / UDP(sport=40000, dport=4789)
        / VXLAN(vni=77)
        / Ether()
        / IPv6(src="fd00::1", dst="fd00::2")
        / TCP(sport=5, dport=6, seq=1, ack=1, flags="PA")
        / Raw(payload)
    )
    raw = bytes(pkt)
    segs = sluice.gso(raw, 1300)
    assert len(segs) == -(-len(payload) // 1300)
    data = b""
    for s in segs:
        p = Ether(s)
        assert p.getlayer(TCP).chksum == recomputed(s, TCP)
        assert p[UDP].chksum == recomputed(s, UDP)
        data += bytes(p.getlayer(TCP).payload)
    assert data == payload
    assert sluice.gro(segs) == [raw]


def test_frames_are_independent_values():
    raw = bytes(Ether() / Dot1Q(vlan=1) / IP() / UDP())
    f = sluice.parse(raw)
    d = f.to_dict()
    d["vlans"][0]["vid"] = 999
    assert f.vlans[0]["vid"] == 1
    assert f == sluice.parse(raw)
