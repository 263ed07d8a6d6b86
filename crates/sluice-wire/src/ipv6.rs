//! IPv6 headers and extension headers: zero-copy views, `Repr` builders, and a bounded walk of
//! the extension header chain.
//!
//! * [`Packet`] is the 40-byte fixed header and its payload. [`Packet::new_checked`] guarantees
//!   the header and the `payload_len` bytes it announces are in the buffer (jumbograms, payload
//!   length 0 with a jumbo option, are not supported and show an empty payload).
//! * [`ExtHeader`] views the generic extension header shape shared by Hop-by-Hop, Destination
//!   Options and Routing headers: next header, `hdr_ext_len`, and `(hdr_ext_len + 1) * 8` bytes.
//! * [`FragmentHeader`] views the 8-byte Fragment header, [`AuthHeader`] the IPsec AH
//!   (`(payload_len + 2) * 4` bytes).
//! * [`ext_headers`] walks the chain from the fixed header's next header, bounded by a count.
//!
//! After `new_checked` succeeds no accessor of these views panics; accessors on unchecked short
//! buffers read zeros, and setters return [`OutOfRange`] for a field that does not fit. Errors carry offset 0 (or, for the walk, the offset in the
//! walked buffer); the caller adds its base offset.

use crate::bytes::OutOfRange;
use crate::error::{ParseError, Reason};
use crate::ip_proto;
use crate::layout::Layer;
use crate::view::{self, array_at, range, range_mut, set_bytes, set_u16, set_u32};
use crate::view::{set_u8, u16_at, u32_at};
use core::net::Ipv6Addr;

/// Byte offsets of the IPv6 fixed header.
mod field {
    pub const VER_TC_FLOW: usize = 0;
    pub const LENGTH: usize = 4;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: usize = 8;
    pub const DST_ADDR: usize = 24;
    pub const PAYLOAD: usize = 40;
}

/// Byte offsets shared by the extension headers.
mod ext_field {
    pub const NXT_HDR: usize = 0;
    pub const LENGTH: usize = 1;
    pub const DATA: usize = 2;
    // Routing header.
    pub const ROUTING_TYPE: usize = 2;
    pub const SEGMENTS_LEFT: usize = 3;
    // Fragment header.
    pub const FRAG_OFF_M: usize = 2;
    pub const FRAG_IDENT: usize = 4;
    // Authentication header.
    pub const AH_SPI: usize = 4;
    pub const AH_SEQ: usize = 8;
    pub const AH_ICV: usize = 12;
}

/// Length of the IPv6 fixed header.
pub const HEADER_LEN: usize = field::PAYLOAD;
/// Smallest extension header (and the unit of Hop-by-Hop/DstOpts/Routing lengths).
pub const EXT_MIN_LEN: usize = 8;
/// Length of the Fragment header.
pub const FRAGMENT_LEN: usize = 8;
/// Smallest Authentication header (no ICV).
pub const AH_MIN_LEN: usize = 12;

/// Whether `proto` is an extension header [`ext_headers`] walks (Hop-by-Hop, Routing, Fragment,
/// AH, Destination Options). ESP is not: its contents are encrypted.
pub const fn is_ext_header(proto: u8) -> bool {
    matches!(
        proto,
        ip_proto::HOPOPTS
            | ip_proto::ROUTING
            | ip_proto::FRAGMENT
            | ip_proto::AH
            | ip_proto::DSTOPTS
    )
}

