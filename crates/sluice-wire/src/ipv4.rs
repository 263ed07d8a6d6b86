//! IPv4 headers: a zero-copy [`Packet`] view, the [`Repr`] builder, and option TLV validation.
//!
//! [`Packet::new_checked`] guarantees: at least 20 bytes, IHL ≥ 5, the header (with options) fits
//! the buffer, and `IHL*4 ≤ total length ≤ buffer length`. After it succeeds no accessor panics;
//! [`Packet::payload`] is exactly the IP payload (Ethernet padding excluded). Accessors on an
//! unchecked short buffer read zeros, and setters return [`OutOfRange`] for a field that does not
//! fit, rather than panic.
//!
//! The header checksum is only exposed as a field ([`Packet::header_checksum`]); computing it is
//! the job of `sluice-checksum`, so [`Repr::emit`] writes it as zero.
//!
//! This module also defines [`OptionBuf`], the fixed-capacity owned option bytes used by the
//! `Repr`s of IPv4, TCP and Geneve.

use crate::bytes::OutOfRange;
use crate::error::{ParseError, Reason};
use crate::layout::Layer;
use crate::view::{self, array_at, range, range_mut, set_bytes, set_u16, set_u8};
use crate::view::{u16_at, u8_at};
use core::net::Ipv4Addr;

/// Byte offsets of the IPv4 header.
mod field {
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLG_OFF: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC_ADDR: usize = 12;
    pub const DST_ADDR: usize = 16;
    pub const OPTIONS: usize = 20;
}

/// Length of the IPv4 header without options.
pub const HEADER_LEN: usize = field::OPTIONS;
/// Most option bytes an IPv4 header can carry (IHL 15).
pub const MAX_OPTIONS_LEN: usize = 40;

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// Up to `N` option bytes held inline (no allocation); used by the `Repr`s of IPv4 (`N = 40`),
/// TCP (40) and Geneve (252). All three formats count option length in 4-byte words, so the length
/// is always a multiple of 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OptionBuf<const N: usize> {
    bytes: [u8; N],
    len: u8,
}

impl<const N: usize> OptionBuf<N> {
    /// No options.
    pub const EMPTY: Self = OptionBuf {
        bytes: [0; N],
        len: 0,
    };

    /// Copies `bytes`; `None` when longer than `N` (or 255) or not a multiple of 4.
    pub fn new(bytes: &[u8]) -> Option<Self> {
        let len = u8::try_from(bytes.len()).ok()?;
        if bytes.len() > N || !bytes.len().is_multiple_of(4) {
            return None;
        }
        let mut out = Self::EMPTY;
        out.bytes.get_mut(..bytes.len())?.copy_from_slice(bytes);
        out.len = len;
        Some(out)
    }

    /// The option bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or(&[])
    }

    /// Number of option bytes.
    pub const fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether there are no option bytes.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<const N: usize> Default for OptionBuf<N> {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// Option kinds with a one-byte encoding.
pub mod option_kind {
    /// End of option list.
    pub const END: u8 = 0;
    /// No operation (padding).
    pub const NOP: u8 = 1;
    /// Record route.
    pub const RECORD_ROUTE: u8 = 7;
    /// Router alert (RFC 2113).
    pub const ROUTER_ALERT: u8 = 0x94;
}

/// One IPv4 option: its kind and the bytes after the kind and length bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Option<'a> {
    /// Option kind (copied flag, class and number).
    pub kind: u8,
    /// Option data (empty for END and NOP).
    pub data: &'a [u8],
}

/// Iterator over IPv4 option TLVs; see [`options`].
#[derive(Debug, Clone)]
pub struct Options<'a> {
    bytes: &'a [u8],
    pos: usize,
}

/// Iterates over the option TLVs in `bytes` (the options area of a header). END stops the walk
/// (it is yielded once; padding after it is ignored). An option whose length byte is missing,
/// below 2 or runs past `bytes` yields `Reason::OptionOverflow` (with the option's offset in
/// `bytes`), after which the iterator ends.
pub fn options(bytes: &[u8]) -> Options<'_> {
    Options { bytes, pos: 0 }
}

