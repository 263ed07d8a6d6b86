"""sluice.pcap over files: inspect equals the CLI's --json, gso/gro round trip via files."""

from __future__ import annotations

import json
import subprocess

import pytest
from scapy.all import IP, TCP, Ether, Raw, rdpcap, wrpcap

import sluice
from conftest import MIXED


def test_inspect_mixed_sample_shapes():
    frames = sluice.pcap.inspect(MIXED)
    assert len(frames) == 40
    assert [f.frame for f in frames] == list(range(1, 41))
    kinds = {f.tunnel["kind"] for f in frames if f.tunnel}
    assert kinds == {"vxlan", "geneve", "gre"}
    malformed = [f for f in frames if f.error]
    assert [f.frame for f in malformed] == [37, 38, 39, 40]
    assert frames[36].error == {
        "layer": "ipv4",
        "offset": 22,
        "reason": "truncated: need 20 bytes, have 14",
    }
    # Each frame's bytes parse to the same thing with sluice.parse (minus capture fields).
    for f, pkt in zip(frames, rdpcap(str(MIXED))):
        d = f.to_dict()
        for k in ("frame", "ts", "orig_len"):
            d.pop(k, None)
        assert sluice.parse(bytes(pkt)).to_dict() == d


def test_inspect_equals_the_cli_json(cli):
    out = subprocess.run(
        [str(cli), "pcap", "inspect", "--json", str(MIXED)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    want = [json.loads(line) for line in out.splitlines()]
    got = [f.to_dict() for f in sluice.pcap.inspect(MIXED)]
    assert len(got) == len(want) == 40
    for g, w in zip(got, want):
        assert g == w


def test_inspect_with_tunnel_ports_equals_the_cli(cli, tmp_path):
    from test_parse import vxlan_frame

    path = tmp_path / "x.pcap"
    wrpcap(str(path), [vxlan_frame(7, dport=8472), vxlan_frame(8)])
    out = subprocess.run(
        [str(cli), "pcap", "inspect", "--json", "--vxlan-port", "8472", str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    want = [json.loads(line) for line in out.splitlines()]
    got = [f.to_dict() for f in sluice.pcap.inspect(path, vxlan_ports=[8472])]
    assert got == want
    assert [f.tunnel["id"] for f in sluice.pcap.inspect(path, vxlan_ports=[8472])] == [7, 8]


def test_pcap_gso_then_gro_round_trip(tmp_path):
    payload = bytes(range(256)) * 100
    pkt = (
        Ether()
        / IP(src="10.0.0.1", dst="10.0.0.2", flags="DF", id=5)
        / TCP(sport=1, dport=2, seq=1000, flags="PA")
        / Raw(payload)
    )
    src, seg, back = tmp_path / "in.pcap", tmp_path / "seg.pcap", tmp_path / "back.pcap"
    wrpcap(str(src), [pkt])
    summary = sluice.pcap.gso(src, seg, 1448)
    n = -(-len(payload) // 1448)
    assert summary == {"frames": 1, "segments": n, "passed": 0, "errors": {}}
    segs = [bytes(p) for p in rdpcap(str(seg))]
    assert segs == sluice.gso(bytes(pkt), 1448)
    g = sluice.pcap.gro(seg, back)
    assert g == {"frames": n, "packets": 1, "merged": 1, "other_link": 0}
    assert [bytes(p) for p in rdpcap(str(back))] == [bytes(pkt)]


def test_pcap_gso_counts_errors_and_passes_others(tmp_path):
    src, out = tmp_path / "in.pcap", tmp_path / "out.pcap"
    wrpcap(str(src), [Ether() / IP() / TCP(flags="A") / Raw(b"x" * 100), Ether() / Raw(b"junk")])
    s = sluice.pcap.gso(src, out, 0)
    assert s == {"frames": 2, "segments": 0, "passed": 1, "errors": {"gso_zero_size": 1}}


def test_pcap_errors(tmp_path):
    with pytest.raises(sluice.PcapError) as e:
        sluice.pcap.inspect(tmp_path / "missing.pcap")
    assert str(e.value).startswith(f"cannot open capture {tmp_path / 'missing.pcap'}: ")
    assert e.value.path == str(tmp_path / "missing.pcap")
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"\x01\x02\x03\x04rest")
    with pytest.raises(sluice.PcapError, match=r"not a pcap or pcapng file \(magic number 0x04030201\)"):
        sluice.pcap.inspect(junk)
    short = tmp_path / "short.pcap"
    short.write_bytes(b"\x01")
    with pytest.raises(sluice.PcapError, match="too short to be a capture"):
        sluice.pcap.inspect(short)
    with pytest.raises(ValueError, match="udp must be"):
        sluice.pcap.gso(MIXED, tmp_path / "o.pcap", 100, udp="tso")
    with pytest.raises(sluice.PcapError, match="cannot create capture"):
        sluice.pcap.gro(MIXED, tmp_path / "no" / "dir" / "o.pcap")


def test_pcapng_is_read(tmp_path):
    from scapy.utils import PcapNgWriter

    path = tmp_path / "x.pcapng"
    pkts = [Ether() / IP() / TCP(flags="A") / Raw(b"y" * n) for n in (1, 20, 300)]
    w = PcapNgWriter(str(path))
    for p in pkts:
        w.write(p)
    w.close()
    frames = sluice.pcap.inspect(path)
    assert [f.len for f in frames] == [len(p) for p in pkts]
    assert all(f.l4 == "tcp" and f.csum["l4"] == "good" for f in frames)


def test_a_corrupt_record_names_the_file_and_frame(tmp_path):
    path = tmp_path / "cut.pcap"
    wrpcap(str(path), [Ether() / IP() / TCP() / Raw(b"r" * 200)] * 3)
    data = path.read_bytes()
    path.write_bytes(data[:-50])  # the third record is cut short
    with pytest.raises(sluice.PcapError) as e:
        sluice.pcap.inspect(path)
    assert str(e.value).startswith(f"{path}: frame 3: corrupt pcap record: ")
    # ... and the byte offset of the torn record: the file header and two whole records.
    frame = len(Ether() / IP() / TCP() / Raw(b"r" * 200))
    assert str(e.value).endswith(f"(byte offset {24 + 2 * (16 + frame)})")
