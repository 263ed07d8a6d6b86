//! SCTP common headers: a zero-copy [`Packet`] view and the [`Repr`] builder.
//!
//! Only the 12-byte common header is modelled (ports, verification tag, CRC32c checksum); the
//! chunks are [`Packet::payload`]. [`Packet::new_checked`] guarantees the 12 bytes; after it
//! succeeds no accessor panics. The CRC32c is computed elsewhere, so [`Repr::emit`] writes it as
//! zero.

use crate::bytes::OutOfRange;
use crate::error::ParseError;
use crate::layout::Layer;
use crate::view::{range, range_mut};

/// Byte offsets of the SCTP common header.
mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const VERIFICATION_TAG: usize = 4;
    pub const CHECKSUM: usize = 8;
    pub const CHUNKS: usize = 12;
}

/// Length of the SCTP common header.
pub const HEADER_LEN: usize = field::CHUNKS;

view! {
    /// A zero-copy view of an SCTP common header and its chunks.
    ///
    /// Contract: once [`Packet::new_checked`] succeeded, no accessor panics.
    pub struct Packet {
        /// Source port.
        src_port, set_src_port: u16 @ field::SRC_PORT;

        /// Destination port.
        dst_port, set_dst_port: u16 @ field::DST_PORT;

        /// Verification tag.
        verification_tag, set_verification_tag: u32 @ field::VERIFICATION_TAG;

        /// The CRC32c checksum field, as the big-endian number on the wire.
        checksum, set_checksum: u32 @ field::CHECKSUM;
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    fixed_view_len!(HEADER_LEN, Layer::Sctp);

    /// The chunks after the common header.
    pub fn payload(&self) -> &[u8] {
        range(self.buffer.as_ref(), field::CHUNKS..usize::MAX)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// The chunks, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        range_mut(self.buffer.as_mut(), field::CHUNKS..usize::MAX)
    }
}

/// The parsed form of an SCTP common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Verification tag.
    pub verification_tag: u32,
}

impl Repr {
    /// Parses a common header; the checksum is not verified here.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr, ParseError> {
        packet.check_len()?;
        Ok(Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            verification_tag: packet.verification_tag(),
        })
    }

    fixed_repr_len!(HEADER_LEN);

    /// Writes the common header into `packet` (which must hold 12 bytes); checksum zero.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
    ) -> Result<(), OutOfRange> {
        packet.set_src_port(self.src_port)?;
        packet.set_dst_port(self.dst_port)?;
        packet.set_verification_tag(self.verification_tag)?;
        packet.set_checksum(0)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Reason;
    use proptest::prelude::*;

    /// An SCTP INIT-ACK header: 5060 > 36412, tag 0x0badcafe, CRC 0x89abcdef, then a chunk header.
    static PACKET_BYTES: [u8; 16] = [
        0x13, 0xc4, 0x8e, 0x3c, 0x0b, 0xad, 0xca, 0xfe, 0x89, 0xab, 0xcd, 0xef, 0x02, 0x00, 0x00,
        0x04,
    ];

    const REPR: Repr = Repr {
        src_port: 5060,
        dst_port: 36412,
        verification_tag: 0x0bad_cafe,
    };

    #[test]
    fn parse_fields() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port()), (5060, 36412));
        assert_eq!(
            (p.verification_tag(), p.checksum()),
            (0x0bad_cafe, 0x89ab_cdef)
        );
        assert_eq!(p.payload(), &[0x02, 0x00, 0x00, 0x04]);
        assert_eq!(Repr::parse(&p).unwrap(), REPR);
    }

    #[test]
    fn emit_matches() {
        let mut buf = PACKET_BYTES;
        buf[..12].fill(0);
        let mut p = Packet::new_unchecked(&mut buf[..]);
        REPR.emit(&mut p).unwrap();
        p.set_checksum(0x89ab_cdef).unwrap();
        assert_eq!(p.payload_mut().len(), 4);
        assert_eq!(buf, PACKET_BYTES);
    }

    #[test]
    fn rejects_truncation() {
        for n in 0..HEADER_LEN {
            let e = Packet::new_checked(&PACKET_BYTES[..n]).unwrap_err();
            assert_eq!(
                (e.layer, e.reason),
                (Layer::Sctp, Reason::Truncated { need: 12, have: n })
            );
        }
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..32)) {
            if let Ok(p) = Packet::new_checked(&data[..]) {
                let _ = (p.src_port(), p.dst_port(), p.verification_tag(), p.checksum(), p.payload());
                prop_assert!(Repr::parse(&p).is_ok());
            }
        }

        #[test]
        fn repr_round_trips(src in any::<u16>(), dst in any::<u16>(), tag in any::<u32>()) {
            let repr = Repr { src_port: src, dst_port: dst, verification_tag: tag };
            let mut buf = [0u8; HEADER_LEN];
            repr.emit(&mut Packet::new_unchecked(&mut buf)).unwrap();
            prop_assert_eq!(Repr::parse(&Packet::new_checked(&buf[..]).unwrap()).unwrap(), repr);
        }
    }
}
