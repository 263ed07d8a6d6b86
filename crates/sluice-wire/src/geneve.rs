//! Geneve headers (RFC 8926): a zero-copy [`Packet`] view, an option TLV iterator, and the
//! [`Repr`] builder.
//!
//! The header is 8 bytes — version(2 bits) and option length(6 bits, in 4-byte words), O and C
//! flags, protocol type(2), VNI(3), reserved(1) — followed by `opt_len * 4` bytes of options
//! (class(2), type(1), 3 reserved bits and a 5-bit length in 4-byte words, data).
//! [`Packet::new_checked`] guarantees the header and its whole option area are in the buffer; after
//! it succeeds no accessor panics. Options that run past the option area are reported by
//! [`options`] and [`Repr::parse`] as `Reason::GeneveOptionOverflow`.

use crate::bytes::OutOfRange;
use crate::error::{ParseError, Reason};
use crate::ipv4::OptionBuf;
use crate::layout::Layer;
use crate::view::{self, range, range_mut, set_bytes, set_u16, set_u8};
use crate::view::{u16_at, u8_at};

/// Byte offsets of the Geneve header and of an option header.
mod field {
    pub const VER_OPT_LEN: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PROTOCOL: usize = 2;
    pub const VNI: usize = 4;
    pub const RESERVED: usize = 7;
    pub const OPTIONS: usize = 8;

    pub const OPT_CLASS: usize = 0;
    pub const OPT_TYPE: usize = 2;
    pub const OPT_LEN: usize = 3;
    pub const OPT_DATA: usize = 4;
}

/// Length of the Geneve header without options.
pub const HEADER_LEN: usize = field::OPTIONS;
/// Most option bytes a Geneve header can carry (option length 63 words).
pub const MAX_OPTIONS_LEN: usize = 252;
/// Most data bytes one option can carry (length 31 words).
pub const MAX_OPTION_DATA_LEN: usize = 124;
/// The O flag: control (OAM) packet.
pub const FLAG_OAM: u8 = 0x80;
/// The C flag: critical options present.
pub const FLAG_CRITICAL: u8 = 0x40;

/// Owned option bytes of a [`Repr`] (a multiple of 4, at most 252).
pub type Options = OptionBuf<MAX_OPTIONS_LEN>;

/// One Geneve option TLV.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GeneveOption<'a> {
    /// Option class (namespace).
    pub class: u16,
    /// Option type; its high bit marks a critical option.
    pub opt_type: u8,
    /// Option data (a multiple of 4 bytes, at most 124).
    pub data: &'a [u8],
}

impl GeneveOption<'_> {
    /// Whether the critical bit of the type is set.
    pub const fn is_critical(&self) -> bool {
        self.opt_type & 0x80 != 0
    }

    /// Bytes the option takes on the wire: 4 plus the data.
    pub const fn buffer_len(&self) -> usize {
        field::OPT_DATA + self.data.len()
    }

    /// Writes the option at the start of `buf`; returns its length, or `None` when it does not fit
    /// or its data is not a multiple of 4 bytes of at most 124.
    pub fn emit(&self, buf: &mut [u8]) -> Option<usize> {
        if !self.data.len().is_multiple_of(4) || self.data.len() > MAX_OPTION_DATA_LEN {
            return None;
        }
        let len = self.buffer_len();
        let out = buf.get_mut(..len)?;
        set_u16(out, field::OPT_CLASS, self.class).ok()?;
        set_u8(out, field::OPT_TYPE, self.opt_type).ok()?;
        set_u8(out, field::OPT_LEN, (self.data.len() / 4) as u8).ok()?;
        set_bytes(out, field::OPT_DATA, self.data).ok()?;
        Some(len)
    }
}

/// Iterator over Geneve options; see [`options`].
#[derive(Debug, Clone)]
pub struct OptionIter<'a> {
    bytes: &'a [u8],
    pos: usize,
}

/// Iterates over the option TLVs in `bytes` (a header's option area). An option whose 4-byte
/// header or data runs past `bytes` yields `Reason::GeneveOptionOverflow` with its offset in
/// `bytes`, and ends the walk. The reserved bits of the length byte are ignored.
pub fn options(bytes: &[u8]) -> OptionIter<'_> {
    OptionIter { bytes, pos: 0 }
}

impl<'a> Iterator for OptionIter<'a> {
    type Item = Result<GeneveOption<'a>, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        let at = self.pos;
        let rest = self.bytes.get(at..).filter(|r| !r.is_empty())?;
        let len = field::OPT_DATA + usize::from(u8_at(rest, field::OPT_LEN) & 0x1f) * 4;
        match rest.get(field::OPT_DATA..len) {
            Some(data) => {
                self.pos = at + len;
                let class = u16_at(rest, field::OPT_CLASS);
                Some(Ok(GeneveOption {
                    class,
                    opt_type: u8_at(rest, field::OPT_TYPE),
                    data,
                }))
            }
            None => {
                self.pos = self.bytes.len();
                let reason = Reason::GeneveOptionOverflow;
                Some(Err(ParseError {
                    layer: Layer::Geneve,
                    offset: at,
                    reason,
                }))
            }
        }
    }
}

