//! VXLAN headers (RFC 7348): a zero-copy [`Packet`] view and the [`Repr`] builder.
//!
//! The header is 8 bytes: flags(1, I bit 0x08), reserved(3), VNI(3), reserved(1); the inner
//! Ethernet frame follows. [`Packet::new_checked`] guarantees the 8 bytes; after it succeeds no
//! accessor panics. [`Repr::parse`] also requires the I flag (a VNI is present), as RFC 7348 does.

use crate::bytes::OutOfRange;
use crate::error::{ParseError, Reason};
use crate::layout::Layer;
use crate::view::{self, range, range_mut, set_bytes, set_u8};

/// Byte offsets of the VXLAN header.
mod field {
    pub const FLAGS: usize = 0;
    pub const RESERVED1: usize = 1;
    pub const VNI: usize = 4;
    pub const RESERVED2: usize = 7;
    pub const PAYLOAD: usize = 8;
}

/// Length of the VXLAN header.
pub const HEADER_LEN: usize = field::PAYLOAD;
/// The I flag: the VNI is valid.
pub const FLAG_I: u8 = 0x08;
/// Largest VNI (24 bits).
pub const MAX_VNI: u32 = 0x00ff_ffff;

view! {
    /// A zero-copy view of a VXLAN header and the inner frame.
    ///
    /// Contract: once [`Packet::new_checked`] succeeded, no accessor panics.
    pub struct Packet {
        /// The flags byte.
        flags, set_flags: u8 @ field::FLAGS;
    }
}

impl<T: AsRef<[u8]>> Packet<T> {
    fixed_view_len!(HEADER_LEN, Layer::Vxlan);

    /// Whether the I flag (VNI valid) is set.
    pub fn vni_valid(&self) -> bool {
        self.flags() & FLAG_I != 0
    }

    getters! {
        /// The 24-bit VXLAN network identifier.
        fn vni -> u32 = u24_at(field::VNI);
    }

    /// The inner Ethernet frame.
    pub fn payload(&self) -> &[u8] {
        range(self.buffer.as_ref(), field::PAYLOAD..usize::MAX)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    setters! {
        /// Sets the VNI (low 24 bits).
        fn set_vni(vni: u32) = set_u24(field::VNI);
    }

    /// The inner frame, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        range_mut(self.buffer.as_mut(), field::PAYLOAD..usize::MAX)
    }
}

/// The parsed form of a VXLAN header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// VXLAN network identifier (24 bits).
    pub vni: u32,
}

impl Repr {
    /// Parses a header; `BadField("vxlan I flag")` when the I flag is clear.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr, ParseError> {
        packet.check_len()?;
        if !packet.vni_valid() {
            return Err(view::err(Layer::Vxlan, Reason::BadField("vxlan I flag")));
        }
        Ok(Repr { vni: packet.vni() })
    }

    fixed_repr_len!(HEADER_LEN);

    /// Writes the header (I flag set, reserved fields zero) into `packet`, which must hold 8
    /// bytes. Only the low 24 bits of `vni` are written.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
    ) -> Result<(), OutOfRange> {
        packet.set_flags(FLAG_I)?;
        set_bytes(packet.buffer.as_mut(), field::RESERVED1, &[0; 3])?;
        packet.set_vni(self.vni)?;
        set_u8(packet.buffer.as_mut(), field::RESERVED2, 0)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// VXLAN, I flag, VNI 0x123456, then the first bytes of the inner frame.
    static PACKET_BYTES: [u8; 10] = [0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0, 0xff, 0xff];

    #[test]
    fn parse_fields() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!((p.flags(), p.vni_valid(), p.vni()), (0x08, true, 0x123456));
        assert_eq!(p.payload(), &[0xff, 0xff]);
        assert_eq!(Repr::parse(&p).unwrap(), Repr { vni: 0x123456 });
    }

    #[test]
    fn emit_matches() {
        let mut buf = [0xaau8; 10];
        buf[8..].copy_from_slice(&[0xff, 0xff]);
        let mut p = Packet::new_unchecked(&mut buf[..]);
        Repr { vni: 0x123456 }.emit(&mut p).unwrap();
        assert_eq!(p.payload_mut().len(), 2);
        assert_eq!(buf, PACKET_BYTES);
    }

    #[test]
    fn rejects_truncation_and_missing_i_flag() {
        for n in 0..HEADER_LEN {
            let e = Packet::new_checked(&PACKET_BYTES[..n]).unwrap_err();
            assert_eq!(
                (e.layer, e.reason),
                (Layer::Vxlan, Reason::Truncated { need: 8, have: n })
            );
        }
        let mut b = PACKET_BYTES;
        b[0] = 0;
        let e = Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap_err();
        assert_eq!(e.reason, Reason::BadField("vxlan I flag"));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..24)) {
            if let Ok(p) = Packet::new_checked(&data[..]) {
                let _ = (p.flags(), p.vni_valid(), p.vni(), p.payload(), Repr::parse(&p));
            }
        }

        #[test]
        fn repr_round_trips(vni in 0u32..=MAX_VNI) {
            let repr = Repr { vni };
            let mut buf = [0u8; HEADER_LEN];
            repr.emit(&mut Packet::new_unchecked(&mut buf)).unwrap();
            prop_assert_eq!(Repr::parse(&Packet::new_checked(&buf[..]).unwrap()).unwrap(), repr);
        }
    }
}
