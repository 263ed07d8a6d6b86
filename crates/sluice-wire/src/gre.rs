//! GRE headers (RFC 2784 with the RFC 2890 key and sequence number): a zero-copy [`Packet`] view
//! and the [`Repr`] builder.
//!
//! The header is flags and version(2), protocol type(2), then, each present only when its flag is
//! set and in this order: checksum(2) + reserved(2) (C), key(4) (K), sequence number(4) (S).
//! [`Packet::new_checked`] rejects what Sluice cannot delimit: the routing bit R (RFC 1701 source
//! routing, `BadField("gre routing")`) and any version but 0 (version 1 is PPTP's enhanced GRE,
//! `BadField("gre version")`); it guarantees the whole header is in the buffer, after which no
//! accessor panics. The checksum is only exposed as a field; computing it is done elsewhere.

use crate::bytes::OutOfRange;
use crate::error::{ParseError, Reason};
use crate::layout::Layer;
use crate::view::{self, range, range_mut, set_u32, u16_at, u32_at};

/// Byte offsets of the fixed part of the GRE header.
mod field {
    pub const FLAGS_VERSION: usize = 0;
    pub const PROTOCOL: usize = 2;
    pub const OPTIONAL: usize = 4;
}

/// Length of the GRE header without optional fields.
pub const HEADER_LEN: usize = field::OPTIONAL;
/// Longest GRE header Sluice accepts (checksum, key and sequence number present).
pub const MAX_HEADER_LEN: usize = HEADER_LEN + 12;

/// Checksum present.
pub const FLAG_C: u16 = 0x8000;
/// Routing present (rejected).
pub const FLAG_R: u16 = 0x4000;
/// Key present.
pub const FLAG_K: u16 = 0x2000;
/// Sequence number present.
pub const FLAG_S: u16 = 0x1000;
/// Mask of the version bits.
pub const VERSION_MASK: u16 = 0x0007;

view! {
    /// A zero-copy view of a GRE header and its payload.
    ///
    /// Contract: once [`Packet::new_checked`] succeeded, no accessor panics.
    pub struct Packet {
        /// The flags-and-version word.
        flags, set_flags: u16 @ field::FLAGS_VERSION;

        /// The protocol type of the payload (an EtherType).
        protocol_type, set_protocol_type: u16 @ field::PROTOCOL;
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks the header: `Truncated` below 4 bytes or when the optional fields do not fit,
    /// `BadField("gre routing")` when R is set, `BadField("gre version")` for a non-zero version.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        view::need(Layer::Gre, HEADER_LEN, have)?;
        if self.routing_present() {
            return Err(view::err(Layer::Gre, Reason::BadField("gre routing")));
        }
        if self.version() != 0 {
            return Err(view::err(Layer::Gre, Reason::BadField("gre version")));
        }
        view::need(Layer::Gre, self.header_len(), have)
    }

    /// Whether the checksum (and reserved) field is present (C).
    pub fn checksum_present(&self) -> bool {
        self.flags() & FLAG_C != 0
    }

    /// Whether the routing bit (R) is set.
    pub fn routing_present(&self) -> bool {
        self.flags() & FLAG_R != 0
    }

    /// Whether the key field is present (K).
    pub fn key_present(&self) -> bool {
        self.flags() & FLAG_K != 0
    }

    /// Whether the sequence number field is present (S).
    pub fn seq_present(&self) -> bool {
        self.flags() & FLAG_S != 0
    }

    /// The version (0 for GRE proper).
    pub fn version(&self) -> u8 {
        (self.flags() & VERSION_MASK) as u8
    }

    /// Header length in bytes: 4, plus 4 for each of C, K and S.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + 4 * (self.flags() & (FLAG_C | FLAG_K | FLAG_S)).count_ones() as usize
    }

    /// Offset of the key field (when [`Packet::key_present`]): after the checksum field, if any.
    pub fn key_offset(&self) -> usize {
        field::OPTIONAL + 4 * usize::from(self.checksum_present())
    }

    fn seq_offset(&self) -> usize {
        self.key_offset() + if self.key_present() { 4 } else { 0 }
    }

    /// The checksum, when present.
    pub fn checksum(&self) -> Option<u16> {
        self.checksum_present()
            .then(|| u16_at(self.buffer.as_ref(), field::OPTIONAL))
    }

    /// The key, when present.
    pub fn key(&self) -> Option<u32> {
        self.key_present()
            .then(|| u32_at(self.buffer.as_ref(), self.key_offset()))
    }

    /// The sequence number, when present.
    pub fn seq_number(&self) -> Option<u32> {
        self.seq_present()
            .then(|| u32_at(self.buffer.as_ref(), self.seq_offset()))
    }

    /// The payload after the header.
    pub fn payload(&self) -> &[u8] {
        range(self.buffer.as_ref(), self.header_len()..usize::MAX)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the checksum (and zeroes the reserved field); does nothing unless C is set.
    pub fn set_checksum(&mut self, checksum: u16) -> Result<(), OutOfRange> {
        if self.checksum_present() {
            set_u32(
                self.buffer.as_mut(),
                field::OPTIONAL,
                u32::from(checksum) << 16,
            )?;
        }
        Ok(())
    }

    /// Sets the key; does nothing unless K is set.
    pub fn set_key(&mut self, key: u32) -> Result<(), OutOfRange> {
        if self.key_present() {
            let at = self.key_offset();
            set_u32(self.buffer.as_mut(), at, key)?;
        }
        Ok(())
    }

    /// Sets the sequence number; does nothing unless S is set.
    pub fn set_seq_number(&mut self, seq: u32) -> Result<(), OutOfRange> {
        if self.seq_present() {
            let at = self.seq_offset();
            set_u32(self.buffer.as_mut(), at, seq)?;
        }
        Ok(())
    }

    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        range_mut(self.buffer.as_mut(), start..usize::MAX)
    }
}

