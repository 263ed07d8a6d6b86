"""The exceptions Sluice raises.

Every exception is a :class:`SluiceError`; the ones about a bad argument value (a frame that
does not parse, a frame that cannot be segmented, an unknown feature name, a checksum that
cannot be filled) are also :class:`ValueError`. Their message is the one the ``sluice`` CLI
prints for the same problem.
"""

from __future__ import annotations

from typing import Optional

__all__ = [
    "SluiceError",
    "ParseError",
    "GsoError",
    "FeatureError",
    "DropError",
    "ChecksumError",
    "PcapError",
]


class SluiceError(Exception):
    """Base class of every error Sluice raises."""


class ParseError(SluiceError, ValueError):
    """A frame's header is malformed.

    Attributes:
        layer: the layer whose header is malformed (``"ipv4"``, ``"tcp"``, ...), as
            ``sluice pcap inspect`` names it.
        offset: byte offset of that header from the start of the frame.
        reason: what is wrong with it.
    """

    def __init__(self, message: str, layer: str, offset: int, reason: str) -> None:
        super().__init__(message)
        self.layer = layer
        self.offset = offset
        self.reason = reason


class GsoError(SluiceError, ValueError):
    """Software segmentation refused the frame.

    Attributes:
        kind: the counter name of the error kind (``"gso_type_mismatch"``,
            ``"gso_zero_size"``, ``"gso_too_many_segs"``, ...).
    """

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class FeatureError(SluiceError, ValueError):
    """A device feature name is unknown (see :func:`sluice.feature_names`).

    Attributes:
        token: the name as given (empty for an empty name).
    """

    def __init__(self, message: str, token: str) -> None:
        super().__init__(message)
        self.token = token


class DropError(SluiceError):
    """Transmit preparation for the given device dropped the frame (``gso(..., features=...)``).

    Attributes:
        kind: ``"oversize"``, ``"bad_checksum_gso"``, ``"malformed"`` or ``"dropped"``.
    """

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class ChecksumError(SluiceError, ValueError):
    """A checksum could not be computed (the header it covers does not fit the frame).

    Attributes:
        slot: ``"OuterIp"``, ``"OuterL4"``, ``"InnerIp"`` or ``"InnerL4"``.
    """

    def __init__(self, message: str, slot: str) -> None:
        super().__init__(message)
        self.slot = slot


class PcapError(SluiceError):
    """A capture file cannot be opened, read or written.

    Attributes:
        path: the file.
    """

    def __init__(self, message: str, path: Optional[str] = None) -> None:
        super().__init__(message)
        self.path = path
