//! ICMP and ICMPv6 headers: one zero-copy [`Packet`] view and one [`Repr`] for both, since their
//! first 8 bytes share a shape: type(1), code(1), checksum(2), rest of header(4).
//!
//! [`Packet::new_checked`] (ICMP) and [`Packet::new_checked_v6`] (ICMPv6) guarantee the 8 bytes
//! and differ only in the [`Layer`] their errors name; after either succeeds no accessor panics.
//! The checksum is only exposed as a field (ICMPv6's covers a pseudo-header): computing it is the
//! job of `sluice-checksum`, so [`Repr::emit`] writes it as zero.

use crate::bytes::OutOfRange;
use crate::error::ParseError;
use crate::layout::Layer;
use crate::view::{self, range, range_mut, set_bytes};

/// Byte offsets of the ICMP/ICMPv6 header.
mod field {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    pub const REST: usize = 4;
    pub const ECHO_IDENT: usize = 4;
    pub const ECHO_SEQ: usize = 6;
    pub const PAYLOAD: usize = 8;
}

/// Length of the ICMP and ICMPv6 header (type, code, checksum, rest of header).
pub const HEADER_LEN: usize = field::PAYLOAD;

/// Common ICMP (v4) message types.
pub mod icmpv4_type {
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 0;
    /// Destination unreachable.
    pub const DEST_UNREACHABLE: u8 = 3;
    /// Redirect.
    pub const REDIRECT: u8 = 5;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 8;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 11;
    /// Parameter problem.
    pub const PARAMETER_PROBLEM: u8 = 12;
}

/// Common ICMPv6 message types.
pub mod icmpv6_type {
    /// Destination unreachable.
    pub const DEST_UNREACHABLE: u8 = 1;
    /// Packet too big.
    pub const PACKET_TOO_BIG: u8 = 2;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 3;
    /// Parameter problem.
    pub const PARAMETER_PROBLEM: u8 = 4;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 128;
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 129;
    /// NDP router solicitation.
    pub const ROUTER_SOLICIT: u8 = 133;
    /// NDP router advertisement.
    pub const ROUTER_ADVERT: u8 = 134;
    /// NDP neighbor solicitation.
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    /// NDP neighbor advertisement.
    pub const NEIGHBOR_ADVERT: u8 = 136;
}

view! {
    /// A zero-copy view of an ICMP or ICMPv6 header and its body.
    ///
    /// Contract: once [`Packet::new_checked`] or [`Packet::new_checked_v6`] succeeded, no accessor
    /// panics.
    pub struct Packet {
        /// Message type.
        msg_type, set_msg_type: u8 @ field::TYPE;

        /// Message code.
        code, set_code: u8 @ field::CODE;

        /// The checksum field.
        checksum, set_checksum: u16 @ field::CHECKSUM;

        /// Echo request/reply identifier (first two rest-of-header bytes).
        echo_ident, set_echo_ident: u16 @ field::ECHO_IDENT;

        /// Echo request/reply sequence number (last two rest-of-header bytes).
        echo_seq, set_echo_seq: u16 @ field::ECHO_SEQ;
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps an ICMPv6 buffer after [`Packet::check_len_v6`].
    pub fn new_checked_v6(buffer: T) -> Result<Packet<T>, ParseError> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len_v6()?;
        Ok(packet)
    }

    fixed_view_len!(HEADER_LEN, Layer::Icmp);

    /// Checks that the 8-byte header is there (`Truncated` for `Layer::Icmpv6` otherwise).
    pub fn check_len_v6(&self) -> Result<(), ParseError> {
        view::need(Layer::Icmpv6, HEADER_LEN, self.buffer.as_ref().len())
    }

    getters! {
        /// The 4 type-specific bytes after the checksum.
        fn rest_of_header -> [u8; 4] = array_at(field::REST);
    }

    /// The message body after the 8-byte header.
    pub fn payload(&self) -> &[u8] {
        range(self.buffer.as_ref(), field::PAYLOAD..usize::MAX)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the 4 rest-of-header bytes.
    pub fn set_rest_of_header(&mut self, rest: [u8; 4]) -> Result<(), OutOfRange> {
        set_bytes(self.buffer.as_mut(), field::REST, &rest)?;
        Ok(())
    }

    /// The message body, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        range_mut(self.buffer.as_mut(), field::PAYLOAD..usize::MAX)
    }
}

/// The parsed form of an ICMP or ICMPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Message type.
    pub msg_type: u8,
    /// Message code.
    pub code: u8,
    /// The 4 type-specific bytes (echo identifier and sequence, MTU, pointer, unused…).
    pub rest_of_header: [u8; 4],
}

