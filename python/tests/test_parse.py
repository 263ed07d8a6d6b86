"""sluice.parse against scapy's view of the same frames."""

from __future__ import annotations

import pytest
from scapy.all import IP, TCP, UDP, Dot1AD, Dot1Q, Ether, IPv6, Raw
from scapy.layers.vxlan import VXLAN

import sluice


def off(pkt, layer) -> int:
    """Offset of `layer` in `pkt` as scapy builds it."""
    return len(pkt) - len(pkt[layer])


def test_plain_ipv4_tcp_offsets_and_checksums():
    pkt = Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=1234, dport=80) / Raw(b"a" * 100)
    f = sluice.parse(bytes(pkt))
    assert f.layers == ["eth", "ipv4", "tcp"]
    assert f.layer_offsets == [("eth", 0), ("ipv4", off(pkt, IP)), ("tcp", off(pkt, TCP))]
    assert f.l3 == "ipv4" and f.l4 == "tcp"
    assert f.offsets == {"l3": off(pkt, IP), "l4": off(pkt, TCP), "payload": off(pkt, Raw)}
    assert f.vlans == [] and f.tunnel is None and f.error is None
    assert f.csum == {"ip": "good", "l4": "good", "inner_ip": "none", "inner_l4": "none"}
    assert f.len == len(pkt)


def test_vlan_stack_qinq():
    pkt = (
        Ether()
        / Dot1AD(vlan=100, prio=5, dei=1)
        / Dot1Q(vlan=42, prio=3)
        / IPv6(src="2001:db8::1", dst="2001:db8::2")
        / UDP(sport=5, dport=6)
        / Raw(b"x" * 10)
    )
    f = sluice.parse(bytes(pkt))
    assert f.vlans == [
        {"tpid": 0x88A8, "vid": 100, "pcp": 5, "dei": True},
        {"tpid": 0x8100, "vid": 42, "pcp": 3, "dei": False},
    ]
    assert f.vlan_ids == [pkt[Dot1AD].vlan, pkt[Dot1Q].vlan]
    assert f.layers == ["eth", "vlan", "vlan", "ipv6", "udp"]
    assert f.offsets["l3"] == off(pkt, IPv6) and f.offsets["l4"] == off(pkt, UDP)
    assert f.l3 == "ipv6" and f.l4 == "udp"
    assert f.csum["ip"] == "none"  # IPv6 has no header checksum
    assert f.csum["l4"] == "good"


def vxlan_frame(vni: int, dport: int = 4789, inner_vlan=None):
    inner = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    if inner_vlan is not None:
        inner = inner / Dot1Q(vlan=inner_vlan)
    return (
        Ether()
        / IP(src="192.0.2.1", dst="192.0.2.2")
        / UDP(sport=49152, dport=dport)
        / VXLAN(vni=vni)
        / inner
        / IP(src="10.1.0.1", dst="10.1.0.2")
        / TCP(sport=1, dport=2, flags="A")
        / Raw(b"p" * 64)
    )


def test_vxlan_tunnel_vni_and_inner_offsets():
    pkt = vxlan_frame(0xABCDE, inner_vlan=7)
    raw = bytes(pkt)
    f = sluice.parse(raw)
    assert f.tunnel is not None
    assert f.tunnel["kind"] == "vxlan"
    assert f.tunnel["id"] == pkt[VXLAN].vni
    inner = f.tunnel["inner"]
    inner_eth = off(pkt, VXLAN) + 8
    inner_ip = len(pkt) - len(pkt.getlayer(IP, nb=2))
    inner_tcp = len(pkt) - len(pkt.getlayer(TCP))
    assert inner["offsets"] == {
        "l2": inner_eth,
        "l3": inner_ip,
        "l4": inner_tcp,
        "payload": inner_tcp + 20,
    }
    assert inner["vlans"] == [{"tpid": 0x8100, "vid": 7, "pcp": 0, "dei": False}]
    assert inner["l3"] == "ipv4" and inner["l4"] == "tcp"
    assert f.csum == {"ip": "good", "l4": "good", "inner_ip": "good", "inner_l4": "good"}


def test_vxlan_on_another_port_needs_the_port():
    raw = bytes(vxlan_frame(99, dport=8472))
    assert sluice.parse(raw).tunnel is None
    f = sluice.parse(raw, vxlan_ports=[8472])
    assert f.tunnel is not None and f.tunnel["id"] == 99


def test_too_many_ports_is_a_value_error():
    with pytest.raises(ValueError, match="too many VXLAN ports"):
        sluice.parse(b"", vxlan_ports=list(range(1000, 1010)))


def test_a_broken_checksum_is_bad_and_scapy_agrees():
    good = Ether() / IP() / TCP(flags="A") / Raw(b"z" * 33)
    raw = bytes(good)
    right = Ether(raw)[TCP].chksum
    broken = Ether() / IP() / TCP(flags="A", chksum=right ^ 0x0101) / Raw(b"z" * 33)
    f = sluice.parse(bytes(broken))
    assert f.csum["l4"] == "bad"
    assert f.csum["ip"] == "good"
    bad_ip = Ether() / IP(chksum=0x1234) / TCP(flags="A") / Raw(b"z" * 33)
    assert sluice.parse(bytes(bad_ip)).csum["ip"] == "bad"
    # Inner checksum broken in a tunnel: only inner_l4 is bad.
    pkt = vxlan_frame(5)
    pkt.getlayer(TCP).chksum = 0xBEEF
    assert sluice.parse(bytes(pkt)).csum == {
        "ip": "good",
        "l4": "good",
        "inner_ip": "good",
        "inner_l4": "bad",
    }


def test_malformed_frame_keeps_what_parsed():
    raw = bytes(Ether() / Dot1Q(vlan=3) / IP() / TCP())[: 14 + 4 + 10]
    f = sluice.parse(raw)
    assert f.is_malformed
    assert f.error == {"layer": "ipv4", "offset": 18, "reason": "truncated: need 20 bytes, have 10"}
    assert f.layers == ["eth", "vlan"]
    assert f.vlan_ids == [3]
    assert f.to_dict()["error"] == f.error


def test_to_dict_has_the_inspect_keys():
    d = sluice.parse(bytes(Ether() / IP() / UDP())).to_dict()
    assert list(d) == [
        "len",
        "layers",
        "vlans",
        "l3",
        "l4",
        "offsets",
        "tunnel",
        "csum",
        "error",
    ]


def test_bytearray_and_empty_input():
    raw = bytes(Ether() / IP() / UDP())
    assert sluice.parse(bytearray(raw)) == sluice.parse(raw)
    f = sluice.parse(b"")
    assert f.error is not None and f.error["layer"] == "eth"
    with pytest.raises(TypeError):
        sluice.parse("not bytes")  # type: ignore[arg-type]