view! {
    /// A zero-copy view of an IPv6 fixed header and its payload.
    ///
    /// Contract: once [`Packet::new_checked`] succeeded, no accessor panics.
    pub struct Packet {
        /// Payload length (bytes after the fixed header, extension headers included).
        payload_len, set_payload_len: u16 @ field::LENGTH;

        /// The next header: first extension header or upper-layer protocol.
        next_header, set_next_header: u8 @ field::NXT_HDR;

        /// Hop limit.
        hop_limit, set_hop_limit: u8 @ field::HOP_LIMIT;
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks the lengths: `Truncated` below 40 bytes, `BadTotalLength` when the payload length
    /// runs past the buffer. The version is checked by [`Repr::parse`].
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        view::need(Layer::Ipv6, HEADER_LEN, have)?;
        let claimed = HEADER_LEN + usize::from(self.payload_len());
        if claimed > have {
            let reason = Reason::BadTotalLength {
                claimed,
                available: have,
            };
            return Err(view::err(Layer::Ipv6, reason));
        }
        Ok(())
    }

    fixed_view_len!(HEADER_LEN);

    fn word0(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::VER_TC_FLOW)
    }

    /// The version nibble (6 for IPv6).
    pub fn version(&self) -> u8 {
        (self.word0() >> 28) as u8
    }

    /// Traffic class (DSCP and ECN).
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }

    /// Differentiated services code point.
    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }

    /// Explicit congestion notification bits.
    pub fn ecn(&self) -> u8 {
        self.traffic_class() & 0x03
    }

    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0x000f_ffff
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(array_at::<16>(self.buffer.as_ref(), field::SRC_ADDR))
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(array_at::<16>(self.buffer.as_ref(), field::DST_ADDR))
    }

    /// The payload: `payload_len` bytes after the fixed header (padding excluded).
    pub fn payload(&self) -> &[u8] {
        let end = HEADER_LEN + usize::from(self.payload_len());
        range(self.buffer.as_ref(), field::PAYLOAD..end)
    }

    /// Walks the extension headers of the payload, at most `max` of them (see [`ext_headers`]).
    pub fn ext_headers(&self, max: usize) -> ExtHeaders<'_> {
        ext_headers(self.next_header(), self.payload(), max)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_word0(&mut self, mask: u32, value: u32) -> Result<(), OutOfRange> {
        let w = (self.word0() & !mask) | (value & mask);
        set_u32(self.buffer.as_mut(), field::VER_TC_FLOW, w)?;
        Ok(())
    }

    /// Sets the version nibble.
    pub fn set_version(&mut self, version: u8) -> Result<(), OutOfRange> {
        self.set_word0(0xf000_0000, u32::from(version) << 28)?;
        Ok(())
    }

    /// Sets the traffic class.
    pub fn set_traffic_class(&mut self, tc: u8) -> Result<(), OutOfRange> {
        self.set_word0(0x0ff0_0000, u32::from(tc) << 20)?;
        Ok(())
    }

    /// Sets the flow label (low 20 bits).
    pub fn set_flow_label(&mut self, label: u32) -> Result<(), OutOfRange> {
        self.set_word0(0x000f_ffff, label)?;
        Ok(())
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, addr: Ipv6Addr) -> Result<(), OutOfRange> {
        set_bytes(self.buffer.as_mut(), field::SRC_ADDR, &addr.octets())?;
        Ok(())
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, addr: Ipv6Addr) -> Result<(), OutOfRange> {
        set_bytes(self.buffer.as_mut(), field::DST_ADDR, &addr.octets())?;
        Ok(())
    }

    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + usize::from(self.payload_len());
        range_mut(self.buffer.as_mut(), field::PAYLOAD..end)
    }
}

/// The parsed form of an IPv6 fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// Next header (extension header or upper-layer protocol).
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class (DSCP and ECN).
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Payload length (extension headers included).
    pub payload_len: usize,
}

impl Repr {
    /// Parses a fixed header: lengths ([`Packet::check_len`]) and version 6
    /// (`Reason::BadVersion`). Extension headers are left to [`ext_headers`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr, ParseError> {
        packet.check_len()?;
        if packet.version() != 6 {
            return Err(view::err(Layer::Ipv6, Reason::BadVersion(packet.version())));
        }
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header: packet.next_header(),
            hop_limit: packet.hop_limit(),
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
            payload_len: usize::from(packet.payload_len()),
        })
    }

    /// Length of the fixed header: [`HEADER_LEN`].
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Length of the whole packet: fixed header plus payload.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the fixed header into `packet` (which must hold [`HEADER_LEN`] bytes: [`OutOfRange`]
    /// at the first field that does not fit). The payload length saturates at 65535.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
    ) -> Result<(), OutOfRange> {
        set_u32(packet.buffer.as_mut(), field::VER_TC_FLOW, 0)?;
        packet.set_version(6)?;
        packet.set_traffic_class(self.traffic_class)?;
        packet.set_flow_label(self.flow_label)?;
        packet.set_payload_len(u16::try_from(self.payload_len).unwrap_or(u16::MAX))?;
        packet.set_next_header(self.next_header)?;
        packet.set_hop_limit(self.hop_limit)?;
        packet.set_src_addr(self.src_addr)?;
        packet.set_dst_addr(self.dst_addr)?;
        Ok(())
    }
}

/// Layer used by the extension header views, which do not know their own protocol number;
/// [`ext_headers`] reports the right one.
const EXT_LAYER: Layer = Layer::Ipv6Ext(ip_proto::HOPOPTS);

