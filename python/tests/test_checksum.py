"""sluice.checksum.verify / fill against scapy's checksums."""

from __future__ import annotations

import pytest
from scapy.all import ICMP, IP, TCP, UDP, Ether, IPv6, Raw
from scapy.layers.vxlan import VXLAN

import sluice
from scapy_util import recomputed


def test_verify_reports_each_slot():
    raw = bytes(Ether() / IP() / TCP(flags="A") / Raw(b"q" * 50))
    assert sluice.checksum.verify(raw) == {
        "ip": "good",
        "l4": "good",
        "inner_ip": "none",
        "inner_l4": "none",
        "l4_absent": False,
        "inner_l4_absent": False,
    }
    zero_udp = bytes(Ether() / IP() / UDP(chksum=0) / Raw(b"q"))
    v = sluice.checksum.verify(zero_udp)
    assert v["l4"] == "none" and v["l4_absent"] is True
    # Over IPv6 a zero UDP checksum is invalid (RFC 8200).
    v6 = bytes(Ether() / IPv6() / UDP(chksum=0) / Raw(b"q"))
    assert sluice.checksum.verify(v6)["l4"] == "bad"


@pytest.mark.parametrize(
    "pkt",
    [
        Ether() / IP(chksum=1) / TCP(chksum=2, flags="A") / Raw(b"a" * 99),
        Ether() / IPv6() / UDP(chksum=3) / Raw(b"b" * 77),
        Ether() / IP(chksum=4) / ICMP(chksum=5) / Raw(b"c" * 31),
    ],
    ids=["tcp4", "udp6", "icmp"],
)
def test_fill_repairs_what_scapy_recomputes(pkt):
    raw = bytes(pkt)
    before = sluice.checksum.verify(raw)
    assert "bad" in (before["ip"], before["l4"])
    fixed = sluice.checksum.fill(raw)
    assert len(fixed) == len(raw)
    after = sluice.checksum.verify(fixed)
    assert after["l4"] == "good" and after["ip"] in ("good", "none")
    l4 = pkt.getlayer(2).__class__
    assert Ether(fixed).getlayer(l4).chksum == recomputed(fixed, l4)
    # Only checksum bytes changed.
    diff = [i for i in range(len(raw)) if raw[i] != fixed[i]]
    assert len(diff) <= 4
    assert sluice.checksum.fill(fixed) == fixed


def test_fill_inner_and_outer_of_a_tunnel():
    pkt = (
        Ether()
        / IP(src="192.0.2.1", dst="192.0.2.2")
        / UDP(sport=1, dport=4789, chksum=0x1234)
        / VXLAN(vni=1)
        / Ether()
        / IP(chksum=0x4321)
        / TCP(chksum=0x5555, flags="A")
        / Raw(b"x" * 40)
    )
    raw = bytes(pkt)
    v = sluice.checksum.verify(raw)
    assert (v["l4"], v["inner_ip"], v["inner_l4"]) == ("bad", "bad", "bad")
    fixed = sluice.checksum.fill(raw)
    v = sluice.checksum.verify(fixed)
    assert (v["ip"], v["l4"], v["inner_ip"], v["inner_l4"]) == ("good",) * 4
    assert Ether(fixed)[UDP].chksum == recomputed(fixed, UDP)
    assert Ether(fixed).getlayer(TCP).chksum == recomputed(fixed, TCP)


def test_fill_keeps_a_zero_tunnel_udp_checksum():
    pkt = (
        Ether()
        / IP()
        / UDP(dport=4789, chksum=0)
        / VXLAN(vni=1)
        / Ether()
        / IP()
        / TCP(chksum=9, flags="A")
    )
    fixed = sluice.checksum.fill(bytes(pkt))
    assert Ether(fixed)[UDP].chksum == 0
    assert sluice.checksum.verify(fixed)["inner_l4"] == "good"


def test_fill_errors():
    with pytest.raises(sluice.ParseError) as e:
        sluice.checksum.fill(bytes(Ether() / IP())[:20])
    assert e.value.layer == "ipv4" and e.value.offset == 14
    assert isinstance(e.value, ValueError)
