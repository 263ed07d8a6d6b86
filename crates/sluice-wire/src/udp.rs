//! UDP headers: a zero-copy [`Packet`] view and the [`Repr`] builder.
//!
//! [`Packet::new_checked`] guarantees at least 8 bytes and `8 ≤ length ≤ buffer length`; after it
//! succeeds no accessor panics and [`Packet::payload`] is exactly `length - 8` bytes (accessors on
//! an unchecked short buffer read zeros, and setters return [`OutOfRange`] for a field that does
//! not fit). The checksum is only exposed as a field:
//! computing it is the job of `sluice-checksum`, so [`Repr::emit`] writes it as zero ("no
//! checksum" over IPv4; mandatory over IPv6, so fill it in there).

use crate::bytes::OutOfRange;
use crate::error::{ParseError, Reason};
use crate::layout::Layer;
use crate::view::{self, range, range_mut};

/// Byte offsets of the UDP header.
mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
    pub const PAYLOAD: usize = 8;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = field::PAYLOAD;

view! {
    /// A zero-copy view of a UDP header and its payload.
    ///
    /// Contract: once [`Packet::new_checked`] succeeded, no accessor panics.
    ///
    /// ```
    /// use sluice_wire::udp::{Packet, Repr};
    /// let bytes = [0x04, 0xd2, 0, 53, 0, 12, 0, 0, b'p', b'i', b'n', b'g'];
    /// let udp = Packet::new_checked(&bytes[..]).unwrap();
    /// assert_eq!((udp.src_port(), udp.dst_port(), udp.len()), (1234, 53, 12));
    /// assert_eq!(udp.payload(), b"ping");
    /// let repr = Repr::parse(&udp).unwrap();
    /// assert_eq!(repr.payload_len, 4);
    /// // A length field beyond the buffer is refused.
    /// assert!(Packet::new_checked(&bytes[..10]).is_err());
    /// ```
    pub struct Packet {
        /// Source port.
        src_port, set_src_port: u16 @ field::SRC_PORT;

        /// Destination port.
        dst_port, set_dst_port: u16 @ field::DST_PORT;

        /// The length field: header plus payload.
        #[allow(clippy::len_without_is_empty)] // a field accessor, not a container length
        len, set_len: u16 @ field::LENGTH;

        /// The checksum field (0 means none over IPv4).
        checksum, set_checksum: u16 @ field::CHECKSUM;
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks the lengths: `Truncated` below 8 bytes, `BadUdpLength` when the length field is
    /// below 8 or beyond the buffer.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let have = self.buffer.as_ref().len();
        view::need(Layer::Udp, HEADER_LEN, have)?;
        let len = self.len();
        if usize::from(len) < HEADER_LEN || usize::from(len) > have {
            return Err(view::err(Layer::Udp, Reason::BadUdpLength(len)));
        }
        Ok(())
    }

    fixed_view_len!(HEADER_LEN);

    /// The payload: bytes 8 to the length field.
    pub fn payload(&self) -> &[u8] {
        range(
            self.buffer.as_ref(),
            field::PAYLOAD..usize::from(self.len()),
        )
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.len());
        range_mut(self.buffer.as_mut(), field::PAYLOAD..end)
    }
}

/// The parsed form of a UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload length (the length field minus 8).
    pub payload_len: usize,
}

impl Repr {
    /// Parses a header ([`Packet::check_len`]); the checksum is not verified here.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr, ParseError> {
        packet.check_len()?;
        Ok(Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            payload_len: usize::from(packet.len()) - HEADER_LEN,
        })
    }

    /// Length of the header: [`HEADER_LEN`].
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Length of the datagram: header plus payload (the length field).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header into `packet` (which must hold 8 bytes). The length field is
    /// `buffer_len()` (saturated at 65535); the checksum is written as zero.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
    ) -> Result<(), OutOfRange> {
        packet.set_src_port(self.src_port)?;
        packet.set_dst_port(self.dst_port)?;
        packet.set_len(u16::try_from(self.buffer_len()).unwrap_or(u16::MAX))?;
        packet.set_checksum(0)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A DNS query header fragment: 53000 > 53, length 12, checksum 0x1c2d, payload `0xabcd 0x0100`,
    /// followed by 2 bytes beyond the UDP length (padding).
    static PACKET_BYTES: [u8; 14] = [
        0xcf, 0x08, 0x00, 0x35, 0x00, 0x0c, 0x1c, 0x2d, 0xab, 0xcd, 0x01, 0x00, 0xee, 0xee,
    ];

    const REPR: Repr = Repr {
        src_port: 53000,
        dst_port: 53,
        payload_len: 4,
    };

    #[test]
    fn parse_fields() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(
            (p.src_port(), p.dst_port(), p.len(), p.checksum()),
            (53000, 53, 12, 0x1c2d)
        );
        assert_eq!(p.payload(), &[0xab, 0xcd, 0x01, 0x00]);
        assert_eq!(Repr::parse(&p).unwrap(), REPR);
    }

    #[test]
    fn emit_matches() {
        let mut buf = PACKET_BYTES;
        buf[..8].fill(0);
        let mut p = Packet::new_unchecked(&mut buf[..]);
        REPR.emit(&mut p).unwrap();
        assert_eq!(p.checksum(), 0);
        p.set_checksum(0x1c2d).unwrap();
        assert_eq!(p.payload_mut().len(), 4);
        assert_eq!(buf, PACKET_BYTES);
        assert_eq!(REPR.buffer_len(), 12);
    }

    #[test]
    fn rejects_truncation() {
        for n in 0..12 {
            let e = Packet::new_checked(&PACKET_BYTES[..n]).unwrap_err();
            assert_eq!(e.layer, Layer::Udp);
            assert!(Repr::parse(&Packet::new_unchecked(&PACKET_BYTES[..n])).is_err());
        }
    }

    #[test]
    fn rejects_malformed() {
        for len in 0..8u8 {
            let mut b = PACKET_BYTES;
            b[5] = len;
            let e = Packet::new_checked(&b[..]).unwrap_err();
            assert_eq!(e.reason, Reason::BadUdpLength(u16::from(len)));
        }
        let mut b = PACKET_BYTES;
        b[5] = 15;
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err().reason,
            Reason::BadUdpLength(15)
        );
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(p) = Packet::new_checked(&data[..]) {
                let _ = (p.src_port(), p.dst_port(), p.len(), p.checksum(), p.payload());
                prop_assert!(Repr::parse(&p).is_ok());
            }
        }

        #[test]
        fn repr_round_trips(src in any::<u16>(), dst in any::<u16>(), payload_len in 0usize..64) {
            let repr = Repr { src_port: src, dst_port: dst, payload_len };
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut buf[..])).unwrap();
            prop_assert_eq!(Repr::parse(&Packet::new_checked(&buf[..]).unwrap()).unwrap(), repr);
        }
    }
}