/// Checks that `bytes` is a well-formed sequence of option TLVs (see [`options`]).
pub fn check_options(bytes: &[u8]) -> Result<(), ParseError> {
    match options_overrun(bytes) {
        None => Ok(()),
        Some(offset) => Err(ParseError {
            layer: Layer::Ipv4,
            offset,
            reason: Reason::OptionOverflow,
        }),
    }
}

/// The offset in `bytes` of the first option TLV that overruns it (its length byte missing,
/// below 2, or past the end), or `None` when they fit: EOL (0) ends the list, NOP (1) is one
/// byte, any other option is type, length (counting both), data. The parser's check; the same
/// rule as [`options`], without building the items.
#[inline]
pub fn options_overrun(bytes: &[u8]) -> Option<usize> {
    let mut rest = bytes;
    while let Some((&kind, after_kind)) = rest.split_first() {
        let at = bytes.len() - rest.len();
        match kind {
            option_kind::END => return None,
            option_kind::NOP => rest = after_kind,
            _ => match after_kind.first() {
                Some(&len) if len >= 2 => match rest.get(usize::from(len)..) {
                    Some(after) => rest = after,
                    None => return Some(at),
                },
                _ => return Some(at),
            },
        }
    }
    None
}

impl<'a> Iterator for Options<'a> {
    type Item = Result<Ipv4Option<'a>, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        let at = self.pos;
        let kind = *self.bytes.get(at)?;
        if kind == option_kind::END || kind == option_kind::NOP {
            self.pos = if kind == option_kind::END {
                self.bytes.len()
            } else {
                at + 1
            };
            return Some(Ok(Ipv4Option { kind, data: &[] }));
        }
        let len = usize::from(u8_at(self.bytes, at + 1));
        match self.bytes.get(at + 2..at + len.max(1)) {
            Some(data) if len >= 2 => {
                self.pos = at + len;
                Some(Ok(Ipv4Option { kind, data }))
            }
            _ => {
                self.pos = self.bytes.len();
                let e = ParseError {
                    layer: Layer::Ipv4,
                    offset: at,
                    reason: Reason::OptionOverflow,
                };
                Some(Err(e))
            }
        }
    }
}