view! {
    /// A zero-copy view of a Hop-by-Hop, Destination Options or Routing header:
    /// next header(1), `hdr_ext_len`(1), then data up to `(hdr_ext_len + 1) * 8` bytes in all.
    ///
    /// Contract: once [`ExtHeader::new_checked`] succeeded, the whole header is in the buffer and no
    /// accessor panics. Its errors name `Layer::Ipv6Ext(0)` since the view does not know its kind.
    pub struct ExtHeader {
        /// The next header.
        next_header, set_next_header: u8 @ ext_field::NXT_HDR;

        /// The raw length field, in 8-byte units not counting the first 8 bytes.
        hdr_ext_len, set_hdr_ext_len: u8 @ ext_field::LENGTH;

        /// Routing header only: segments left.
        segments_left, set_segments_left: u8 @ ext_field::SEGMENTS_LEFT;
    }
}

impl<T: AsRef<[u8]>> ExtHeader<T> {
    /// Checks the lengths: `Truncated` below 8 bytes, `OptionOverflow` when the header is longer
    /// than the buffer.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        view::need(EXT_LAYER, EXT_MIN_LEN, have)?;
        if self.header_len() > have {
            return Err(view::err(EXT_LAYER, Reason::OptionOverflow));
        }
        Ok(())
    }

    /// Header length in bytes: `(hdr_ext_len + 1) * 8`.
    pub fn header_len(&self) -> usize {
        (usize::from(self.hdr_ext_len()) + 1) * 8
    }

    /// The bytes after the two fixed bytes: options (HBH, DstOpts) or routing data.
    pub fn data(&self) -> &[u8] {
        range(self.buffer.as_ref(), ext_field::DATA..self.header_len())
    }

    getters! {
        /// Routing header only: the routing type.
        fn routing_type -> u8 = u8_at(ext_field::ROUTING_TYPE);
    }

    /// The bytes after this header.
    pub fn payload(&self) -> &[u8] {
        range(self.buffer.as_ref(), self.header_len()..usize::MAX)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ExtHeader<T> {
    /// The data bytes, mutably.
    pub fn data_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        range_mut(self.buffer.as_mut(), ext_field::DATA..end)
    }

    /// The bytes after this header, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        range_mut(self.buffer.as_mut(), start..usize::MAX)
    }
}

/// The parsed form of a Hop-by-Hop, Destination Options or Routing header: the next header and
/// the data bytes (borrowed from the parsed buffer; `data.len()` is `6 + 8k`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExtHeaderRepr<'a> {
    /// Next header.
    pub next_header: u8,
    /// Data after the next-header and length bytes.
    pub data: &'a [u8],
}

impl<'a> ExtHeaderRepr<'a> {
    /// Parses an extension header.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        header: &ExtHeader<&'a T>,
    ) -> Result<ExtHeaderRepr<'a>, ParseError> {
        header.check_len()?;
        let whole: &'a T = header.buffer;
        let buf: &'a [u8] = whole.as_ref();
        Ok(ExtHeaderRepr {
            next_header: header.next_header(),
            data: range(buf, ext_field::DATA..header.header_len()),
        })
    }

    /// Header length in bytes: the data plus two, rounded up to a multiple of 8 (at most 2048).
    pub const fn header_len(&self) -> usize {
        let len = (self.data.len() + ext_field::DATA).div_ceil(8) * 8;
        if len < EXT_MIN_LEN {
            EXT_MIN_LEN
        } else if len > 2048 {
            2048
        } else {
            len
        }
    }

    /// Bytes [`ExtHeaderRepr::emit`] writes: [`ExtHeaderRepr::header_len`].
    pub const fn buffer_len(&self) -> usize {
        self.header_len()
    }

    /// Writes the header into `header` (which must hold [`ExtHeaderRepr::header_len`] bytes).
    /// Data shorter than the header is followed by zeros (Pad1 options); keep `data.len() = 6 + 8k`
    /// for exact round trips.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        header: &mut ExtHeader<T>,
    ) -> Result<(), OutOfRange> {
        header.set_next_header(self.next_header)?;
        header.set_hdr_ext_len((self.header_len() / 8 - 1) as u8)?;
        let data = header.data_mut();
        data.fill(0);
        let n = self.data.len().min(data.len());
        if let (Some(dst), Some(src)) = (data.get_mut(..n), self.data.get(..n)) {
            dst.copy_from_slice(src);
        }
        Ok(())
    }
}

