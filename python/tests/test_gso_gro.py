"""sluice.gso / sluice.gro on scapy-built super-frames: segments scapy agrees with, and
gro(gso(x)) == x (what crates/sluice-offload/tests/gro_roundtrip.rs asserts in Rust)."""

from __future__ import annotations

import pytest
from scapy.all import ICMP, IP, TCP, UDP, Ether, IPv6, Raw
from scapy.layers.inet import IP as IPv4
from scapy.layers.vxlan import VXLAN

import sluice
from scapy_util import checksum_of, recomputed

PAYLOAD = bytes(i * 7 % 251 for i in range(60_000))


def tcp4(payload: bytes = PAYLOAD, flags: str = "PA"):
    return (
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src="10.0.0.1", dst="10.0.0.2", flags="DF", id=1000, ttl=64)
        / TCP(sport=40000, dport=5201, seq=123456, ack=1, flags=flags, window=512)
        / Raw(payload)
    )


def tcp6(payload: bytes = PAYLOAD):
    return (
        Ether()
        / IPv6(src="2001:db8::1", dst="2001:db8::2")
        / TCP(sport=40000, dport=5201, seq=7, ack=1, flags="PA")
        / Raw(payload)
    )


def vxlan_tcp4(payload: bytes = PAYLOAD):
    return (
        Ether()
        / IP(src="192.0.2.1", dst="192.0.2.2", flags="DF", id=9)
        / UDP(sport=50000, dport=4789)
        / VXLAN(vni=4242)
        / Ether()
        / IP(src="10.1.0.1", dst="10.1.0.2", flags="DF", id=77)
        / TCP(sport=1, dport=2, seq=99, ack=1, flags="PA")
        / Raw(payload)
    )


