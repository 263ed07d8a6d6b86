"""The ``sluice pcap`` tools over capture files (pcap or pcapng, detected by magic number).

Output captures are pcap with nanosecond timestamps and Ethernet link type.
"""

from __future__ import annotations

import os
from typing import Dict, List, Sequence, Union

from . import _sluice
from ._frame import Frame

__all__ = ["inspect", "gso", "gro"]

PathLike = Union[str, "os.PathLike[str]"]


def inspect(
    path: PathLike,
    vxlan_ports: Sequence[int] = (),
    geneve_ports: Sequence[int] = (),
) -> List[Frame]:
    """Parses every frame of a capture (``sluice pcap inspect --json``).

    ``[f.to_dict() for f in inspect(path)]`` equals the CLI's JSON lines. A frame of another
    link type than Ethernet is not parsed; its ``error`` says so (layer ``"link"``).

    Raises:
        PcapError: the file cannot be opened or is not a valid capture (the message is the
            CLI's, e.g. ``cannot open capture x.pcap: No such file or directory (os error 2)``).
        ValueError: too many tunnel ports.
    """
    return [
        Frame._from_dict(d)
        for d in _sluice.pcap_inspect(os.fspath(path), list(vxlan_ports), list(geneve_ports))
    ]


def gso(
    input: PathLike, output: PathLike, segment_size: int, udp: str = "uso"
) -> Dict[str, object]:
    """Segments every frame of a capture in software (``sluice pcap gso`` without ``--spec``).

    TCP frames are segmented as TCPv4/TCPv6 (by their innermost IP version), UDP frames as USO
    (``udp="uso"``) or UFO (``udp="ufo"``); other frames and frames that do not parse are
    copied unchanged; frames that cannot be segmented are dropped and counted by kind.

    Returns:
        ``{"frames": in, "segments": out, "passed": copied unchanged, "errors": {kind: n}}``.

    Raises:
        PcapError: a capture cannot be read or written.
        ValueError: ``udp`` is neither ``"uso"`` nor ``"ufo"``.
    """
    return _sluice.pcap_gso(os.fspath(input), os.fspath(output), segment_size, udp)


def gro(
    input: PathLike, output: PathLike, udp: bool = False, batch: int = 64
) -> Dict[str, int]:
    """Coalesces the frames of a capture (``sluice pcap gro``); see :func:`sluice.gro`.

    Frames of another link type than Ethernet are written through unchanged. Unlike the CLI,
    no ``OUT.jsonl`` sidecar is written (the summary is returned instead).

    Returns:
        ``{"frames": in, "packets": out, "merged": packets made of more than one frame,
        "other_link": non-Ethernet frames}``.

    Raises:
        PcapError: a capture cannot be read or written.
        ValueError: ``batch`` is 0.
    """
    return _sluice.pcap_gro(os.fspath(input), os.fspath(output), udp, batch)
