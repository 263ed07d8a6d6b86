"""The :class:`Frame` class: what Sluice's parser says about one frame."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["Frame"]


@dataclass
class Frame:
    """One parsed frame, as ``sluice pcap inspect --json`` describes it.

    The attributes hold plain Python values with the names and shapes of the CLI's JSON, and
    :meth:`to_dict` gives back exactly the CLI's object.

    Attributes:
        len: frame length in bytes.
        layers: the layers found, outermost first (``["ethernet", "vlan", "ipv4", "tcp"]``).
        layer_offsets: the same layers with the byte offset of each header.
        vlans: the outer VLAN stack, outermost first: dicts with ``tpid``, ``vid``, ``pcp``,
            ``dei``.
        l3: ``"ipv4"``, ``"ipv6"`` or ``None``.
        l4: ``"tcp"``, ``"udp"``, ``"sctp"``, ``"icmp"``, ``"icmpv6"``, ``"gre"`` or ``None``
            (a later fragment or an unknown protocol).
        offsets: ``{"l3", "l4", "payload"}`` offsets of the outer stack (``None`` if absent).
        tunnel: ``None``, or ``{"kind", "id", "inner"}``: kind ``"vxlan"``, ``"geneve"`` or
            ``"gre"``, id the VNI / GRE key, inner ``{"vlans", "l3", "l4", "offsets"}`` with
            offsets ``{"l2", "l3", "l4", "payload"}`` (or ``None`` if nothing inner parsed).
        csum: checksum verdicts ``{"ip", "l4", "inner_ip", "inner_l4"}``, each ``"good"``,
            ``"bad"`` or ``"none"`` (no such checksum, or not verifiable).
        error: ``None``, or ``{"layer", "offset", "reason"}`` for a malformed frame (what parsed
            before the error is still described).
        frame: 1-based index in its capture (``pcap.inspect`` only).
        orig_len: length on the wire when the capture truncated the frame.
        ts: capture timestamp in seconds since the epoch (``pcap.inspect`` only).
    """

    len: int
    layers: List[str]
    layer_offsets: List[Tuple[str, int]]
    vlans: List[Dict[str, Any]]
    l3: Optional[str]
    l4: Optional[str]
    offsets: Dict[str, Optional[int]]
    tunnel: Optional[Dict[str, Any]]
    csum: Dict[str, str]
    error: Optional[Dict[str, Any]]
    frame: Optional[int] = None
    orig_len: Optional[int] = None
    ts: Optional[float] = None

    @classmethod
    def _from_dict(cls, d: Dict[str, Any]) -> "Frame":
        """Builds a Frame from the extension's dict."""
        d = dict(d)
        d["layer_offsets"] = [tuple(x) for x in d["layer_offsets"]]
        return cls(**d)

    @property
    def vlan_ids(self) -> List[int]:
        """The VLAN ids of the outer stack, outermost first."""
        return [v["vid"] for v in self.vlans]

    @property
    def is_malformed(self) -> bool:
        """Whether parsing stopped at an error."""
        return self.error is not None

    def to_dict(self) -> Dict[str, Any]:
        """The object ``sluice pcap inspect --json`` prints for this frame.

        ``frame``, ``ts`` (and ``orig_len`` when the frame was not truncated) are left out for
        a frame that did not come from a capture.
        """
        out: Dict[str, Any] = {}
        if self.frame is not None:
            out["frame"] = self.frame
        out["len"] = self.len
        if self.orig_len is not None:
            out["orig_len"] = self.orig_len
        if self.ts is not None:
            out["ts"] = self.ts
        out["layers"] = list(self.layers)
        out["vlans"] = copy.deepcopy(self.vlans)
        out["l3"] = self.l3
        out["l4"] = self.l4
        out["offsets"] = dict(self.offsets)
        out["tunnel"] = copy.deepcopy(self.tunnel)
        out["csum"] = dict(self.csum)
        out["error"] = copy.deepcopy(self.error)
        return out