def check_tcp_segments(segs, super_pkt, mss, l3, inner=False):
    """Each segment parses in scapy with the checksums scapy computes; payloads concatenate to
    the original; sequence numbers advance by the payload; PSH only on the last."""
    tcp_in = super_pkt.getlayer(TCP)
    assert len(segs) == -(-len(tcp_in.payload) // mss)
    data = b""
    for i, raw in enumerate(segs):
        p = Ether(raw)
        t = p.getlayer(TCP)
        assert t is not None
        assert checksum_of(raw, TCP, inner=False) == recomputed(raw, TCP)
        if l3 is IPv4:
            nb = 2 if inner else 1
            ip = p.getlayer(IP, nb=nb)
            assert ip.chksum == recomputed(raw, IP, inner=inner)
            assert ip.len == len(ip)
            assert ip.id == (super_pkt.getlayer(IP, nb=nb).id + i) & 0xFFFF
        else:
            assert p[IPv6].plen == len(p[IPv6].payload)
        chunk = bytes(t.payload)
        assert len(chunk) == (mss if i < len(segs) - 1 else len(chunk))
        assert 0 < len(chunk) <= mss
        assert t.seq == (tcp_in.seq + len(data)) & 0xFFFFFFFF
        assert bool(t.flags & 0x08) == (i == len(segs) - 1)  # PSH on the last segment only
        data += chunk
        assert sluice.checksum.verify(raw)["l4" if not inner else "inner_l4"] == "good"
    assert data == bytes(tcp_in.payload)


@pytest.mark.parametrize("mss", [1448, 1000, 537])
def test_gso_tcp4_64k(mss):
    pkt = tcp4()
    segs = sluice.gso(bytes(pkt), mss)
    check_tcp_segments(segs, pkt, mss, IPv4)


def test_gso_tcp6_64k():
    pkt = tcp6()
    segs = sluice.gso(bytes(pkt), 1440, gso_type="tcpv6")
    check_tcp_segments(segs, pkt, 1440, IPv6)


def test_gso_vxlan_inner_tcp():
    pkt = vxlan_tcp4()
    segs = sluice.gso(bytes(pkt), 1400)
    tcp_in = pkt.getlayer(TCP)
    data = b""
    for raw in segs:
        p = Ether(raw)
        assert p[VXLAN].vni == 4242
        inner_tcp = p.getlayer(TCP)
        assert inner_tcp.chksum == recomputed(raw, TCP)
        assert p.getlayer(IP, nb=2).chksum == recomputed(raw, IP, inner=True)
        assert p[IP].chksum == recomputed(raw, IP)
        # The outer UDP checksum was non-zero in the input: computed for every segment.
        assert p[UDP].chksum != 0 and p[UDP].chksum == recomputed(raw, UDP)
        v = sluice.checksum.verify(raw)
        assert (v["ip"], v["l4"], v["inner_ip"], v["inner_l4"]) == ("good",) * 4
        data += bytes(inner_tcp.payload)
    assert data == bytes(tcp_in.payload)


def test_gso_ignores_the_input_checksums():
    pkt = tcp4(PAYLOAD[:5000])
    pkt[TCP].chksum = 0x1111
    pkt[IP].chksum = 0x2222
    for raw in sluice.gso(bytes(pkt), 1000):
        assert Ether(raw)[TCP].chksum == recomputed(raw, TCP)
        assert Ether(raw)[IP].chksum == recomputed(raw, IP)


def test_gso_udp_uso_and_ufo():
    pkt = Ether() / IP(src="1.1.1.1", dst="2.2.2.2") / UDP(sport=9, dport=10) / Raw(PAYLOAD[:4000])
    segs = sluice.gso(bytes(pkt), 1200)  # inferred: USO
    assert len(segs) == 4
    got = b""
    for raw in segs:
        u = Ether(raw)[UDP]
        assert u.len == len(u) and u.chksum == recomputed(raw, UDP)
        got += bytes(u.payload)
    assert got == PAYLOAD[:4000]
    frags = sluice.gso(bytes(pkt), 1480, gso_type="udp")  # UFO: IP fragments
    assert len(frags) == 3
    offsets = [Ether(f)[IP].frag * 8 for f in frags]
    assert offsets == [0, 1480, 2960]
    assert [bool(Ether(f)[IP].flags.MF) for f in frags] == [True, True, False]
    for f in frags:
        assert Ether(f)[IP].chksum == recomputed(f, IP)


def test_gso_through_device_features_gives_the_same_wire():
    raw = bytes(tcp4(PAYLOAD[:20000]))
    software = sluice.gso(raw, 1448)
    for feats in ([], ["tx-checksum-ip-generic"], ["tx-tcp-segmentation", "tx-checksum-ip-generic", "tx-scatter-gather"], ["all"]):
        assert sluice.gso(raw, 1448, features=feats) == software, feats
    handed = sluice.gso(raw, 1448, features=["tx-tcp-segmentation", "tx-checksum-ip-generic", "tx-scatter-gather"], as_handed=True)
    # A TSO device gets the super-frame itself; its TCP checksum field holds the pseudo-header
    # sum the device completes (bytes 50..52: Ethernet 14 + IPv4 20 + 16).
    assert len(handed) == 1
    assert handed[0][:50] == raw[:50] and handed[0][52:] == raw[52:]
    assert handed[0][50:52] != raw[50:52]
    assert len(sluice.gso(raw, 1448, features=[], as_handed=True)) == len(software)


def test_gso_none_type_fills_checksums():
    pkt = tcp4(b"hello")
    pkt[TCP].chksum = 0
    (out,) = sluice.gso(bytes(pkt), 1000, gso_type="none")
    assert out == sluice.checksum.fill(bytes(pkt))
    assert Ether(out)[TCP].chksum == recomputed(out, TCP)


def test_gso_non_tcp_udp_is_unchanged():
    raw = bytes(Ether() / IP() / ICMP() / Raw(b"x" * 3000))
    assert sluice.gso(raw, 1000) == [raw]


@pytest.mark.parametrize("make,gso_type", [(tcp4, None), (tcp6, None), (vxlan_tcp4, None)])
@pytest.mark.parametrize("mss", [1448, 900])
def test_gro_of_gso_is_the_original(make, gso_type, mss):
    pkt = make()
    raw = bytes(pkt)
    segs = sluice.gso(raw, mss)
    merged = sluice.gro(segs, batch=len(segs))
    assert len(merged) == 1
    assert merged[0] == raw


def test_gro_flushes_at_each_batch_end():
    raw = bytes(tcp4())
    segs = sluice.gso(raw, 900)
    assert len(segs) == 67
    first, rest = sluice.gro(segs)  # batches of 64, as the CLI's default --batch
    assert first == sluice.gro(segs[:64], batch=64)[0]
    assert rest == sluice.gro(segs[64:])[0]
    # 64 segments of 900 bytes merged: the first segment's headers, its payload and lengths.
    assert Ether(first)[Raw].load == PAYLOAD[: 64 * 900]
    assert Ether(rest)[TCP].seq == tcp4()[TCP].seq + 64 * 900


def test_gro_keeps_flows_apart_and_orders_per_flow():
    a = sluice.gso(bytes(tcp4(PAYLOAD[:8000])), 1000)
    b_pkt = tcp4(PAYLOAD[:4000])
    b_pkt[TCP].sport = 40001
    b = sluice.gso(bytes(b_pkt), 1000)
    mixed = [x for pair in zip(a, b) for x in pair] + a[len(b):]
    out = sluice.gro(mixed)
    assert sorted(out, key=len) == sorted([bytes(tcp4(PAYLOAD[:8000])), bytes(b_pkt)], key=len)


def test_gro_does_not_merge_a_bad_checksum():
    segs = sluice.gso(bytes(tcp4(PAYLOAD[:3000])), 1000)
    broken = bytearray(segs[1])
    broken[-1] ^= 0xFF
    out = sluice.gro([segs[0], bytes(broken), segs[2]])
    assert bytes(broken) in out
    assert len(out) >= 2


def test_gro_udp_only_when_asked():
    pkt = Ether() / IP(src="1.1.1.1", dst="2.2.2.2") / UDP(sport=9, dport=10) / Raw(PAYLOAD[:3600])
    segs = sluice.gso(bytes(pkt), 1200)
    assert sluice.gro(segs) == segs
    merged = sluice.gro(segs, udp=True)
    assert merged == [bytes(pkt)]


def test_gro_batch_must_be_positive():
    with pytest.raises(ValueError, match="batch"):
        sluice.gro([], batch=0)


def test_gso_errors():
    raw = bytes(tcp4(PAYLOAD[:3000]))
    with pytest.raises(sluice.GsoError) as e:
        sluice.gso(raw, 1000, gso_type="tcpv6")
    assert e.value.kind == "gso_type_mismatch"
    assert "do not match GSO type" in str(e.value)
    with pytest.raises(sluice.GsoError) as e:
        sluice.gso(raw, 0)
    assert e.value.kind == "gso_zero_size"
    with pytest.raises(sluice.GsoError) as e:
        sluice.gso(bytes(Ether() / IP() / UDP() / Raw(b"x" * 3000)), 1001, gso_type="udp")
    assert e.value.kind == "gso_unaligned_frag"
    assert isinstance(e.value, sluice.SluiceError) and isinstance(e.value, ValueError)
    with pytest.raises(sluice.ParseError) as p:
        sluice.gso(raw[:30], 1000)
    assert (p.value.layer, p.value.offset) == ("ipv4", 14)
    assert p.value.reason == "truncated: need 20 bytes, have 16"
    assert str(p.value) == "ipv4 at offset 14: truncated: need 20 bytes, have 16"
    with pytest.raises(sluice.FeatureError) as f:
        sluice.gso(raw, 1000, features=["tx-tcp-segmentation", "tso-please"])
    assert f.value.token == "tso-please"
    with pytest.raises(ValueError, match="gso_type must be one of"):
        sluice.gso(raw, 1000, gso_type="sctp")
    with pytest.raises(OverflowError):
        sluice.gso(raw, 70000)
    with pytest.raises(ValueError, match="as_handed=True needs features"):
        sluice.gso(raw, 1000, as_handed=True)


def test_drop_error_for_an_oversize_frame():
    # Not a GSO packet (ICMP) and larger than the MTU: the transmit path drops it.
    raw = bytes(Ether() / IP() / ICMP() / Raw(b"x" * 3000))
    with pytest.raises(sluice.DropError) as d:
        sluice.gso(raw, 1000, features=["all"])
    assert d.value.kind == "oversize"
    assert "exceeds MTU 1500" in str(d.value)
    assert sluice.gso(raw, 1000, features=["all"], mtu=9000) == [raw]
    # Segments larger than the MTU: dropped as well.
    udp = bytes(Ether() / IP() / UDP() / Raw(b"x" * 3000))
    with pytest.raises(sluice.DropError) as d:
        sluice.gso(udp, 1000, features=["all"], mtu=500)
    assert d.value.kind == "oversize"


def test_feature_names():
    names = sluice.feature_names()
    assert "tx-tcp-segmentation" in names and "rx-gro" in names
