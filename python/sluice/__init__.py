"""Sluice from Python: the packet parser, software GSO and GRO, checksums and pcap tools of
the Sluice datapath (Rust), on frames given as ``bytes`` (for example scapy's ``bytes(pkt)``).

Frames are Ethernet frames. The functions mirror the ``sluice`` CLI:

- :func:`parse` is one line of ``sluice pcap inspect --json``;
- :func:`gso` segments like ``sluice pcap gso`` (or, with ``features``, like ``sluice pcap tx``);
- :func:`gro` coalesces like ``sluice pcap gro``;
- :mod:`sluice.checksum` verifies and fills checksums;
- :mod:`sluice.pcap` runs the tools over capture files.

Errors are raised as :class:`SluiceError` subclasses (see :mod:`sluice.errors`).
"""

from __future__ import annotations

from typing import Iterable, List, Optional, Sequence, Union

from . import _sluice
from ._frame import Frame
from .errors import (
    ChecksumError,
    DropError,
    FeatureError,
    GsoError,
    ParseError,
    PcapError,
    SluiceError,
)

__all__ = [
    "Frame",
    "parse",
    "gso",
    "gro",
    "feature_names",
    "checksum",
    "pcap",
    "SluiceError",
    "ParseError",
    "GsoError",
    "FeatureError",
    "DropError",
    "ChecksumError",
    "PcapError",
]

__version__ = "0.1.0"

Bytes = Union[bytes, bytearray]


def parse(
    data: Bytes,
    vxlan_ports: Sequence[int] = (),
    geneve_ports: Sequence[int] = (),
) -> Frame:
    """Parses an Ethernet frame and verifies its checksums.

    Never raises on malformed bytes: a frame whose headers are malformed is described up to
    the error, with ``Frame.error`` saying where and why (``layer``, ``offset``, ``reason``).

    Args:
        data: the frame, from its Ethernet header.
        vxlan_ports: extra UDP destination ports decoded as VXLAN (4789 always is); at most 8
            in all.
        geneve_ports: extra UDP destination ports decoded as Geneve (6081 always is).

    Returns:
        The :class:`Frame`; ``frame.to_dict()`` equals ``sluice pcap inspect --json``'s object
        for it, without ``frame`` and ``ts``.

    Raises:
        ValueError: too many tunnel ports.
    """
    return Frame._from_dict(_sluice.parse(data, list(vxlan_ports), list(geneve_ports)))


def gso(
    data: Bytes,
    segment_size: int,
    gso_type: Optional[str] = None,
    features: Optional[Iterable[str]] = None,
    mtu: int = 1500,
    as_handed: bool = False,
) -> List[bytes]:
    """Segments a super-frame (software GSO) into frames with every checksum computed.

    Without ``features`` this is full software segmentation, as ``sluice pcap gso`` does for a
    device with no offloads: TCP is split at ``segment_size`` payload bytes per segment (IP
    ids, sequence numbers, flags and lengths as Linux sets them), UDP into datagrams (USO) or
    IP fragments (UFO, ``gso_type="udp"``); VXLAN/Geneve/GRE tunnels are segmented inside, and
    the outer UDP checksum is computed when the input's is non-zero. The input's checksums are
    not trusted: every output checksum is computed from scratch.

    With ``features`` (``ethtool -k`` names, see :func:`feature_names`; ``[]`` for none), the
    frame goes through Sluice's transmit preparation for a device with exactly those features
    and MTU ``mtu`` (as ``sluice pcap tx``), and the result is what that device would put on
    the wire; with ``as_handed=True`` it is the frames as handed to the device instead (a TSO
    device gets the super-frame, partial checksums hold the pseudo-header sum).

    Args:
        data: the frame (Ethernet).
        segment_size: payload bytes per segment (L4 payload for TCP and USO, IP payload per
            fragment for UFO).
        gso_type: ``"tcpv4"``, ``"tcpv6"``, ``"udp_l4"`` (USO), ``"udp"`` (UFO) or ``"none"``
            (one frame, checksums recomputed as :func:`sluice.checksum.fill`). By default it
            is inferred from the innermost L3/L4 (TCP by IP version, UDP as USO); a frame that
            is neither TCP nor UDP is returned unchanged.
        features: device features for the transmit path (see above).
        mtu: the device MTU for the transmit path.
        as_handed: return the frames as handed to the device (transmit path only).

    Returns:
        The segments, in order.

    Raises:
        ParseError: the frame does not parse.
        GsoError: it cannot be segmented (``.kind`` says why: ``gso_type_mismatch``,
            ``gso_zero_size``, ``gso_too_many_segs``, ...).
        FeatureError: an unknown feature name.
        DropError: the transmit path dropped it (for instance larger than the MTU and no GSO).
        ValueError: an unknown ``gso_type``, or ``as_handed`` without ``features``.
    """
    if as_handed and features is None:
        raise ValueError("as_handed=True needs features: it returns what a device is handed")
    feats = None if features is None else list(features)
    return _sluice.gso(data, segment_size, gso_type, feats, mtu, as_handed)


def gro(frames: Iterable[Bytes], udp: bool = False, batch: int = 64) -> List[bytes]:
    """Coalesces frames with Linux's GRO merge rules (``sluice pcap gro``).

    The frames are one receive stream, fed to one engine in batches of ``batch`` frames;
    every held packet is flushed at each batch end (the end of a NAPI poll) and at the end.
    Packets come out per flow in arrival order. A merged packet has correct lengths and full
    checksums; a frame that cannot be merged comes out unchanged.

    Args:
        frames: the received frames (Ethernet).
        udp: also coalesce UDP datagrams into USO packets (Linux's forwarding UDP GRO).
        batch: frames per batch (at least 1).

    Returns:
        The resulting packets.

    Raises:
        ValueError: ``batch`` is 0.
        ChecksumError: a merged packet's checksum could not be filled.
    """
    return _sluice.gro(list(frames), udp, batch)


def feature_names() -> List[str]:
    """The device feature names :func:`gso` accepts, as ``ethtool -k`` names them."""
    return list(_sluice.feature_names())


from . import checksum, pcap  # noqa: E402  (they import the names above)