view! {
    /// A zero-copy view of the 8-byte IPv6 Fragment header: next header(1), reserved(1),
    /// offset(13 bits) + reserved(2) + M(1), identification(4).
    ///
    /// Contract: once [`FragmentHeader::new_checked`] succeeded, no accessor panics.
    pub struct FragmentHeader {
        /// The next header (of the fragmentable part).
        next_header, set_next_header: u8 @ ext_field::NXT_HDR;

        /// Identification.
        ident, set_ident: u32 @ ext_field::FRAG_IDENT;
    }
}

impl<T: AsRef<[u8]>> FragmentHeader<T> {
    fixed_view_len!(FRAGMENT_LEN, Layer::Ipv6Ext(ip_proto::FRAGMENT));

    /// Fragment offset in bytes (the 13-bit field times 8).
    pub fn frag_offset(&self) -> u16 {
        u16_at(self.buffer.as_ref(), ext_field::FRAG_OFF_M) & !0x7
    }

    /// The more-fragments flag.
    pub fn more_frags(&self) -> bool {
        u16_at(self.buffer.as_ref(), ext_field::FRAG_OFF_M) & 1 != 0
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        range(self.buffer.as_ref(), FRAGMENT_LEN..usize::MAX)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> FragmentHeader<T> {
    /// Sets the fragment offset in bytes (rounded down to a multiple of 8); clears the reserved
    /// bits.
    pub fn set_frag_offset(&mut self, offset: u16) -> Result<(), OutOfRange> {
        let m = u16::from(self.more_frags());
        set_u16(
            self.buffer.as_mut(),
            ext_field::FRAG_OFF_M,
            (offset & !0x7) | m,
        )?;
        Ok(())
    }

    /// Sets the more-fragments flag.
    pub fn set_more_frags(&mut self, more: bool) -> Result<(), OutOfRange> {
        let v = (u16_at(self.buffer.as_ref(), ext_field::FRAG_OFF_M) & !1) | u16::from(more);
        set_u16(self.buffer.as_mut(), ext_field::FRAG_OFF_M, v)?;
        Ok(())
    }

    /// The bytes after the header, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        range_mut(self.buffer.as_mut(), FRAGMENT_LEN..usize::MAX)
    }
}

/// The parsed form of a Fragment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FragmentRepr {
    /// Next header.
    pub next_header: u8,
    /// Fragment offset in bytes (a multiple of 8).
    pub frag_offset: u16,
    /// More-fragments flag.
    pub more_frags: bool,
    /// Identification.
    pub ident: u32,
}

impl FragmentRepr {
    /// Parses a Fragment header.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        header: &FragmentHeader<&T>,
    ) -> Result<FragmentRepr, ParseError> {
        header.check_len()?;
        Ok(FragmentRepr {
            next_header: header.next_header(),
            frag_offset: header.frag_offset(),
            more_frags: header.more_frags(),
            ident: header.ident(),
        })
    }

    fixed_repr_len!(FRAGMENT_LEN);

    /// Writes the header (reserved fields zero) into `header`, which must hold 8 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        header: &mut FragmentHeader<T>,
    ) -> Result<(), OutOfRange> {
        header.set_next_header(self.next_header)?;
        set_u8(header.buffer.as_mut(), ext_field::LENGTH, 0)?;
        set_u16(header.buffer.as_mut(), ext_field::FRAG_OFF_M, 0)?;
        header.set_frag_offset(self.frag_offset)?;
        header.set_more_frags(self.more_frags)?;
        header.set_ident(self.ident)?;
        Ok(())
    }
}

view! {
    /// A zero-copy view of an IPsec Authentication header: next header(1), payload length(1),
    /// reserved(2), SPI(4), sequence number(4), ICV; `(payload_len + 2) * 4` bytes in all.
    ///
    /// Contract: once [`AuthHeader::new_checked`] succeeded, the whole header is in the buffer and no
    /// accessor panics.
    pub struct AuthHeader {
        /// The next header.
        next_header, set_next_header: u8 @ ext_field::NXT_HDR;

        /// The raw payload length field (4-byte words minus 2).
        payload_len, set_payload_len: u8 @ ext_field::LENGTH;

        /// Security parameters index.
        spi, set_spi: u32 @ ext_field::AH_SPI;

        /// Sequence number.
        seq_number, set_seq_number: u32 @ ext_field::AH_SEQ;
    }
}