/// The parsed form of a GRE header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Protocol type of the payload.
    pub protocol_type: u16,
    /// The checksum field: `Some` when C is set (the value is computed elsewhere; emit writes it
    /// as given).
    pub checksum: Option<u16>,
    /// The key: `Some` when K is set.
    pub key: Option<u32>,
    /// The sequence number: `Some` when S is set.
    pub seq_number: Option<u32>,
}

impl Repr {
    /// Parses a header ([`Packet::check_len`]); the checksum is not verified here.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr, ParseError> {
        packet.check_len()?;
        Ok(Repr {
            protocol_type: packet.protocol_type(),
            checksum: packet.checksum(),
            key: packet.key(),
            seq_number: packet.seq_number(),
        })
    }

    /// The flags-and-version word this header is emitted with.
    pub const fn flags(&self) -> u16 {
        let c = if self.checksum.is_some() { FLAG_C } else { 0 };
        let k = if self.key.is_some() { FLAG_K } else { 0 };
        let s = if self.seq_number.is_some() { FLAG_S } else { 0 };
        c | k | s
    }

    /// Header length in bytes.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN + 4 * (self.flags().count_ones() as usize)
    }

    /// Bytes [`Repr::emit`] writes: [`Repr::header_len`] (the payload is the caller's).
    pub const fn buffer_len(&self) -> usize {
        self.header_len()
    }

    /// Writes the header into `packet`, which must hold [`Repr::header_len`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
    ) -> Result<(), OutOfRange> {
        packet.set_flags(self.flags())?;
        packet.set_protocol_type(self.protocol_type)?;
        if let Some(checksum) = self.checksum {
            packet.set_checksum(checksum)?;
        }
        if let Some(key) = self.key {
            packet.set_key(key)?;
        }
        if let Some(seq) = self.seq_number {
            packet.set_seq_number(seq)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ethertype;
    use proptest::prelude::*;

    /// GRE with C, K and S carrying IPv4: checksum 0x1234, key 0xcafe0001, sequence 42, then the
    /// first byte of the inner packet.
    static PACKET_BYTES: [u8; 17] = [
        0xb0, 0x00, 0x08, 0x00, 0x12, 0x34, 0x00, 0x00, 0xca, 0xfe, 0x00, 0x01, 0x00, 0x00, 0x00,
        0x2a, 0x45,
    ];

    const REPR: Repr = Repr {
        protocol_type: ethertype::IPV4,
        checksum: Some(0x1234),
        key: Some(0xcafe_0001),
        seq_number: Some(42),
    };

    #[test]
    fn parse_fields() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert!(p.checksum_present() && p.key_present() && p.seq_present());
        assert!(!p.routing_present());
        assert_eq!(
            (p.version(), p.protocol_type(), p.header_len()),
            (0, 0x0800, 16)
        );
        assert_eq!(
            (p.checksum(), p.key(), p.seq_number()),
            (Some(0x1234), Some(0xcafe_0001), Some(42))
        );
        assert_eq!(p.payload(), &[0x45]);
        assert_eq!(Repr::parse(&p).unwrap(), REPR);
    }

    #[test]
    fn key_only() {
        let b = [0x20, 0x00, 0x65, 0x58, 0, 0, 0x10, 0x00];
        let r = Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap();
        let want = Repr {
            protocol_type: ethertype::TEB,
            checksum: None,
            key: Some(0x1000),
            seq_number: None,
        };
        assert_eq!(r, want);
        let mut out = [0u8; 8];
        r.emit(&mut Packet::new_unchecked(&mut out)).unwrap();
        assert_eq!(out, b);
    }

    #[test]
    fn emit_matches() {
        let mut buf = [0u8; 17];
        buf[16] = 0x45;
        let mut p = Packet::new_unchecked(&mut buf[..]);
        REPR.emit(&mut p).unwrap();
        assert_eq!(p.payload_mut(), &[0x45]);
        assert_eq!(buf, PACKET_BYTES);
        assert_eq!(REPR.buffer_len(), 16);
    }

    #[test]
    fn rejects_truncation() {
        for n in 0..16 {
            let e = Packet::new_checked(&PACKET_BYTES[..n]).unwrap_err();
            assert_eq!(e.layer, Layer::Gre);
            assert!(matches!(e.reason, Reason::Truncated { .. }));
        }
    }

    #[test]
    fn rejects_version_and_routing() {
        let mut b = PACKET_BYTES;
        b[1] = 0x01;
        let e = Packet::new_checked(&b[..]).unwrap_err();
        assert_eq!(e.reason, Reason::BadField("gre version"));
        let mut b = PACKET_BYTES;
        b[0] |= 0x40;
        let e = Repr::parse(&Packet::new_unchecked(&b[..])).unwrap_err();
        assert_eq!(e.reason, Reason::BadField("gre routing"));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..24)) {
            if let Ok(p) = Packet::new_checked(&data[..]) {
                let _ = (p.flags(), p.version(), p.protocol_type(), p.header_len());
                let _ = (p.checksum(), p.key(), p.seq_number(), p.payload());
                prop_assert!(Repr::parse(&p).is_ok());
            }
        }

        #[test]
        fn repr_round_trips(
            proto in any::<u16>(), checksum in any::<Option<u16>>(), key in any::<Option<u32>>(),
            seq in any::<Option<u32>>(),
        ) {
            let repr = Repr { protocol_type: proto, checksum, key, seq_number: seq };
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut buf[..])).unwrap();
            prop_assert_eq!(Repr::parse(&Packet::new_checked(&buf[..]).unwrap()).unwrap(), repr);
        }
    }
}