impl Repr {
    /// Parses an ICMP header (errors name `Layer::Icmp`); the checksum is not verified here.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr, ParseError> {
        packet.check_len()?;
        Ok(Self::read(packet))
    }

    /// Parses an ICMPv6 header (errors name `Layer::Icmpv6`).
    pub fn parse_v6<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr, ParseError> {
        packet.check_len_v6()?;
        Ok(Self::read(packet))
    }

    fn read<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Repr {
        Repr {
            msg_type: packet.msg_type(),
            code: packet.code(),
            rest_of_header: packet.rest_of_header(),
        }
    }

    fixed_repr_len!(HEADER_LEN);

    /// Writes the header into `packet` (which must hold 8 bytes); checksum zero.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
    ) -> Result<(), OutOfRange> {
        packet.set_msg_type(self.msg_type)?;
        packet.set_code(self.code)?;
        packet.set_checksum(0)?;
        packet.set_rest_of_header(self.rest_of_header)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Reason;
    use proptest::prelude::*;

    /// ICMP echo request, id 0x1234, seq 1, checksum 0x06fa (valid for this 12-byte message), body
    /// "ping".
    static ECHO_BYTES: [u8; 12] = [
        0x08, 0x00, 0x06, 0xfa, 0x12, 0x34, 0x00, 0x01, 0x70, 0x69, 0x6e, 0x67,
    ];

    /// ICMPv6 packet too big, MTU 1280, checksum 0xabcd (not checked), start of the inner packet.
    static PTB_BYTES: [u8; 9] = [0x02, 0x00, 0xab, 0xcd, 0x00, 0x00, 0x05, 0x00, 0x60];

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

    #[test]
    fn parse_echo() {
        assert_eq!(checksum(&ECHO_BYTES), 0, "vector checksum verifies");
        let p = Packet::new_checked(&ECHO_BYTES[..]).unwrap();
        assert_eq!(
            (p.msg_type(), p.code(), p.checksum()),
            (icmpv4_type::ECHO_REQUEST, 0, 0x06fa)
        );
        assert_eq!((p.echo_ident(), p.echo_seq()), (0x1234, 1));
        assert_eq!(p.rest_of_header(), [0x12, 0x34, 0x00, 0x01]);
        assert_eq!(p.payload(), b"ping");
        let r = Repr::parse(&p).unwrap();
        assert_eq!(
            r,
            Repr {
                msg_type: 8,
                code: 0,
                rest_of_header: [0x12, 0x34, 0, 1]
            }
        );
        let mut buf = ECHO_BYTES;
        buf[..8].fill(0);
        let mut q = Packet::new_unchecked(&mut buf[..]);
        r.emit(&mut q).unwrap();
        let c = checksum(q.as_ref_bytes());
        q.set_checksum(c).unwrap();
        assert_eq!(buf, ECHO_BYTES);
    }

    impl<T: AsRef<[u8]>> Packet<T> {
        fn as_ref_bytes(&self) -> &[u8] {
            self.buffer.as_ref()
        }
    }

    #[test]
    fn parse_v6() {
        let p = Packet::new_checked_v6(&PTB_BYTES[..]).unwrap();
        let r = Repr::parse_v6(&p).unwrap();
        assert_eq!(r.msg_type, icmpv6_type::PACKET_TOO_BIG);
        assert_eq!(u32::from_be_bytes(r.rest_of_header), 1280);
        let mut buf = [0u8; 9];
        buf[8] = 0x60;
        let mut q = Packet::new_unchecked(&mut buf[..]);
        r.emit(&mut q).unwrap();
        q.set_checksum(0xabcd).unwrap();
        assert_eq!(q.payload_mut(), &[0x60]);
        assert_eq!(buf, PTB_BYTES);
        let mut q = Packet::new_unchecked(&mut buf[..]);
        q.set_echo_ident(7).unwrap();
        q.set_echo_seq(8).unwrap();
        q.set_code(1).unwrap();
        assert_eq!((q.echo_ident(), q.echo_seq(), q.code()), (7, 8, 1));
    }

    #[test]
    fn rejects_truncation() {
        for n in 0..HEADER_LEN {
            let e = Packet::new_checked(&ECHO_BYTES[..n]).unwrap_err();
            assert_eq!(
                (e.layer, e.reason),
                (Layer::Icmp, Reason::Truncated { need: 8, have: n })
            );
            let e = Packet::new_checked_v6(&PTB_BYTES[..n]).unwrap_err();
            assert_eq!(e.layer, Layer::Icmpv6);
            assert!(Repr::parse_v6(&Packet::new_unchecked(&PTB_BYTES[..n])).is_err());
        }
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..24)) {
            if let Ok(p) = Packet::new_checked(&data[..]) {
                let _ = (p.msg_type(), p.code(), p.checksum(), p.rest_of_header());
                let _ = (p.echo_ident(), p.echo_seq(), p.payload());
                prop_assert!(Repr::parse(&p).is_ok() && Repr::parse_v6(&p).is_ok());
            }
        }

        #[test]
        fn repr_round_trips(msg_type in any::<u8>(), code in any::<u8>(), rest in any::<[u8; 4]>()) {
            let repr = Repr { msg_type, code, rest_of_header: rest };
            let mut buf = [0u8; HEADER_LEN];
            repr.emit(&mut Packet::new_unchecked(&mut buf)).unwrap();
            prop_assert_eq!(Repr::parse(&Packet::new_checked(&buf[..]).unwrap()).unwrap(), repr);
        }
    }
}
