//! TCP headers: a zero-copy [`Packet`] view, [`Flags`], an option iterator, and the [`Repr`]
//! builder.
//!
//! [`Packet::new_checked`] guarantees at least 20 bytes and a data offset between 5 and the
//! buffer length; after it succeeds no accessor panics (accessors on an unchecked short buffer read
//! zeros, and setters return [`OutOfRange`] for a field that does not fit). The checksum is only exposed as a field: computing it (with the IP
//! pseudo-header) is the job of `sluice-checksum`, so [`Repr::emit`] writes it as zero.

use crate::bytes::OutOfRange;
use crate::error::{ParseError, Reason};
use crate::ipv4::OptionBuf;
use crate::layout::Layer;
use crate::view::{self, range, range_mut, set_bytes, set_u16, set_u32};
use crate::view::{set_u8, u16_at, u32_at, u8_at};
use core::{fmt, ops};

/// Byte offsets of the TCP header.
mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const SEQ_NUM: usize = 4;
    pub const ACK_NUM: usize = 8;
    pub const FLAGS: usize = 12;
    pub const WIN_SIZE: usize = 14;
    pub const CHECKSUM: usize = 16;
    pub const URGENT: usize = 18;
    pub const OPTIONS: usize = 20;
}

/// Length of the TCP header without options.
pub const HEADER_LEN: usize = field::OPTIONS;
/// Most option bytes a TCP header can carry (data offset 15).
pub const MAX_OPTIONS_LEN: usize = 40;

/// Owned option bytes of a [`Repr`] (a multiple of 4, at most 40).
pub type Options = OptionBuf<MAX_OPTIONS_LEN>;

/// Mask of the flag bits (NS and the eight classic flags) in the data-offset/flags word.
const FLAGS_MASK: u16 = 0x01ff;

/// The TCP flags (NS and CWR…FIN), as a bit set.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(u16);

impl Flags {
    /// No more data from sender.
    pub const FIN: Flags = Flags(0x001);
    /// Synchronize sequence numbers.
    pub const SYN: Flags = Flags(0x002);
    /// Reset the connection.
    pub const RST: Flags = Flags(0x004);
    /// Push function.
    pub const PSH: Flags = Flags(0x008);
    /// Acknowledgment field is significant.
    pub const ACK: Flags = Flags(0x010);
    /// Urgent pointer field is significant.
    pub const URG: Flags = Flags(0x020);
    /// ECN echo.
    pub const ECE: Flags = Flags(0x040);
    /// Congestion window reduced.
    pub const CWR: Flags = Flags(0x080);
    /// ECN nonce (RFC 3540, historic).
    pub const NS: Flags = Flags(0x100);

    const NAMES: [(Flags, &'static str); 9] = [
        (Flags::FIN, "FIN"),
        (Flags::SYN, "SYN"),
        (Flags::RST, "RST"),
        (Flags::PSH, "PSH"),
        (Flags::ACK, "ACK"),
        (Flags::URG, "URG"),
        (Flags::ECE, "ECE"),
        (Flags::CWR, "CWR"),
        (Flags::NS, "NS"),
    ];

    /// The empty set.
    pub const fn empty() -> Flags {
        Flags(0)
    }

    /// Flags from raw bits; bits outside the nine flags are dropped.
    pub const fn from_bits_truncate(bits: u16) -> Flags {
        Flags(bits & FLAGS_MASK)
    }

    /// The raw bits.
    pub const fn bits(self) -> u16 {
        self.0
    }

    /// Whether every flag in `other` is set.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any flag in `other` is set.
    pub const fn intersects(self, other: Flags) -> bool {
        self.0 & other.0 != 0
    }

    /// Whether no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Sets the flags in `other`.
    pub fn insert(&mut self, other: Flags) {
        self.0 |= other.0;
    }

    /// Clears the flags in `other`.
    pub fn remove(&mut self, other: Flags) {
        self.0 &= !other.0;
    }
}

impl ops::BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        Flags(self.0 | rhs.0)
    }
}