impl<T: AsRef<[u8]>> AuthHeader<T> {
    /// Checks the lengths: `Truncated` below 12 bytes, `OptionOverflow` when the header claims
    /// fewer than 12 bytes or more than the buffer holds.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let layer = Layer::Ipv6Ext(ip_proto::AH);
        let have = self.buffer.as_ref().len();
        view::need(layer, AH_MIN_LEN, have)?;
        let len = self.header_len();
        if len < AH_MIN_LEN || len > have {
            return Err(view::err(layer, Reason::OptionOverflow));
        }
        Ok(())
    }

    /// Header length in bytes: `(payload_len + 2) * 4`.
    pub fn header_len(&self) -> usize {
        (usize::from(self.payload_len()) + 2) * 4
    }

    /// Integrity check value.
    pub fn icv(&self) -> &[u8] {
        range(self.buffer.as_ref(), ext_field::AH_ICV..self.header_len())
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        range(self.buffer.as_ref(), self.header_len()..usize::MAX)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AuthHeader<T> {
    /// The ICV, mutably.
    pub fn icv_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        range_mut(self.buffer.as_mut(), ext_field::AH_ICV..end)
    }
}

/// One extension header found by [`ext_headers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExtInfo {
    /// Its protocol number (0, 43, 44, 51 or 60).
    pub proto: u8,
    /// Its offset in the walked buffer.
    pub offset: usize,
    /// Its length in bytes.
    pub len: usize,
    /// The next header it announces.
    pub next_header: u8,
}

/// Walks the extension header chain of an IPv6 payload.
///
/// `first` is the fixed header's next header and `buf` the payload (the bound: nothing past it is
/// read). Yields each extension header ([`is_ext_header`]) in order and stops at the first other
/// protocol, or after a Fragment header with a non-zero offset (what follows it is not a header).
/// At most `max` headers are yielded; one more yields `Reason::TooManyExtensionHeaders`. A header
/// cut short yields `Truncated`, one longer than `buf` yields `OptionOverflow`; errors carry
/// `Layer::Ipv6Ext(proto)` and the header's offset in `buf`, and end the walk. Afterwards
/// [`ExtHeaders::next_header`] and [`ExtHeaders::offset`] give the upper-layer protocol and its
/// offset.
pub fn ext_headers(first: u8, buf: &[u8], max: usize) -> ExtHeaders<'_> {
    ExtHeaders {
        buf,
        next: first,
        offset: 0,
        seen: 0,
        max,
        done: false,
        later_fragment: false,
    }
}

/// Iterator returned by [`ext_headers`].
#[derive(Debug, Clone)]
pub struct ExtHeaders<'a> {
    buf: &'a [u8],
    next: u8,
    offset: usize,
    seen: usize,
    max: usize,
    done: bool,
    later_fragment: bool,
}

impl ExtHeaders<'_> {
    /// The next header after the headers walked so far (the upper-layer protocol once the walk
    /// has ended without error).
    pub fn next_header(&self) -> u8 {
        self.next
    }

    /// Offset in the buffer after the headers walked so far.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Whether the walk met a Fragment header with a non-zero offset.
    pub fn is_later_fragment(&self) -> bool {
        self.later_fragment
    }

    /// Runs the walk to its end: the upper-layer protocol and its offset in the buffer.
    pub fn finish(mut self) -> Result<(u8, usize), ParseError> {
        for item in self.by_ref() {
            item?;
        }
        Ok((self.next, self.offset))
    }

    fn header_len(&self, proto: u8, rest: &[u8]) -> Result<(usize, u8), Reason> {
        match proto {
            ip_proto::FRAGMENT => {
                let h = FragmentHeader::new_checked(rest).map_err(|e| e.reason)?;
                Ok((FRAGMENT_LEN, h.next_header()))
            }
            ip_proto::AH => {
                let h = AuthHeader::new_checked(rest).map_err(|e| e.reason)?;
                Ok((h.header_len(), h.next_header()))
            }
            _ => {
                let h = ExtHeader::new_checked(rest).map_err(|e| e.reason)?;
                Ok((h.header_len(), h.next_header()))
            }
        }
    }
}

