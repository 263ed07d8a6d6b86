"""Checksum verification and filling of Ethernet frames (outer and, when tunnelled, inner)."""

from __future__ import annotations

from typing import Dict, Union

from . import _sluice

__all__ = ["verify", "fill"]


def verify(data: Union[bytes, bytearray]) -> Dict[str, Union[str, bool]]:
    """Verifies every checksum of a frame in software.

    Checks the IPv4 header checksum and the L4 checksum (TCP, UDP, SCTP, ICMP, ICMPv6, GRE with
    the C bit) of the outer stack and, when tunnelled, the inner one. A malformed frame is
    checked as far as it parses; this never raises on frame bytes.

    Returns:
        ``{"ip", "l4", "inner_ip", "inner_l4"}`` each ``"good"``, ``"bad"`` or ``"none"`` (as
        ``Frame.csum``), and ``l4_absent`` / ``inner_l4_absent``: the L4 header carries no
        checksum by design (UDP zero over IPv4 or in a tunnel's outer UDP, GRE without C).
    """
    return _sluice.verify(data)


def fill(data: Union[bytes, bytearray]) -> bytes:
    """Returns a copy of a frame with every checksum recomputed in software.

    Innermost first: inner L4, inner IPv4 header, outer L4, outer IPv4 header. A UDP checksum
    of zero that means "no checksum" (UDP over IPv4, a tunnel's outer UDP) stays zero, as the
    kernel keeps it; IP fragments' L4 checksums are left alone (they cover the whole datagram).

    Raises:
        ParseError: the frame does not parse.
        ChecksumError: a checksum cannot be computed (a header or length does not fit).
    """
    return _sluice.fill(data)