impl ops::BitOrAssign for Flags {
    fn bitor_assign(&mut self, rhs: Flags) {
        self.0 |= rhs.0;
    }
}

impl ops::BitAnd for Flags {
    type Output = Flags;
    fn bitand(self, rhs: Flags) -> Flags {
        Flags(self.0 & rhs.0)
    }
}

impl fmt::Debug for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Flags(")?;
        let mut first = true;
        for (flag, name) in Flags::NAMES {
            if self.contains(flag) {
                write!(f, "{}{name}", if first { "" } else { "|" })?;
                first = false;
            }
        }
        write!(f, ")")
    }
}

/// Option kinds.
pub mod option_kind {
    /// End of option list.
    pub const END: u8 = 0;
    /// No operation (padding).
    pub const NOP: u8 = 1;
    /// Maximum segment size.
    pub const MSS: u8 = 2;
    /// Window scale.
    pub const WINDOW_SCALE: u8 = 3;
    /// SACK permitted.
    pub const SACK_PERMITTED: u8 = 4;
    /// Selective acknowledgement blocks.
    pub const SACK: u8 = 5;
    /// Timestamps.
    pub const TIMESTAMPS: u8 = 8;
}

/// Up to four SACK blocks `(left edge, right edge)`, held inline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SackBlocks {
    blocks: [(u32, u32); 4],
    len: u8,
}

impl SackBlocks {
    /// The blocks in `blocks`; `None` when there are none or more than four.
    pub fn new(blocks: &[(u32, u32)]) -> Option<SackBlocks> {
        let mut out = SackBlocks::default();
        out.blocks.get_mut(..blocks.len())?.copy_from_slice(blocks);
        out.len = u8::try_from(blocks.len()).ok().filter(|&n| n > 0)?;
        Some(out)
    }

    /// The blocks.
    pub fn as_slice(&self) -> &[(u32, u32)] {
        self.blocks.get(..usize::from(self.len)).unwrap_or(&[])
    }
}

/// One TCP option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TcpOption<'a> {
    /// End of option list (kind 0).
    EndOfList,
    /// No operation (kind 1).
    NoOperation,
    /// Maximum segment size (kind 2, length 4).
    MaxSegmentSize(u16),
    /// Window scale shift count (kind 3, length 3).
    WindowScale(u8),
    /// SACK permitted (kind 4, length 2).
    SackPermitted,
    /// SACK blocks (kind 5, length 2 + 8n with n in 1..=4).
    Sack(SackBlocks),
    /// Timestamps (kind 8, length 10).
    Timestamps {
        /// Timestamp value.
        tsval: u32,
        /// Timestamp echo reply.
        tsecr: u32,
    },
    /// Any other option: kind and the bytes after the length byte.
    Unknown {
        /// Option kind.
        kind: u8,
        /// Option data.
        data: &'a [u8],
    },
}