impl Iterator for ExtHeaders<'_> {
    type Item = Result<ExtInfo, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        let proto = self.next;
        if self.done || !is_ext_header(proto) {
            return None;
        }
        let offset = self.offset;
        let fail = |reason| {
            Some(Err(ParseError {
                layer: Layer::Ipv6Ext(proto),
                offset,
                reason,
            }))
        };
        if self.seen >= self.max {
            self.done = true;
            return fail(Reason::TooManyExtensionHeaders);
        }
        let rest = range(self.buf, offset..usize::MAX);
        let (len, next_header) = match self.header_len(proto, rest) {
            Ok(v) => v,
            Err(reason) => {
                self.done = true;
                return fail(reason);
            }
        };
        if proto == ip_proto::FRAGMENT && FragmentHeader::new_unchecked(rest).frag_offset() != 0 {
            self.later_fragment = true;
            self.done = true;
        }
        self.seen += 1;
        self.offset = offset + len;
        self.next = next_header;
        Some(Ok(ExtInfo {
            proto,
            offset,
            len,
            next_header,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// IPv6 (EF traffic class, flow 0x12345, hop limit 64, 2001:db8::1 > 2001:db8::2) carrying
    /// Hop-by-Hop (router alert + PadN) > Routing (SRH type 4, one segment) > Fragment (offset 0,
    /// M, id 0xdeadbeef) > Destination Options (PadN) > UDP 1234 > 53.
    static PACKET_BYTES: [u8; 96] = [
        0x6b, 0x81, 0x23, 0x45, 0x00, 0x38, 0x00, 0x40, // ver/tc/flow, len 56, HBH, hop 64
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, // src
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, // dst
        // Hop-by-Hop: next Routing, len 0; router alert (MLD), PadN(0).
        0x2b, 0x00, 0x05, 0x02, 0x00, 0x00, 0x01, 0x00,
        // Routing: next Fragment, len 2, SRH, segments left 0, last entry 0, flags 0, tag 0.
        0x2c, 0x02, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, // segment[0]
        // Fragment: next DstOpts, offset 0, M, id 0xdeadbeef.
        0x3c, 0x00, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef,
        // Destination Options: next UDP, len 0, PadN(4).
        0x11, 0x00, 0x01, 0x04, 0x00, 0x00, 0x00, 0x00,
        // UDP 1234 > 53, length 8, no checksum.
        0x04, 0xd2, 0x00, 0x35, 0x00, 0x08, 0x00, 0x00,
    ];

    fn repr() -> Repr {
        Repr {
            src_addr: "2001:db8::1".parse().unwrap(),
            dst_addr: "2001:db8::2".parse().unwrap(),
            next_header: ip_proto::HOPOPTS,
            hop_limit: 64,
            traffic_class: 0xb8,
            flow_label: 0x12345,
            payload_len: 56,
        }
    }

    #[test]
    fn parse_fixed_header() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(
            (p.version(), p.traffic_class(), p.dscp(), p.ecn()),
            (6, 0xb8, 46, 0)
        );
        assert_eq!(
            (p.flow_label(), p.payload_len(), p.hop_limit()),
            (0x12345, 56, 64)
        );
        assert_eq!(p.next_header(), ip_proto::HOPOPTS);
        assert_eq!(p.payload().len(), 56);
        assert_eq!(Repr::parse(&p).unwrap(), repr());
        let mut padded = PACKET_BYTES.to_vec();
        padded.push(0);
        assert_eq!(
            Packet::new_checked(&padded[..]).unwrap().payload().len(),
            56
        );
    }

    #[test]
    fn walk_ext_headers() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        let found: Vec<_> = p.ext_headers(8).collect::<Result<_, _>>().unwrap();
        let info = |proto, offset, len, next_header| ExtInfo {
            proto,
            offset,
            len,
            next_header,
        };
        assert_eq!(
            found,
            vec![
                info(ip_proto::HOPOPTS, 0, 8, ip_proto::ROUTING),
                info(ip_proto::ROUTING, 8, 24, ip_proto::FRAGMENT),
                info(ip_proto::FRAGMENT, 32, 8, ip_proto::DSTOPTS),
                info(ip_proto::DSTOPTS, 40, 8, ip_proto::UDP),
            ]
        );
        assert_eq!(p.ext_headers(8).finish().unwrap(), (ip_proto::UDP, 48));
        let e = p.ext_headers(3).finish().unwrap_err();
        assert_eq!(e.reason, Reason::TooManyExtensionHeaders);
        assert_eq!((e.layer, e.offset), (Layer::Ipv6Ext(ip_proto::DSTOPTS), 40));
        assert_eq!(
            ext_headers(ip_proto::TCP, &[], 8).finish().unwrap(),
            (ip_proto::TCP, 0)
        );
    }

    #[test]
    fn ext_header_views() {
        let payload = &PACKET_BYTES[40..];
        let hbh = ExtHeader::new_checked(payload).unwrap();
        assert_eq!(
            (hbh.next_header(), hbh.hdr_ext_len(), hbh.header_len()),
            (43, 0, 8)
        );
        assert_eq!(hbh.data(), &[0x05, 0x02, 0x00, 0x00, 0x01, 0x00]);
        let rt = ExtHeader::new_checked(hbh.payload()).unwrap();
        assert_eq!(
            (rt.header_len(), rt.routing_type(), rt.segments_left()),
            (24, 4, 0)
        );
        let frag = FragmentHeader::new_checked(rt.payload()).unwrap();
        assert_eq!(
            FragmentRepr::parse(&frag).unwrap(),
            FragmentRepr {
                next_header: 60,
                frag_offset: 0,
                more_frags: true,
                ident: 0xdeadbeef
            }
        );
        let dst = ExtHeader::new_checked(frag.payload()).unwrap();
        assert_eq!(dst.next_header(), ip_proto::UDP);
        assert_eq!(dst.payload(), &PACKET_BYTES[88..]);
        let r = ExtHeaderRepr::parse(&rt).unwrap();
        assert_eq!((r.next_header, r.data.len(), r.header_len()), (44, 22, 24));
    }

    #[test]
    fn emit_matches() {
        let mut buf = [0u8; 96];
        buf[40..].copy_from_slice(&PACKET_BYTES[40..]);
        repr()
            .emit(&mut Packet::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(buf, PACKET_BYTES);

        let mut ext = [0xffu8; 48];
        let mut at = 0;
        for range in [0..8, 8..32, 40..48] {
            let src = &PACKET_BYTES[40 + range.start..40 + range.end];
            let r = ExtHeaderRepr::parse(&ExtHeader::new_checked(src).unwrap()).unwrap();
            r.emit(&mut ExtHeader::new_unchecked(
                &mut ext[range.start..range.end],
            ))
            .unwrap();
            at += r.buffer_len();
        }
        let frag = FragmentRepr {
            next_header: 60,
            frag_offset: 0,
            more_frags: true,
            ident: 0xdeadbeef,
        };
        frag.emit(&mut FragmentHeader::new_unchecked(&mut ext[32..40]))
            .unwrap();
        assert_eq!(at + frag.buffer_len(), 48);
        assert_eq!(ext[..], PACKET_BYTES[40..88]);
    }

    #[test]
    fn auth_header() {
        // AH: next TCP, payload len 4 (24 bytes), SPI 0x100, seq 7, 12-byte ICV.
        let mut ah = vec![6, 4, 0, 0, 0, 0, 1, 0, 0, 0, 0, 7];
        ah.extend_from_slice(&[0xaa; 12]);
        let h = AuthHeader::new_checked(&ah[..]).unwrap();
        assert_eq!(
            (h.next_header(), h.header_len(), h.spi(), h.seq_number()),
            (6, 24, 0x100, 7)
        );
        assert_eq!(h.icv(), &[0xaa; 12]);
        assert!(h.payload().is_empty());
        assert_eq!(
            ext_headers(ip_proto::AH, &ah, 8).finish().unwrap(),
            (ip_proto::TCP, 24)
        );
        for n in 0..ah.len() {
            assert!(AuthHeader::new_checked(&ah[..n]).is_err());
        }
        ah[1] = 0;
        assert_eq!(
            AuthHeader::new_checked(&ah[..]).unwrap_err().reason,
            Reason::OptionOverflow
        );
        let mut h = AuthHeader::new_unchecked(&mut ah[..]);
        h.set_payload_len(4).unwrap();
        h.set_spi(9).unwrap();
        h.set_seq_number(10).unwrap();
        h.set_next_header(17).unwrap();
        h.icv_mut().fill(0);
        assert_eq!((h.spi(), h.seq_number(), h.next_header()), (9, 10, 17));
    }

    #[test]
    fn later_fragment_stops_walk() {
        let frag = [ip_proto::TCP, 0, 0x05, 0xc8, 0, 0, 0, 1, 0xff];
        let mut walk = ext_headers(ip_proto::FRAGMENT, &frag, 8);
        assert_eq!(walk.next().unwrap().unwrap().next_header, ip_proto::TCP);
        assert!(walk.next().is_none());
        assert!(walk.is_later_fragment());
        assert_eq!(FragmentHeader::new_unchecked(&frag[..]).frag_offset(), 1480);
    }

    #[test]
    fn rejects_truncation() {
        for n in 0..PACKET_BYTES.len() {
            let e = Packet::new_checked(&PACKET_BYTES[..n]).unwrap_err();
            assert_eq!(e.layer, Layer::Ipv6);
        }
        // Every cut inside the extension headers makes the walk fail.
        for n in 0..48 {
            let walk = ext_headers(ip_proto::HOPOPTS, &PACKET_BYTES[40..40 + n], 8);
            assert!(walk.finish().is_err(), "cut at {n}");
        }
        for n in 0..8 {
            assert!(ExtHeader::new_checked(&PACKET_BYTES[40..40 + n]).is_err());
            assert!(FragmentHeader::new_checked(&PACKET_BYTES[80..80 + n]).is_err());
        }
    }

    #[test]
    fn rejects_malformed() {
        let mut b = PACKET_BYTES;
        b[0] = 0x4b;
        let e = Repr::parse(&Packet::new_unchecked(&b[..])).unwrap_err();
        assert_eq!(e.reason, Reason::BadVersion(4));
        b = PACKET_BYTES;
        b[5] = 57;
        let e = Packet::new_checked(&b[..]).unwrap_err();
        assert_eq!(
            e.reason,
            Reason::BadTotalLength {
                claimed: 97,
                available: 96
            }
        );
        // Routing header claiming 32 bytes where 24 remain before the end of the payload.
        let mut b = PACKET_BYTES;
        b[49] = 0x08;
        let e = Packet::new_checked(&b[..])
            .unwrap()
            .ext_headers(8)
            .finish()
            .unwrap_err();
        assert_eq!(
            e,
            ParseError {
                layer: Layer::Ipv6Ext(43),
                offset: 8,
                reason: Reason::OptionOverflow
            }
        );
    }

    #[test]
    fn setters() {
        let mut b = PACKET_BYTES;
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_flow_label(0xfffff).unwrap();
        p.set_traffic_class(0x01).unwrap();
        assert_eq!(
            (p.version(), p.traffic_class(), p.flow_label()),
            (6, 1, 0xfffff)
        );
        p.payload_mut()[0] = 6;
        let mut f = FragmentHeader::new_unchecked(&mut b[80..88]);
        f.set_frag_offset(8).unwrap();
        f.set_more_frags(false).unwrap();
        assert_eq!((f.frag_offset(), f.more_frags()), (8, false));
        f.payload_mut();
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..120)) {
            if let Ok(p) = Packet::new_checked(&data[..]) {
                let _ = (p.version(), p.traffic_class(), p.dscp(), p.ecn(), p.flow_label());
                let _ = (p.payload_len(), p.next_header(), p.hop_limit(), p.src_addr());
                let _ = (p.dst_addr(), p.payload(), Repr::parse(&p));
                let _ = p.ext_headers(8).count();
            }
            for first in [0u8, 43, 44, 51, 60] {
                let _ = ext_headers(first, &data, 8).finish();
            }
            if let Ok(h) = ExtHeader::new_checked(&data[..]) {
                let _ = (h.next_header(), h.header_len(), h.data(), h.routing_type());
                let _ = (h.segments_left(), h.payload(), ExtHeaderRepr::parse(&h));
            }
            if let Ok(h) = FragmentHeader::new_checked(&data[..]) {
                let _ = (h.frag_offset(), h.more_frags(), h.ident(), h.payload());
            }
            if let Ok(h) = AuthHeader::new_checked(&data[..]) {
                let _ = (h.spi(), h.seq_number(), h.icv(), h.payload(), h.next_header());
            }
        }

        #[test]
        fn repr_round_trips(
            src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(), next_header in any::<u8>(),
            hop_limit in any::<u8>(), traffic_class in any::<u8>(), flow_label in 0u32..0x10_0000,
            payload_len in 0usize..64, ident in any::<u32>(), frag in 0u16..8192,
            more in any::<bool>(), words in 0usize..4,
        ) {
            let repr = Repr {
                src_addr: src.into(), dst_addr: dst.into(), next_header, hop_limit,
                traffic_class, flow_label, payload_len,
            };
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut buf[..])).unwrap();
            prop_assert_eq!(Repr::parse(&Packet::new_checked(&buf[..]).unwrap()).unwrap(), repr);

            let f = FragmentRepr { next_header, frag_offset: frag * 8, more_frags: more, ident };
            let mut fb = [0u8; 8];
            f.emit(&mut FragmentHeader::new_unchecked(&mut fb)).unwrap();
            prop_assert_eq!(FragmentRepr::parse(&FragmentHeader::new_checked(&fb[..]).unwrap()).unwrap(), f);

            let data = vec![0x5a; 6 + 8 * words];
            let e = ExtHeaderRepr { next_header, data: &data };
            let mut eb = vec![0u8; e.buffer_len()];
            e.emit(&mut ExtHeader::new_unchecked(&mut eb[..])).unwrap();
            prop_assert_eq!(ExtHeaderRepr::parse(&ExtHeader::new_checked(&eb[..]).unwrap()).unwrap(), e);
        }
    }
}