/// Whether the option TLVs fill `bytes` exactly (the rule of [`options`]: each option's 4-byte
/// header and data within `bytes`, the reserved length bits ignored). The parser's check, without
/// building the items.
#[inline]
pub fn options_fit(mut bytes: &[u8]) -> bool {
    while let Some(header) = bytes.first_chunk::<{ field::OPT_DATA }>() {
        let len = field::OPT_DATA + usize::from(header[field::OPT_LEN] & 0x1f) * 4;
        match bytes.get(len..) {
            Some(rest) => bytes = rest,
            None => return false,
        }
    }
    bytes.is_empty()
}

/// Encodes `opts` into an option area; `None` when one is malformed (see [`GeneveOption::emit`])
/// or they need more than 252 bytes.
pub fn build_options(opts: &[GeneveOption<'_>]) -> Option<Options> {
    let mut buf = [0u8; MAX_OPTIONS_LEN];
    let mut len = 0;
    for opt in opts {
        len += opt.emit(buf.get_mut(len..)?)?;
    }
    Options::new(buf.get(..len)?)
}

view! {
    /// A zero-copy view of a Geneve header, its options and the inner frame.
    ///
    /// Contract: once [`Packet::new_checked`] succeeded, no accessor panics.
    pub struct Packet {
        /// The protocol type of the inner frame (an EtherType; 0x6558 for Ethernet).
        protocol_type, set_protocol_type: u16 @ field::PROTOCOL;
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks the lengths: `Truncated` below 8 bytes, `GeneveOptionOverflow` when the option
    /// length runs past the buffer. The version is checked by [`Repr::parse`].
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        view::need(Layer::Geneve, HEADER_LEN, have)?;
        if self.header_len() > have {
            return Err(view::err(Layer::Geneve, Reason::GeneveOptionOverflow));
        }
        Ok(())
    }

    /// The version (0 is the only one defined).
    pub fn version(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::VER_OPT_LEN) >> 6
    }

    /// Option length in 4-byte words.
    pub fn opt_len(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::VER_OPT_LEN) & 0x3f
    }

    /// Header length in bytes, options included (`8 + opt_len * 4`).
    pub fn header_len(&self) -> usize {
        HEADER_LEN + usize::from(self.opt_len()) * 4
    }

    /// The O flag: a control (OAM) packet.
    pub fn oam(&self) -> bool {
        u8_at(self.buffer.as_ref(), field::FLAGS) & FLAG_OAM != 0
    }

    /// The C flag: critical options are present.
    pub fn critical(&self) -> bool {
        u8_at(self.buffer.as_ref(), field::FLAGS) & FLAG_CRITICAL != 0
    }

    getters! {
        /// The 24-bit virtual network identifier.
        fn vni -> u32 = u24_at(field::VNI);
    }

    /// The option area.
    pub fn options(&self) -> &[u8] {
        range(self.buffer.as_ref(), field::OPTIONS..self.header_len())
    }

    /// Iterates over the options (see [`options`]; offsets are relative to the option area).
    pub fn options_iter(&self) -> OptionIter<'_> {
        options(self.options())
    }

    /// The inner frame after the options.
    pub fn payload(&self) -> &[u8] {
        range(self.buffer.as_ref(), self.header_len()..usize::MAX)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the version (low 2 bits).
    pub fn set_version(&mut self, version: u8) -> Result<(), OutOfRange> {
        let b = (version << 6) | self.opt_len();
        set_u8(self.buffer.as_mut(), field::VER_OPT_LEN, b)?;
        Ok(())
    }

    /// Sets the option length in 4-byte words (low 6 bits).
    pub fn set_opt_len(&mut self, words: u8) -> Result<(), OutOfRange> {
        let b = (self.version() << 6) | (words & 0x3f);
        set_u8(self.buffer.as_mut(), field::VER_OPT_LEN, b)?;
        Ok(())
    }

    fn set_flag(&mut self, flag: u8, on: bool) -> Result<(), OutOfRange> {
        let old = u8_at(self.buffer.as_ref(), field::FLAGS);
        let b = if on { old | flag } else { old & !flag };
        set_u8(self.buffer.as_mut(), field::FLAGS, b)?;
        Ok(())
    }

    /// Sets the O flag.
    pub fn set_oam(&mut self, oam: bool) -> Result<(), OutOfRange> {
        self.set_flag(FLAG_OAM, oam)?;
        Ok(())
    }

    /// Sets the C flag.
    pub fn set_critical(&mut self, critical: bool) -> Result<(), OutOfRange> {
        self.set_flag(FLAG_CRITICAL, critical)?;
        Ok(())
    }

    setters! {
        /// Sets the VNI (low 24 bits).
        fn set_vni(vni: u32) = set_u24(field::VNI);
    }

    /// The option area, mutably.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        range_mut(self.buffer.as_mut(), field::OPTIONS..end)
    }

    /// The inner frame, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        range_mut(self.buffer.as_mut(), start..usize::MAX)
    }
}