impl TcpOption<'_> {
    /// Bytes the option takes on the wire.
    pub fn buffer_len(&self) -> usize {
        match self {
            TcpOption::EndOfList | TcpOption::NoOperation => 1,
            TcpOption::MaxSegmentSize(_) => 4,
            TcpOption::WindowScale(_) => 3,
            TcpOption::SackPermitted => 2,
            TcpOption::Sack(b) => 2 + 8 * b.as_slice().len(),
            TcpOption::Timestamps { .. } => 10,
            TcpOption::Unknown { data, .. } => 2 + data.len(),
        }
    }

    /// Writes the option at the start of `buf`; returns its length, or `None` when it does not fit
    /// (or an unknown option's data is longer than 253 bytes).
    pub fn emit(&self, buf: &mut [u8]) -> Option<usize> {
        let len = self.buffer_len();
        let out = buf.get_mut(..len)?;
        let len_u8 = u8::try_from(len).ok()?;
        let kind = match self {
            TcpOption::EndOfList => option_kind::END,
            TcpOption::NoOperation => option_kind::NOP,
            TcpOption::MaxSegmentSize(_) => option_kind::MSS,
            TcpOption::WindowScale(_) => option_kind::WINDOW_SCALE,
            TcpOption::SackPermitted => option_kind::SACK_PERMITTED,
            TcpOption::Sack(_) => option_kind::SACK,
            TcpOption::Timestamps { .. } => option_kind::TIMESTAMPS,
            TcpOption::Unknown { kind, .. } => *kind,
        };
        set_u8(out, 0, kind).ok()?;
        if len > 1 {
            set_u8(out, 1, len_u8).ok()?;
        }
        match self {
            TcpOption::MaxSegmentSize(mss) => set_u16(out, 2, *mss).ok()?,
            TcpOption::WindowScale(shift) => set_u8(out, 2, *shift).ok()?,
            TcpOption::Sack(blocks) => {
                for (i, (left, right)) in blocks.as_slice().iter().enumerate() {
                    set_u32(out, 2 + 8 * i, *left).ok()?;
                    set_u32(out, 6 + 8 * i, *right).ok()?;
                }
            }
            TcpOption::Timestamps { tsval, tsecr } => {
                set_u32(out, 2, *tsval).ok()?;
                set_u32(out, 6, *tsecr).ok()?;
            }
            TcpOption::Unknown { data, .. } => set_bytes(out, 2, data).ok()?,
            _ => {}
        }
        Some(len)
    }
}

/// Iterator over TCP options; see [`options`].
#[derive(Debug, Clone)]
pub struct OptionIter<'a> {
    bytes: &'a [u8],
    pos: usize,
}

/// Iterates over the options in `bytes` (a header's options area). End-of-list is yielded once and
/// ends the walk (what follows is padding). A length byte that is missing, below 2, past the end
/// of `bytes`, or wrong for a known kind (MSS 4, WS 3, SACK-permitted 2, SACK 10/18/26/34,
/// timestamps 10) yields `Reason::OptionOverflow` with the option's offset in `bytes`, and ends
/// the walk.
pub fn options(bytes: &[u8]) -> OptionIter<'_> {
    OptionIter { bytes, pos: 0 }
}

impl<'a> OptionIter<'a> {
    fn parse_one(&self, kind: u8, data: &'a [u8]) -> Option<TcpOption<'a>> {
        let opt = match (kind, data.len()) {
            (option_kind::MSS, 2) => TcpOption::MaxSegmentSize(u16_at(data, 0)),
            (option_kind::WINDOW_SCALE, 1) => TcpOption::WindowScale(u8_at(data, 0)),
            (option_kind::SACK_PERMITTED, 0) => TcpOption::SackPermitted,
            (option_kind::SACK, n) if n % 8 == 0 && (8..=32).contains(&n) => {
                let mut blocks = [(0, 0); 4];
                for (i, block) in blocks.iter_mut().enumerate().take(n / 8) {
                    *block = (u32_at(data, 8 * i), u32_at(data, 8 * i + 4));
                }
                TcpOption::Sack(SackBlocks::new(blocks.get(..n / 8)?)?)
            }
            (option_kind::TIMESTAMPS, 8) => TcpOption::Timestamps {
                tsval: u32_at(data, 0),
                tsecr: u32_at(data, 4),
            },
            (
                option_kind::MSS
                | option_kind::WINDOW_SCALE
                | option_kind::SACK_PERMITTED
                | option_kind::SACK
                | option_kind::TIMESTAMPS,
                _,
            ) => return None,
            _ => TcpOption::Unknown { kind, data },
        };
        Some(opt)
    }
}

impl<'a> Iterator for OptionIter<'a> {
    type Item = Result<TcpOption<'a>, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        let at = self.pos;
        let kind = *self.bytes.get(at)?;
        match kind {
            option_kind::END => {
                self.pos = self.bytes.len();
                return Some(Ok(TcpOption::EndOfList));
            }
            option_kind::NOP => {
                self.pos = at + 1;
                return Some(Ok(TcpOption::NoOperation));
            }
            _ => {}
        }
        let len = usize::from(u8_at(self.bytes, at + 1));
        let data = if len >= 2 {
            self.bytes.get(at + 2..at + len)
        } else {
            None
        };
        match data.and_then(|d| self.parse_one(kind, d)) {
            Some(opt) => {
                self.pos = at + len;
                Some(Ok(opt))
            }
            None => {
                self.pos = self.bytes.len();
                let e = ParseError {
                    layer: Layer::Tcp,
                    offset: at,
                    reason: Reason::OptionOverflow,
                };
                Some(Err(e))
            }
        }
    }
}