view! {
    /// A zero-copy view of an IPv4 header and its payload.
    ///
    /// Contract: once [`Packet::new_checked`] succeeded, no accessor panics (see the module docs).
    ///
    /// ```
    /// use core::net::Ipv4Addr;
    /// use sluice_wire::ipv4::Packet;
    /// let mut bytes = [
    ///     0x45, 0, 0, 24, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 1, 2, 3, 4,
    /// ];
    /// let mut ip = Packet::new_checked(&mut bytes[..]).unwrap();
    /// assert_eq!(ip.src_addr(), Ipv4Addr::new(10, 0, 0, 1));
    /// assert_eq!((ip.header_len(), ip.ttl(), ip.protocol()), (20, 64, 17));
    /// assert!(ip.dont_frag());
    /// assert_eq!(ip.payload(), &[1, 2, 3, 4]);
    /// ip.set_ttl(63).unwrap();
    /// assert_eq!(bytes[8], 63);
    /// ```
    pub struct Packet {
        /// Total length of the IP packet (header and payload).
        total_len, set_total_len: u16 @ field::LENGTH;

        /// Identification.
        ident, set_ident: u16 @ field::IDENT;

        /// Time to live.
        ttl, set_ttl: u8 @ field::TTL;

        /// The protocol of the payload ([`crate::ip_proto`]).
        protocol, set_protocol: u8 @ field::PROTOCOL;

        /// The header checksum field.
        header_checksum, set_header_checksum: u16 @ field::CHECKSUM;
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks the lengths: `Truncated` below 20 bytes or when the options do not fit, `BadIhl`
    /// when IHL < 5, `BadTotalLength` when the total length is below the header length or beyond
    /// the buffer. The version is checked by [`Repr::parse`].
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        view::need(Layer::Ipv4, HEADER_LEN, have)?;
        if self.ihl() < 5 {
            return Err(view::err(Layer::Ipv4, Reason::BadIhl(self.ihl())));
        }
        let header_len = self.header_len();
        view::need(Layer::Ipv4, header_len, have)?;
        let claimed = usize::from(self.total_len());
        if claimed < header_len || claimed > have {
            let reason = Reason::BadTotalLength {
                claimed,
                available: have,
            };
            return Err(view::err(Layer::Ipv4, reason));
        }
        Ok(())
    }

    /// The version nibble (4 for IPv4).
    pub fn version(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::VER_IHL) >> 4
    }

    /// The IHL nibble: header length in 4-byte words.
    pub fn ihl(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::VER_IHL) & 0x0f
    }

    /// Header length in bytes, options included (`IHL * 4`).
    pub fn header_len(&self) -> usize {
        usize::from(self.ihl()) * 4
    }

    /// Differentiated services code point.
    pub fn dscp(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::DSCP_ECN) >> 2
    }

    /// Explicit congestion notification bits.
    pub fn ecn(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::DSCP_ECN) & 0x03
    }

    getters! {
        /// The whole type-of-service byte (DSCP and ECN).
        fn tos -> u8 = u8_at(field::DSCP_ECN);
    }

    /// The don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        u16_at(self.buffer.as_ref(), field::FLG_OFF) & FLAG_DF != 0
    }

    /// The more-fragments flag.
    pub fn more_frags(&self) -> bool {
        u16_at(self.buffer.as_ref(), field::FLG_OFF) & FLAG_MF != 0
    }

    /// Fragment offset in bytes (the field times 8).
    pub fn frag_offset(&self) -> u16 {
        (u16_at(self.buffer.as_ref(), field::FLG_OFF) & OFFSET_MASK) << 3
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(array_at::<4>(self.buffer.as_ref(), field::SRC_ADDR))
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(array_at::<4>(self.buffer.as_ref(), field::DST_ADDR))
    }

    /// The whole header, options included (the bytes the header checksum covers).
    pub fn header(&self) -> &[u8] {
        range(self.buffer.as_ref(), 0..self.header_len())
    }

    /// The option bytes (between byte 20 and the header length).
    pub fn options(&self) -> &[u8] {
        range(self.buffer.as_ref(), field::OPTIONS..self.header_len())
    }

    /// Iterates over the option TLVs (see [`options`]).
    pub fn options_iter(&self) -> Options<'_> {
        options(self.options())
    }

    /// The payload: from the header length to the total length.
    pub fn payload(&self) -> &[u8] {
        range(
            self.buffer.as_ref(),
            self.header_len()..usize::from(self.total_len()),
        )
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the version nibble.
    pub fn set_version(&mut self, version: u8) -> Result<(), OutOfRange> {
        let b = (self.ihl() & 0x0f) | (version << 4);
        set_u8(self.buffer.as_mut(), field::VER_IHL, b)?;
        Ok(())
    }

    /// Sets the header length in bytes (rounded down to 4-byte words, at most 60).
    pub fn set_header_len(&mut self, len: usize) -> Result<(), OutOfRange> {
        let ihl = (len / 4).min(15) as u8;
        let b = (self.version() << 4) | ihl;
        set_u8(self.buffer.as_mut(), field::VER_IHL, b)?;
        Ok(())
    }

    /// Sets the DSCP (low 6 bits).
    pub fn set_dscp(&mut self, dscp: u8) -> Result<(), OutOfRange> {
        let b = (dscp << 2) | self.ecn();
        set_u8(self.buffer.as_mut(), field::DSCP_ECN, b)?;
        Ok(())
    }

    /// Sets the ECN bits (low 2 bits).
    pub fn set_ecn(&mut self, ecn: u8) -> Result<(), OutOfRange> {
        let b = (self.tos() & !0x03) | (ecn & 0x03);
        set_u8(self.buffer.as_mut(), field::DSCP_ECN, b)?;
        Ok(())
    }

    fn set_flg_off(&mut self, mask: u16, value: u16) -> Result<(), OutOfRange> {
        let old = u16_at(self.buffer.as_ref(), field::FLG_OFF);
        set_u16(
            self.buffer.as_mut(),
            field::FLG_OFF,
            (old & !mask) | (value & mask),
        )?;
        Ok(())
    }

    /// Sets the don't-fragment flag.
    pub fn set_dont_frag(&mut self, df: bool) -> Result<(), OutOfRange> {
        self.set_flg_off(FLAG_DF, if df { FLAG_DF } else { 0 })?;
        Ok(())
    }

    /// Sets the more-fragments flag.
    pub fn set_more_frags(&mut self, mf: bool) -> Result<(), OutOfRange> {
        self.set_flg_off(FLAG_MF, if mf { FLAG_MF } else { 0 })?;
        Ok(())
    }

    /// Sets the fragment offset in bytes (rounded down to a multiple of 8).
    pub fn set_frag_offset(&mut self, offset: u16) -> Result<(), OutOfRange> {
        self.set_flg_off(OFFSET_MASK, offset >> 3)?;
        Ok(())
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, addr: Ipv4Addr) -> Result<(), OutOfRange> {
        set_bytes(self.buffer.as_mut(), field::SRC_ADDR, &addr.octets())?;
        Ok(())
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, addr: Ipv4Addr) -> Result<(), OutOfRange> {
        set_bytes(self.buffer.as_mut(), field::DST_ADDR, &addr.octets())?;
        Ok(())
    }

    /// The option bytes, mutably.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        range_mut(self.buffer.as_mut(), field::OPTIONS..end)
    }

    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let r = self.header_len()..usize::from(self.total_len());
        range_mut(self.buffer.as_mut(), r)
    }
}

