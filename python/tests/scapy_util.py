"""scapy-side checks: recompute a checksum the way scapy does and compare."""

from __future__ import annotations

from scapy.all import IP, TCP, UDP, Ether, IPv6  # noqa: F401


def recomputed(raw: bytes, layer, inner: bool = False) -> int:
    """The checksum scapy computes for `layer` (TCP, UDP or IP) of the frame `raw`, ignoring
    the one in the frame. `inner` picks the second occurrence (inside a tunnel)."""
    p = Ether(raw)
    nb = 2 if inner else 1
    target = p.getlayer(layer, nb=nb)
    assert target is not None, f"no {layer.__name__} in frame"
    del target.chksum
    again = Ether(bytes(p))
    return again.getlayer(layer, nb=nb).chksum


def checksum_of(raw: bytes, layer, inner: bool = False) -> int:
    """The checksum in the frame for `layer`."""
    return Ether(raw).getlayer(layer, nb=2 if inner else 1).chksum