/// Encodes `opts` into an option area padded with end-of-list bytes to a multiple of 4; `None`
/// when they need more than 40 bytes.
pub fn build_options(opts: &[TcpOption<'_>]) -> Option<Options> {
    let mut buf = [0u8; MAX_OPTIONS_LEN];
    let mut len = 0;
    for opt in opts {
        len += opt.emit(buf.get_mut(len..)?)?;
    }
    Options::new(buf.get(..len.div_ceil(4) * 4)?)
}

view! {
    /// A zero-copy view of a TCP header and its payload.
    ///
    /// Contract: once [`Packet::new_checked`] succeeded, no accessor panics.
    pub struct Packet {
        /// Source port.
        src_port, set_src_port: u16 @ field::SRC_PORT;

        /// Destination port.
        dst_port, set_dst_port: u16 @ field::DST_PORT;

        /// Sequence number.
        seq_number, set_seq_number: u32 @ field::SEQ_NUM;

        /// Acknowledgment number.
        ack_number, set_ack_number: u32 @ field::ACK_NUM;

        /// Window size (unscaled).
        window_len, set_window_len: u16 @ field::WIN_SIZE;

        /// The checksum field.
        checksum, set_checksum: u16 @ field::CHECKSUM;

        /// Urgent pointer.
        urgent_ptr, set_urgent_ptr: u16 @ field::URGENT;
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks the lengths: `Truncated` below 20 bytes, `BadDataOffset` when the data offset is
    /// below 5 or the header runs past the buffer.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        view::need(Layer::Tcp, HEADER_LEN, have)?;
        let offset = self.data_offset();
        if offset < 5 || self.header_len() > have {
            return Err(view::err(Layer::Tcp, Reason::BadDataOffset(offset)));
        }
        Ok(())
    }

    /// Data offset: header length in 4-byte words.
    pub fn data_offset(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::FLAGS) >> 4
    }

    /// Header length in bytes, options included (`data_offset * 4`).
    pub fn header_len(&self) -> usize {
        usize::from(self.data_offset()) * 4
    }

    /// The flags (NS, CWR … FIN).
    pub fn flags(&self) -> Flags {
        Flags::from_bits_truncate(u16_at(self.buffer.as_ref(), field::FLAGS))
    }

    /// The option bytes (between byte 20 and the header length).
    pub fn options(&self) -> &[u8] {
        range(self.buffer.as_ref(), field::OPTIONS..self.header_len())
    }

    /// Iterates over the options (see [`options`]; offsets are relative to the options area).
    pub fn options_iter(&self) -> OptionIter<'_> {
        options(self.options())
    }

    /// The payload: everything after the header.
    pub fn payload(&self) -> &[u8] {
        range(self.buffer.as_ref(), self.header_len()..usize::MAX)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the header length in bytes (rounded down to 4-byte words, at most 60); keeps the flags.
    pub fn set_header_len(&mut self, len: usize) -> Result<(), OutOfRange> {
        let words = (len / 4).min(15) as u16;
        let word = (words << 12) | self.flags().bits();
        set_u16(self.buffer.as_mut(), field::FLAGS, word)?;
        Ok(())
    }

    /// Sets the flags; keeps the data offset (the three reserved bits are cleared).
    pub fn set_flags(&mut self, flags: Flags) -> Result<(), OutOfRange> {
        let word = (u16::from(self.data_offset()) << 12) | flags.bits();
        set_u16(self.buffer.as_mut(), field::FLAGS, word)?;
        Ok(())
    }

    /// The option bytes, mutably.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        range_mut(self.buffer.as_mut(), field::OPTIONS..end)
    }

    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        range_mut(self.buffer.as_mut(), start..usize::MAX)
    }
}