/// The parsed form of an IPv4 header.
///
/// ```
/// use sluice_wire::ipv4::{Packet, Repr};
/// let bytes = [0x45, 0, 0, 24, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 1, 2, 3, 4];
/// let repr = Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()).unwrap();
/// assert_eq!((repr.protocol, repr.payload_len, repr.buffer_len()), (17, 4, 24));
///
/// // emit writes the same header back (checksum zero, for the caller to fill in).
/// let mut out = [0u8; 24];
/// repr.emit(&mut Packet::new_unchecked(&mut out[..])).unwrap();
/// assert_eq!(out[..20], bytes[..20]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Payload protocol ([`crate::ip_proto`]).
    pub protocol: u8,
    /// Time to live.
    pub ttl: u8,
    /// Differentiated services code point (6 bits).
    pub dscp: u8,
    /// ECN bits (2 bits).
    pub ecn: u8,
    /// Identification.
    pub ident: u16,
    /// Don't-fragment flag.
    pub dont_frag: bool,
    /// More-fragments flag.
    pub more_frags: bool,
    /// Fragment offset in bytes (a multiple of 8).
    pub frag_offset: u16,
    /// Option bytes (well-formed TLVs, padded to a multiple of 4).
    pub options: OptionBuf<MAX_OPTIONS_LEN>,
    /// Length of the payload after the header.
    pub payload_len: usize,
}