/// The parsed form of a Geneve header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// O flag: control (OAM) packet.
    pub oam: bool,
    /// C flag: critical options present.
    pub critical: bool,
    /// Protocol type of the inner frame.
    pub protocol_type: u16,
    /// Virtual network identifier (24 bits).
    pub vni: u32,
    /// Option bytes (well-formed TLVs; see [`build_options`]).
    pub options: Options,
}

impl Repr {
    /// Parses and validates a header: lengths ([`Packet::check_len`]), version 0
    /// (`BadField("geneve version")`) and option TLVs (`GeneveOptionOverflow`, offset from the
    /// start of the header).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr, ParseError> {
        packet.check_len()?;
        if packet.version() != 0 {
            return Err(view::err(Layer::Geneve, Reason::BadField("geneve version")));
        }
        for opt in packet.options_iter() {
            opt.map_err(|e| ParseError {
                offset: e.offset + HEADER_LEN,
                ..e
            })?;
        }
        let options = Options::new(packet.options())
            .ok_or(view::err(Layer::Geneve, Reason::GeneveOptionOverflow))?;
        Ok(Repr {
            oam: packet.oam(),
            critical: packet.critical(),
            protocol_type: packet.protocol_type(),
            vni: packet.vni(),
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

    /// Bytes [`Repr::emit`] writes: [`Repr::header_len`] (the inner frame is the caller's).
    pub const fn buffer_len(&self) -> usize {
        self.header_len()
    }

    /// Writes the header and options (version 0, reserved bits zero) into `packet`, which must
    /// hold [`Repr::header_len`] bytes. Only the low 24 bits of `vni` are written.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
    ) -> Result<(), OutOfRange> {
        set_bytes(packet.buffer.as_mut(), 0, &[0; HEADER_LEN])?;
        packet.set_opt_len((self.options.len() / 4) as u8)?;
        packet.set_oam(self.oam)?;
        packet.set_critical(self.critical)?;
        packet.set_protocol_type(self.protocol_type)?;
        packet.set_vni(self.vni)?;
        set_u8(packet.buffer.as_mut(), field::RESERVED, 0)?;
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
    use crate::ethertype;
    use proptest::prelude::*;

    /// The parser's check agrees with the option iterator on every option area made of 0–3
    /// options of 0–2 data words, cut or extended by a few bytes.
    #[test]
    fn options_fit_agrees_with_the_iterator() {
        let mut areas = vec![vec![]];
        for _ in 0..3 {
            let mut next = Vec::new();
            for a in &areas {
                for words in 0..3u8 {
                    let mut t = a.clone();
                    t.extend_from_slice(&[0x01, 0x02, 0x80, words | 0xe0]);
                    t.extend(std::iter::repeat_n(0xaa, usize::from(words) * 4));
                    next.push(t);
                }
            }
            areas.extend(next);
        }
        for a in &areas {
            for cut in 0..a.len().min(6) {
                let b = &a[..a.len() - cut];
                assert_eq!(options_fit(b), options(b).all(|o| o.is_ok()), "{b:?}");
            }
            let mut longer = a.clone();
            longer.extend_from_slice(&[0, 0]);
            assert_eq!(options_fit(&longer), options(&longer).all(|o| o.is_ok()));
            assert!(options_fit(a));
        }
        assert!(!options_fit(&[0, 1, 2, 1]));
    }

    /// Geneve carrying Ethernet, VNI 0x123456, C flag, two options (20 bytes, opt_len 5):
    /// class 0x0102 type 0x80 (critical) with 4 data bytes, class 0xffff type 0x01 with 8, then
    /// the first two bytes of the inner frame.
    static PACKET_BYTES: [u8; 30] = [
        0x05, 0x40, 0x65, 0x58, 0x12, 0x34, 0x56, 0x00, // fixed header
        0x01, 0x02, 0x80, 0x01, 0xde, 0xad, 0xbe, 0xef, // option 1
        0xff, 0xff, 0x01, 0x02, 1, 2, 3, 4, 5, 6, 7, 8, // option 2
        0x02, 0x00,
    ];

    fn opts() -> [GeneveOption<'static>; 2] {
        [
            GeneveOption {
                class: 0x0102,
                opt_type: 0x80,
                data: &[0xde, 0xad, 0xbe, 0xef],
            },
            GeneveOption {
                class: 0xffff,
                opt_type: 0x01,
                data: &[1, 2, 3, 4, 5, 6, 7, 8],
            },
        ]
    }

    fn repr() -> Repr {
        Repr {
            oam: false,
            critical: true,
            protocol_type: ethertype::TEB,
            vni: 0x123456,
            options: build_options(&opts()).unwrap(),
        }
    }

    #[test]
    fn parse_fields() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!((p.version(), p.opt_len(), p.header_len()), (0, 5, 28));
        assert!(!p.oam() && p.critical());
        assert_eq!((p.protocol_type(), p.vni()), (ethertype::TEB, 0x123456));
        let found: Vec<_> = p.options_iter().collect::<Result<_, _>>().unwrap();
        assert_eq!(found, opts());
        assert!(found[0].is_critical() && !found[1].is_critical());
        assert_eq!(p.payload(), &[0x02, 0x00]);
        let r = Repr::parse(&p).unwrap();
        assert_eq!(r, repr());
        assert_eq!(r.options_iter().count(), 2);
    }

    #[test]
    fn emit_matches() {
        let mut buf = [0xaau8; 30];
        buf[28..].copy_from_slice(&[0x02, 0x00]);
        let mut p = Packet::new_unchecked(&mut buf[..]);
        repr().emit(&mut p).unwrap();
        assert_eq!(p.payload_mut().len(), 2);
        assert_eq!(buf, PACKET_BYTES);
    }

    #[test]
    fn setters() {
        let mut buf = PACKET_BYTES;
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_oam(true).unwrap();
        p.set_critical(false).unwrap();
        p.set_version(1).unwrap();
        assert!(p.oam() && !p.critical());
        assert_eq!((p.version(), p.opt_len()), (1, 5));
        p.options_mut()[0] = 0;
        let e = Repr::parse(&Packet::new_unchecked(&buf[..])).unwrap_err();
        assert_eq!(e.reason, Reason::BadField("geneve version"));
    }

    #[test]
    fn rejects_truncation() {
        for n in 0..28 {
            let e = Packet::new_checked(&PACKET_BYTES[..n]).unwrap_err();
            assert_eq!(e.layer, Layer::Geneve);
            assert!(Repr::parse(&Packet::new_unchecked(&PACKET_BYTES[..n])).is_err());
        }
    }

    #[test]
    fn rejects_option_overflow() {
        // Second option claims 3 words where 2 remain in the option area.
        let mut b = PACKET_BYTES;
        b[19] = 0x03;
        let e = Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap_err();
        assert_eq!((e.reason, e.offset), (Reason::GeneveOptionOverflow, 16));
        // Option area of 6 words where the packet holds 5.5.
        let mut b = PACKET_BYTES;
        b[0] = 0x06;
        let e = Packet::new_checked(&b[..]).unwrap_err();
        assert_eq!(e.reason, Reason::GeneveOptionOverflow);
        // An option header cut by the end of the area.
        assert!(options(&[0, 1, 2]).next().unwrap().is_err());
        assert!(build_options(&[GeneveOption {
            class: 0,
            opt_type: 0,
            data: &[1]
        }])
        .is_none());
    }

    fn arb_options() -> impl Strategy<Value = Vec<(u16, u8, Vec<u8>)>> {
        let opt = (
            any::<u16>(),
            any::<u8>(),
            proptest::collection::vec(any::<[u8; 4]>(), 0..8),
        )
            .prop_map(|(c, t, words)| (c, t, words.concat()));
        proptest::collection::vec(opt, 0..6)
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(p) = Packet::new_checked(&data[..]) {
                let _ = (p.version(), p.opt_len(), p.oam(), p.critical(), p.protocol_type());
                let _ = (p.vni(), p.options(), p.payload(), p.options_iter().count());
                let _ = Repr::parse(&p);
            }
            let _ = options(&data).count();
        }

        #[test]
        fn repr_round_trips(
            oam in any::<bool>(), critical in any::<bool>(), proto in any::<u16>(),
            vni in 0u32..0x100_0000, opts in arb_options(),
        ) {
            let opts: Vec<_> = opts.iter()
                .map(|(class, opt_type, data)| GeneveOption { class: *class, opt_type: *opt_type, data })
                .collect();
            let options = build_options(&opts).unwrap();
            let repr = Repr { oam, critical, protocol_type: proto, vni, options };
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut buf[..])).unwrap();
            let parsed = Repr::parse(&Packet::new_checked(&buf[..]).unwrap()).unwrap();
            prop_assert_eq!(parsed, repr);
            let back: Vec<_> = parsed.options_iter().collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(back, opts);
        }
    }
}