/// The parsed form of a TCP header (the payload is not part of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq_number: u32,
    /// Acknowledgment number.
    pub ack_number: u32,
    /// Flags.
    pub flags: Flags,
    /// Window size (unscaled).
    pub window_len: u16,
    /// Urgent pointer.
    pub urgent_ptr: u16,
    /// Option bytes (well-formed, a multiple of 4; see [`build_options`]).
    pub options: Options,
}

impl Repr {
    /// Parses and validates a header: lengths ([`Packet::check_len`]) and options
    /// (`Reason::OptionOverflow`, offset from the start of the header). The checksum is not
    /// verified here.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr, ParseError> {
        packet.check_len()?;
        for opt in packet.options_iter() {
            opt.map_err(|e| ParseError {
                offset: e.offset + HEADER_LEN,
                ..e
            })?;
        }
        let options =
            Options::new(packet.options()).ok_or(view::err(Layer::Tcp, Reason::OptionOverflow))?;
        Ok(Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            seq_number: packet.seq_number(),
            ack_number: packet.ack_number(),
            flags: packet.flags(),
            window_len: packet.window_len(),
            urgent_ptr: packet.urgent_ptr(),
            options,
        })
    }

    /// Iterates over the options.
    pub fn options_iter(&self) -> OptionIter<'_> {
        options(self.options.as_slice())
    }

    /// Header length in bytes, options included.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN + self.options.len()
    }

    /// Bytes [`Repr::emit`] writes: the header (the payload follows it and is the caller's).
    pub const fn buffer_len(&self) -> usize {
        self.header_len()
    }

    /// Writes the header into `packet` (which must hold [`Repr::header_len`] bytes: [`OutOfRange`]
    /// at the first field that does not fit). The checksum is written as zero.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
    ) -> Result<(), OutOfRange> {
        packet.set_src_port(self.src_port)?;
        packet.set_dst_port(self.dst_port)?;
        packet.set_seq_number(self.seq_number)?;
        packet.set_ack_number(self.ack_number)?;
        packet.set_flags(self.flags)?;
        packet.set_header_len(self.header_len())?;
        packet.set_window_len(self.window_len)?;
        packet.set_checksum(0)?;
        packet.set_urgent_ptr(self.urgent_ptr)?;
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
    use proptest::prelude::*;

    /// A Linux SYN, 54321 > 80, seq 0x01020304, window 64240, checksum 0xc5a4 (as captured; not
    /// checked here), options MSS 1460, SACK permitted, timestamps (123456, 0), NOP, WS 7.
    static SYN_BYTES: [u8; 40] = [
        0xd4, 0x31, 0x00, 0x50, 0x01, 0x02, 0x03, 0x04, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfa,
        0xf0, 0xc5, 0xa4, 0x00, 0x00, // fixed header
        0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a, 0x00, 0x01, 0xe2, 0x40, 0x00, 0x00, 0x00,
        0x00, 0x01, 0x03, 0x03, 0x07,
    ];

    /// An ACK with NOP, NOP, SACK (one block 1000..2000), then 2 payload bytes.
    static SACK_BYTES: [u8; 34] = [
        0x00, 0x50, 0xd4, 0x31, 0x00, 0x00, 0x00, 0x01, 0x01, 0x02, 0x03, 0x05, 0x80, 0x18, 0x01,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x01, 0x05, 0x0a, 0x00, 0x00, 0x03, 0xe8, 0x00, 0x00,
        0x07, 0xd0, 0x68, 0x69,
    ];

    fn syn_repr() -> Repr {
        Repr {
            src_port: 54321,
            dst_port: 80,
            seq_number: 0x01020304,
            ack_number: 0,
            flags: Flags::SYN,
            window_len: 64240,
            urgent_ptr: 0,
            options: build_options(&[
                TcpOption::MaxSegmentSize(1460),
                TcpOption::SackPermitted,
                TcpOption::Timestamps {
                    tsval: 123456,
                    tsecr: 0,
                },
                TcpOption::NoOperation,
                TcpOption::WindowScale(7),
            ])
            .unwrap(),
        }
    }

    #[test]
    fn parse_syn() {
        let p = Packet::new_checked(&SYN_BYTES[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port()), (54321, 80));
        assert_eq!((p.seq_number(), p.ack_number()), (0x01020304, 0));
        assert_eq!((p.data_offset(), p.header_len()), (10, 40));
        assert_eq!(p.flags(), Flags::SYN);
        assert_eq!(
            (p.window_len(), p.checksum(), p.urgent_ptr()),
            (64240, 0xc5a4, 0)
        );
        let opts: Vec<_> = p.options_iter().collect::<Result<_, _>>().unwrap();
        assert_eq!(
            opts,
            vec![
                TcpOption::MaxSegmentSize(1460),
                TcpOption::SackPermitted,
                TcpOption::Timestamps {
                    tsval: 123456,
                    tsecr: 0
                },
                TcpOption::NoOperation,
                TcpOption::WindowScale(7),
            ]
        );
        assert!(p.payload().is_empty());
        assert_eq!(Repr::parse(&p).unwrap(), syn_repr());
    }

    #[test]
    fn parse_sack() {
        let p = Packet::new_checked(&SACK_BYTES[..]).unwrap();
        assert_eq!(p.flags(), Flags::ACK | Flags::PSH);
        assert_eq!(format!("{:?}", p.flags()), "Flags(PSH|ACK)");
        let opts: Vec<_> = p.options_iter().collect::<Result<_, _>>().unwrap();
        let sack = SackBlocks::new(&[(1000, 2000)]).unwrap();
        assert_eq!(
            opts,
            vec![
                TcpOption::NoOperation,
                TcpOption::NoOperation,
                TcpOption::Sack(sack)
            ]
        );
        assert_eq!(p.payload(), b"hi");
        let r = Repr::parse(&p).unwrap();
        assert_eq!(r.options_iter().count(), 3);
        let mut buf = [0u8; 34];
        buf[32..].copy_from_slice(b"hi");
        r.emit(&mut Packet::new_unchecked(&mut buf[..])).unwrap();
        assert_eq!(buf, SACK_BYTES);
    }

    #[test]
    fn emit_matches() {
        let mut buf = [0u8; 40];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        syn_repr().emit(&mut p).unwrap();
        assert_eq!(p.checksum(), 0);
        p.set_checksum(0xc5a4).unwrap();
        assert_eq!(buf, SYN_BYTES);
    }

    #[test]
    fn flags_ops() {
        let mut f = Flags::empty();
        assert!(f.is_empty());
        f.insert(Flags::SYN | Flags::ACK | Flags::NS);
        assert!(f.contains(Flags::SYN | Flags::ACK) && f.intersects(Flags::NS | Flags::FIN));
        f.remove(Flags::NS);
        assert_eq!(f.bits(), 0x012);
        assert_eq!(Flags::from_bits_truncate(0xffff).bits(), 0x1ff);
        assert_eq!(f & Flags::ACK, Flags::ACK);
        let mut buf = SYN_BYTES;
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_flags(Flags::NS | Flags::ECE | Flags::CWR | Flags::SYN)
            .unwrap();
        assert_eq!(p.data_offset(), 10);
        assert_eq!(p.flags().bits(), 0x1c2);
    }

    #[test]
    fn rejects_truncation() {
        for n in 0..SYN_BYTES.len() {
            let e = Packet::new_checked(&SYN_BYTES[..n]).unwrap_err();
            assert_eq!(e.layer, Layer::Tcp);
            assert!(Repr::parse(&Packet::new_unchecked(&SYN_BYTES[..n])).is_err());
        }
    }

    #[test]
    fn rejects_malformed() {
        let reason = |b: &[u8]| Repr::parse(&Packet::new_unchecked(b)).unwrap_err().reason;
        for off in 0..5u8 {
            let mut b = SYN_BYTES;
            b[12] = off << 4;
            assert_eq!(reason(&b), Reason::BadDataOffset(off));
        }
        let mut b = SYN_BYTES;
        b[12] = 0xb0;
        assert_eq!(reason(&b), Reason::BadDataOffset(11));
        // MSS with length 5, SACK-permitted with length 3, TS running past the area, length 0/1.
        for (at, len) in [(21, 5), (25, 3), (27, 12), (21, 0), (21, 1)] {
            let mut b = SYN_BYTES;
            b[at] = len;
            let e = Repr::parse(&Packet::new_unchecked(&b[..])).unwrap_err();
            assert_eq!((e.reason, e.offset), (Reason::OptionOverflow, at - 1));
        }
        assert!(options(&[5, 6, 0, 0, 0, 0]).next().unwrap().is_err());
        assert!(options(&[5, 42]).next().unwrap().is_err());
        assert!(options(&[2]).next().unwrap().is_err());
    }

    #[test]
    fn option_edges() {
        let opts: Vec<_> = options(&[1, 0, 2, 4]).collect();
        assert_eq!(
            opts,
            vec![Ok(TcpOption::NoOperation), Ok(TcpOption::EndOfList)]
        );
        let unknown: Vec<_> = options(&[30, 3, 9]).collect();
        assert_eq!(
            unknown,
            vec![Ok(TcpOption::Unknown {
                kind: 30,
                data: &[9]
            })]
        );
        assert!(SackBlocks::new(&[]).is_none());
        assert!(SackBlocks::new(&[(0, 0); 5]).is_none());
        let too_many = [TcpOption::Timestamps { tsval: 0, tsecr: 0 }; 5];
        assert!(build_options(&too_many).is_none());
        assert_eq!(
            build_options(&[TcpOption::WindowScale(2)])
                .unwrap()
                .as_slice(),
            &[3, 3, 2, 0]
        );
    }

    fn arb_option() -> impl Strategy<Value = TcpOption<'static>> {
        prop_oneof![
            Just(TcpOption::NoOperation),
            Just(TcpOption::SackPermitted),
            any::<u16>().prop_map(TcpOption::MaxSegmentSize),
            any::<u8>().prop_map(TcpOption::WindowScale),
            (any::<u32>(), any::<u32>())
                .prop_map(|(tsval, tsecr)| TcpOption::Timestamps { tsval, tsecr }),
            proptest::collection::vec((any::<u32>(), any::<u32>()), 1..4)
                .prop_map(|b| TcpOption::Sack(SackBlocks::new(&b).unwrap())),
        ]
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(p) = Packet::new_checked(&data[..]) {
                let _ = (p.src_port(), p.dst_port(), p.seq_number(), p.ack_number());
                let _ = (p.data_offset(), p.header_len(), p.flags(), p.window_len());
                let _ = (p.checksum(), p.urgent_ptr(), p.options(), p.payload());
                let _ = p.options_iter().count();
                let _ = Repr::parse(&p);
            }
            let _ = options(&data).count();
        }

        #[test]
        fn repr_round_trips(
            ports in any::<(u16, u16)>(), seq in any::<u32>(), ack in any::<u32>(),
            flags in any::<u16>(), window in any::<u16>(), urgent in any::<u16>(),
            opts in proptest::collection::vec(arb_option(), 0..4),
        ) {
            let options = build_options(&opts).unwrap_or_default();
            let repr = Repr {
                src_port: ports.0, dst_port: ports.1, seq_number: seq, ack_number: ack,
                flags: Flags::from_bits_truncate(flags), window_len: window, urgent_ptr: urgent,
                options,
            };
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut buf[..])).unwrap();
            let parsed = Repr::parse(&Packet::new_checked(&buf[..]).unwrap()).unwrap();
            prop_assert_eq!(parsed, repr);
            if !options.is_empty() {
                let back: Vec<_> = parsed.options_iter().filter_map(Result::ok)
                    .filter(|o| *o != TcpOption::EndOfList).collect();
                prop_assert_eq!(back, opts);
            }
        }
    }
}