impl Repr {
    /// Parses and validates a header: lengths ([`Packet::check_len`]), version 4
    /// (`Reason::BadVersion`) and option TLVs (`Reason::OptionOverflow`). The checksum is not
    /// verified here.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr, ParseError> {
        packet.check_len()?;
        if packet.version() != 4 {
            return Err(view::err(Layer::Ipv4, Reason::BadVersion(packet.version())));
        }
        check_options(packet.options()).map_err(|e| ParseError {
            offset: e.offset + HEADER_LEN,
            ..e
        })?;
        let options = OptionBuf::new(packet.options())
            .ok_or(view::err(Layer::Ipv4, Reason::OptionOverflow))?;
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            protocol: packet.protocol(),
            ttl: packet.ttl(),
            dscp: packet.dscp(),
            ecn: packet.ecn(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
            more_frags: packet.more_frags(),
            frag_offset: packet.frag_offset(),
            options,
            payload_len: usize::from(packet.total_len()) - packet.header_len(),
        })
    }

    /// Header length in bytes, options included.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN + self.options.len()
    }

    /// Length of the whole IP packet: header plus payload.
    pub const fn buffer_len(&self) -> usize {
        self.header_len() + self.payload_len
    }

    /// Writes the header into `packet` (which must hold [`Repr::header_len`] bytes: [`OutOfRange`]
    /// at the first field that does not fit). The total length is `buffer_len()` (saturated at 65535: keep
    /// `payload_len` within bounds); the header checksum is written as zero for the caller to fill
    /// in. The payload is left alone.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
    ) -> Result<(), OutOfRange> {
        packet.set_version(4)?;
        packet.set_header_len(self.header_len())?;
        packet.set_dscp(self.dscp)?;
        packet.set_ecn(self.ecn)?;
        packet.set_total_len(u16::try_from(self.buffer_len()).unwrap_or(u16::MAX))?;
        packet.set_ident(self.ident)?;
        set_u16(packet.buffer.as_mut(), field::FLG_OFF, 0)?;
        packet.set_dont_frag(self.dont_frag)?;
        packet.set_more_frags(self.more_frags)?;
        packet.set_frag_offset(self.frag_offset)?;
        packet.set_ttl(self.ttl)?;
        packet.set_protocol(self.protocol)?;
        packet.set_header_checksum(0)?;
        packet.set_src_addr(self.src_addr)?;
        packet.set_dst_addr(self.dst_addr)?;
        set_bytes(
            packet.buffer.as_mut(),
            field::OPTIONS,
            self.options.as_slice(),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip_proto;
    use proptest::prelude::*;

    /// The parser's walker agrees with the option iterator, offset included, on every string
    /// over a small alphabet of kinds and lengths (up to 4 bytes).
    #[test]
    fn options_overrun_agrees_with_the_iterator() {
        let alphabet = [0u8, 1, 2, 3, 4, 7, 0x94];
        let mut strings = vec![vec![]];
        for len in 1..=4 {
            let mut next = Vec::new();
            for s in strings.iter().filter(|s| s.len() == len - 1) {
                for &b in &alphabet {
                    let mut t = s.clone();
                    t.push(b);
                    next.push(t);
                }
            }
            strings.extend(next);
        }
        for s in &strings {
            let from_iter = options(s).find_map(Result::err).map(|e| e.offset);
            assert_eq!(options_overrun(s), from_iter, "{s:?}");
        }
        assert_eq!(options_overrun(&[1, 1, 7, 3]), Some(2));
        assert_eq!(options_overrun(&[0, 7]), None);
    }

    /// RFC 1071 checksum over `data` (test-only; the real one lives in `sluice-checksum`).
    fn checksum(data: &[u8]) -> u16 {
        let mut sum: u32 = data
            .chunks(2)
            .map(|c| (u32::from(c[0]) << 8) | u32::from(*c.get(1).unwrap_or(&0)))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    /// UDP-carrying IPv4 header with a router-alert option (4 bytes, IHL 6), DF set, TTL 1,
    /// DSCP CS6 + ECT(0), 10.0.0.1 > 224.0.0.22, followed by a 4-byte payload.
    static PACKET_BYTES: [u8; 28] = [
        0x46, 0xc2, 0x00, 0x1c, 0x12, 0x34, 0x40, 0x00, 0x01, 0x11, 0xe7,
        0xbf, // cksum 0xe7bf
        0x0a, 0x00, 0x00, 0x01, 0xe0, 0x00, 0x00, 0x16, 0x94, 0x04, 0x00, 0x00, 0xde, 0xad, 0xbe,
        0xef,
    ];

    fn packet_bytes() -> [u8; 28] {
        PACKET_BYTES
    }

    fn repr() -> Repr {
        Repr {
            src_addr: Ipv4Addr::new(10, 0, 0, 1),
            dst_addr: Ipv4Addr::new(224, 0, 0, 22),
            protocol: ip_proto::UDP,
            ttl: 1,
            dscp: 48,
            ecn: 2,
            ident: 0x1234,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            options: OptionBuf::new(&[0x94, 0x04, 0x00, 0x00]).unwrap(),
            payload_len: 4,
        }
    }

    #[test]
    fn parse_fields() {
        let bytes = packet_bytes();
        assert_eq!(checksum(&bytes[..24]), 0, "vector checksum verifies");
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!((p.version(), p.ihl(), p.header_len()), (4, 6, 24));
        assert_eq!((p.dscp(), p.ecn(), p.tos()), (48, 2, 0xc2));
        assert_eq!((p.total_len(), p.ident()), (28, 0x1234));
        assert!(p.dont_frag() && !p.more_frags());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!((p.ttl(), p.protocol()), (1, ip_proto::UDP));
        assert_eq!(p.header_checksum(), 0xe7bf);
        assert_eq!(p.src_addr(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(224, 0, 0, 22));
        assert_eq!(p.options(), &[0x94, 0x04, 0x00, 0x00]);
        assert_eq!(p.header().len(), 24);
        let opts: Vec<_> = p.options_iter().collect::<Result<_, _>>().unwrap();
        assert_eq!(
            opts,
            vec![Ipv4Option {
                kind: option_kind::ROUTER_ALERT,
                data: &[0, 0]
            }]
        );
        assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(Repr::parse(&p).unwrap(), repr());
    }

    #[test]
    fn padding_is_not_payload() {
        let mut framed = packet_bytes().to_vec();
        framed.extend_from_slice(&[0; 18]);
        let p = Packet::new_checked(&framed[..]).unwrap();
        assert_eq!(p.payload().len(), 4);
    }

    #[test]
    fn emit_matches() {
        let r = repr();
        let mut buf = [0u8; 28];
        buf[24..].copy_from_slice(&PACKET_BYTES[24..]);
        let mut p = Packet::new_unchecked(&mut buf[..]);
        r.emit(&mut p).unwrap();
        assert_eq!(p.header_checksum(), 0);
        let c = checksum(p.header());
        p.set_header_checksum(c).unwrap();
        assert_eq!(p.payload_mut().len(), 4);
        assert_eq!(buf, packet_bytes());
        assert_eq!((r.header_len(), r.buffer_len()), (24, 28));
    }

    #[test]
    fn setters() {
        let mut buf = packet_bytes();
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_more_frags(true).unwrap();
        p.set_frag_offset(1480).unwrap();
        p.set_dont_frag(false).unwrap();
        p.set_ecn(3).unwrap();
        p.set_dscp(10).unwrap();
        assert!(p.more_frags() && !p.dont_frag());
        assert_eq!((p.frag_offset(), p.ecn(), p.dscp()), (1480, 3, 10));
        p.options_mut().copy_from_slice(&[1, 1, 1, 0]);
        assert!(check_options(p.options()).is_ok());
    }

    #[test]
    fn rejects_truncation() {
        let bytes = packet_bytes();
        for n in 0..bytes.len() {
            let err = Packet::new_checked(&bytes[..n]).unwrap_err();
            assert_eq!(err.layer, Layer::Ipv4);
            assert!(Repr::parse(&Packet::new_unchecked(&bytes[..n])).is_err());
        }
    }

    #[test]
    fn rejects_malformed() {
        let reason = |b: &[u8]| Repr::parse(&Packet::new_unchecked(b)).unwrap_err().reason;
        for ihl in 0..5u8 {
            let mut b = packet_bytes();
            b[0] = 0x40 | ihl;
            assert_eq!(reason(&b), Reason::BadIhl(ihl));
        }
        let mut b = packet_bytes();
        b[0] = 0x4f;
        assert_eq!(reason(&b), Reason::Truncated { need: 60, have: 28 });
        let mut b = packet_bytes();
        b[3] = 20;
        assert_eq!(
            reason(&b),
            Reason::BadTotalLength {
                claimed: 20,
                available: 28
            }
        );
        b[3] = 29;
        assert_eq!(
            reason(&b),
            Reason::BadTotalLength {
                claimed: 29,
                available: 28
            }
        );
        let mut b = packet_bytes();
        b[0] = 0x66;
        assert_eq!(reason(&b), Reason::BadVersion(6));
        let mut b = packet_bytes();
        b[21] = 5; // router alert claims 5 bytes in a 4-byte options area
        let e = Repr::parse(&Packet::new_unchecked(&b[..])).unwrap_err();
        assert_eq!((e.reason, e.offset), (Reason::OptionOverflow, 20));
        b[21] = 1;
        assert_eq!(reason(&b), Reason::OptionOverflow);
    }

    #[test]
    fn option_walk() {
        assert!(
            check_options(&[1, 1, 0, 0xff]).is_ok(),
            "bytes after END are padding"
        );
        assert!(check_options(&[7, 7, 4, 0, 0, 0, 0, 0]).is_ok());
        assert!(check_options(&[7]).is_err());
        assert!(check_options(&[7, 0]).is_err());
        assert!(check_options(&[7, 3, 4]).is_ok());
        assert!(check_options(&[7, 4, 4]).is_err());
        assert!(OptionBuf::<40>::new(&[1; 3]).is_none());
        assert!(OptionBuf::<40>::new(&[1; 44]).is_none());
        assert_eq!(OptionBuf::<40>::default(), OptionBuf::EMPTY);
    }

    fn arb_options() -> impl Strategy<Value = Vec<u8>> {
        let tlv = prop_oneof![
            Just(vec![option_kind::NOP]),
            proptest::collection::vec(any::<u8>(), 0..8).prop_map(|d| {
                let mut v = vec![option_kind::RECORD_ROUTE, d.len() as u8 + 2];
                v.extend(d);
                v
            }),
        ];
        proptest::collection::vec(tlv, 0..5).prop_map(|tlvs| {
            let mut v: Vec<u8> = Vec::new();
            for t in tlvs.into_iter().filter(|t| t.len() <= 36) {
                if v.len() + t.len() <= 36 {
                    v.extend(t);
                }
            }
            while !v.len().is_multiple_of(4) {
                v.push(option_kind::END);
            }
            v
        })
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..80)) {
            let p = Packet::new_unchecked(&data[..]);
            let _ = (p.version(), p.header_len(), p.total_len(), p.payload(), p.options());
            if let Ok(p) = Packet::new_checked(&data[..]) {
                let _ = (p.dscp(), p.ecn(), p.tos(), p.ident(), p.dont_frag(), p.more_frags());
                let _ = (p.frag_offset(), p.ttl(), p.protocol(), p.header_checksum());
                let _ = (p.src_addr(), p.dst_addr(), p.header(), p.payload());
                let _ = p.options_iter().count();
                let _ = Repr::parse(&p);
            }
        }

        #[test]
        fn repr_round_trips(
            src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(), protocol in any::<u8>(),
            ttl in any::<u8>(), dscp in 0u8..64, ecn in 0u8..4, ident in any::<u16>(),
            df in any::<bool>(), mf in any::<bool>(), frag in 0u16..8192,
            options in arb_options(), payload_len in 0usize..100,
        ) {
            let repr = Repr {
                src_addr: src.into(), dst_addr: dst.into(), protocol, ttl, dscp, ecn, ident,
                dont_frag: df, more_frags: mf, frag_offset: frag * 8,
                options: OptionBuf::new(&options).unwrap(), payload_len,
            };
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut buf[..])).unwrap();
            prop_assert_eq!(Repr::parse(&Packet::new_checked(&buf[..]).unwrap()).unwrap(), repr);
        }
    }
}
