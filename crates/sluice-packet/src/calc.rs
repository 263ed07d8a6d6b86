//! Bounds-checked checksum arithmetic over frames, shared by `verify` and `rewrite`.
//!
//! Every function returns `None` instead of panicking when an offset or a length field does not
//! fit the frame.

use sluice_checksum::{combine, sum};
use sluice_wire::bytes::{read_u16, read_u32};
use sluice_wire::{ip_proto, L3Kind};

/// The bytes `start..end`.
pub(crate) fn slice(frame: &[u8], start: usize, end: usize) -> Option<&[u8]> {
    frame.get(start..end)
}

/// The IPv4 header length (IHL × 4) at `l3`, if the version is 4 and the header fits the frame.
pub(crate) fn ipv4_hdr_len(frame: &[u8], l3: usize) -> Option<usize> {
    let b0 = *frame.get(l3)?;
    if b0 >> 4 != 4 || b0 & 0x0f < 5 {
        return None;
    }
    let len = usize::from(b0 & 0x0f) * 4;
    frame.get(l3..l3.checked_add(len)?)?;
    Some(len)
}

/// The end of the IP packet at `l3` (IPv4 total length, IPv6 payload length + 40), checked
/// against the frame.
pub(crate) fn l3_end(frame: &[u8], l3: usize, kind: L3Kind) -> Option<usize> {
    let end = match kind {
        L3Kind::Ipv4 => {
            let hl = ipv4_hdr_len(frame, l3)?;
            let total = usize::from(read_u16(frame, l3.checked_add(2)?)?);
            if total < hl {
                return None;
            }
            l3.checked_add(total)?
        }
        L3Kind::Ipv6 => {
            if *frame.get(l3)? >> 4 != 6 {
                return None;
            }
            l3.checked_add(40)?
                .checked_add(usize::from(read_u16(frame, l3.checked_add(4)?)?))?
        }
    };
    (end <= frame.len()).then_some(end)
}

/// The folded pseudo-header sum for an L4 checksum of `proto` over `l4_len` bytes, with the
/// addresses of the IP header at `l3`.
pub(crate) fn pseudo(
    frame: &[u8],
    l3: usize,
    kind: L3Kind,
    proto: u8,
    l4_len: usize,
) -> Option<u16> {
    match kind {
        L3Kind::Ipv4 => {
            let src: [u8; 4] = slice(frame, l3.checked_add(12)?, l3.checked_add(16)?)?
                .try_into()
                .ok()?;
            let dst: [u8; 4] = slice(frame, l3.checked_add(16)?, l3.checked_add(20)?)?
                .try_into()
                .ok()?;
            let len = u16::try_from(l4_len).ok()?;
            Some(sluice_checksum::pseudo::ipv4(src, dst, proto, len))
        }
        L3Kind::Ipv6 => {
            let src: [u8; 16] = slice(frame, l3.checked_add(8)?, l3.checked_add(24)?)?
                .try_into()
                .ok()?;
            let dst: [u8; 16] = slice(frame, l3.checked_add(24)?, l3.checked_add(40)?)?
                .try_into()
                .ok()?;
            let len = u32::try_from(l4_len).ok()?;
            Some(sluice_checksum::pseudo::ipv6(&src, &dst, proto, len))
        }
    }
}

/// The checksummed region of one L4 header: `start..end`, the absolute offset of its checksum
/// field, and the pseudo-header sum when the protocol has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct L4Region {
    pub start: usize,
    pub end: usize,
    pub proto: u8,
    pub field: usize,
    pub pseudo: Option<u16>,
}

impl L4Region {
    /// Locates the region of the L4 header of `proto` at `l4` inside the IP packet
    /// `l3..l3_end`. The UDP length field bounds a UDP datagram.
    pub(crate) fn new(
        frame: &[u8],
        l3: usize,
        kind: L3Kind,
        l4: usize,
        proto: u8,
        l3_end: usize,
    ) -> Option<L4Region> {
        if l4 <= l3 || l4 > l3_end || l3_end > frame.len() {
            return None;
        }
        let avail = l3_end - l4;
        let (min, end) = match proto {
            ip_proto::TCP => (20, l3_end),
            ip_proto::UDP => {
                let ulen = usize::from(read_u16(frame, l4.checked_add(4)?)?);
                if ulen < 8 || ulen > avail {
                    return None;
                }
                (8, l4 + ulen)
            }
            ip_proto::SCTP => (12, l3_end),
            ip_proto::ICMP if kind == L3Kind::Ipv4 => (4, l3_end),
            ip_proto::ICMPV6 if kind == L3Kind::Ipv6 => (4, l3_end),
            ip_proto::GRE => (8, l3_end),
            _ => return None,
        };
        if avail < min {
            return None;
        }
        let field = l4 + usize::from(crate::meta::l4_csum_field(proto)?);
        let pseudo = if crate::meta::has_pseudo_header(proto) {
            Some(pseudo(frame, l3, kind, proto, end - l4)?)
        } else {
            None
        };
        Some(L4Region {
            start: l4,
            end,
            proto,
            field,
            pseudo,
        })
    }

    /// Folded ones'-complement sum of the region (with the pseudo-header) as it is in the frame.
    pub(crate) fn sum_as_is(&self, frame: &[u8]) -> Option<u16> {
        let s = sum(slice(frame, self.start, self.end)?);
        Some(combine(self.pseudo.unwrap_or(0), s))
    }

    /// The correct ones'-complement checksum field value (the field itself counted as zero).
    /// For UDP a computed zero is sent as `0xffff` (RFC 768).
    pub(crate) fn compute(&self, frame: &[u8]) -> Option<u16> {
        let before = sum(slice(frame, self.start, self.field)?);
        let after = sum(slice(frame, self.field.checked_add(2)?, self.end)?);
        let s = combine(combine(self.pseudo.unwrap_or(0), before), after);
        let c = !s;
        Some(if c == 0 && self.proto == ip_proto::UDP {
            0xffff
        } else {
            c
        })
    }

    /// The correct SCTP CRC32c value (field counted as zero), as it reads from the header in
    /// network order ([`sluice_checksum::crc32c::sctp`]).
    pub(crate) fn sctp_crc(&self, frame: &[u8]) -> Option<u32> {
        Some(sluice_checksum::crc32c::sctp(slice(
            frame, self.start, self.end,
        )?))
    }

    /// The SCTP checksum as stored in the frame (network order).
    pub(crate) fn sctp_stored(&self, frame: &[u8]) -> Option<u32> {
        read_u32(frame, self.field)
    }
}

/// Whether the IPv4 header at `l3` has a correct header checksum (`None`: not an IPv4 header that
/// fits the frame).
pub(crate) fn ipv4_header_ok(frame: &[u8], l3: usize) -> Option<bool> {
    let hl = ipv4_hdr_len(frame, l3)?;
    Some(sum(slice(frame, l3, l3 + hl)?) == 0xffff)
}

/// The correct IPv4 header checksum for the header at `l3` (the field counted as zero).
pub(crate) fn ipv4_header_compute(frame: &[u8], l3: usize) -> Option<u16> {
    let hl = ipv4_hdr_len(frame, l3)?;
    let a = sum(slice(frame, l3, l3 + 10)?);
    let b = sum(slice(frame, l3 + 12, l3 + hl)?);
    Some(!combine(a, b))
}
