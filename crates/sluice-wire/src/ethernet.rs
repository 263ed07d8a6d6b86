//! Ethernet II frames: a zero-copy [`Frame`] view and the [`Repr`] builder.
//!
//! The view is called `Frame` (not `Packet`, as in the other header modules) because that is what
//! an Ethernet unit is called. [`Frame::new_checked`] guarantees the buffer holds the 14-byte
//! header; after that no accessor panics. Accessors on a view made with [`Frame::new_unchecked`]
//! over a short buffer never panic either: reads of missing bytes return zero, and a setter whose
//! field does not fit returns [`OutOfRange`] without writing.

use crate::bytes::OutOfRange;
use crate::error::ParseError;
use crate::layout::Layer;
use core::fmt;

use crate::view::{array_at, range, range_mut, set_bytes};

/// Byte ranges of the Ethernet II header.
mod field {
    use core::ops::Range;

    pub const DESTINATION: Range<usize> = 0..6;
    pub const SOURCE: Range<usize> = 6..12;
    pub const ETHERTYPE: usize = 12;
    pub const PAYLOAD: usize = 14;
}

/// Length of the Ethernet II header (addresses and EtherType, no VLAN tags).
pub const HEADER_LEN: usize = field::PAYLOAD;

/// A 48-bit Ethernet (MAC) address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Address(pub [u8; 6]);

impl Address {
    /// The broadcast address `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: Address = Address([0xff; 6]);

    /// The address as bytes.
    pub const fn as_bytes(&self) -> &[u8; 6] {
        &self.0
    }

    /// Whether this is the broadcast address.
    pub const fn is_broadcast(&self) -> bool {
        matches!(self.0, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff])
    }

    /// Whether the group bit is set (multicast or broadcast).
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// Whether this is a unicast address.
    pub const fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

view! {
    /// A zero-copy view of an Ethernet II frame.
    ///
    /// Contract: once [`Frame::new_checked`] (or [`Frame::check_len`]) succeeded, the buffer holds at
    /// least [`HEADER_LEN`] bytes and no accessor panics.
    ///
    /// ```
    /// use sluice_wire::ethernet::{Address, Frame};
    /// let bytes = [0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, 0xaa];
    /// let frame = Frame::new_checked(&bytes[..]).unwrap();
    /// assert_eq!(frame.dst_addr(), Address([0x02, 0, 0, 0, 0, 0x02]));
    /// assert_eq!(frame.src_addr().to_string(), "02:00:00:00:00:01");
    /// assert_eq!(frame.ethertype(), sluice_wire::ethertype::IPV4);
    /// assert_eq!(frame.payload(), &[0xaa]);
    /// assert!(Frame::new_checked(&bytes[..13]).is_err());
    /// ```
    pub struct Frame {
        /// The EtherType (a VLAN TPID when the frame is tagged).
        ethertype, set_ethertype: u16 @ field::ETHERTYPE;
    }
}

impl<T: AsRef<[u8]>> Frame<T> {
    fixed_view_len!(HEADER_LEN, Layer::Eth);

    /// The destination address.
    pub fn dst_addr(&self) -> Address {
        Address(array_at(self.buffer.as_ref(), field::DESTINATION.start))
    }

    /// The source address.
    pub fn src_addr(&self) -> Address {
        Address(array_at(self.buffer.as_ref(), field::SOURCE.start))
    }

    /// The bytes after the 14-byte header (VLAN tags, if any, are part of it).
    pub fn payload(&self) -> &[u8] {
        range(self.buffer.as_ref(), field::PAYLOAD..usize::MAX)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, addr: Address) -> Result<(), OutOfRange> {
        set_bytes(self.buffer.as_mut(), field::DESTINATION.start, &addr.0)?;
        Ok(())
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, addr: Address) -> Result<(), OutOfRange> {
        set_bytes(self.buffer.as_mut(), field::SOURCE.start, &addr.0)?;
        Ok(())
    }

    /// The bytes after the header, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        range_mut(self.buffer.as_mut(), field::PAYLOAD..usize::MAX)
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Frame<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The parsed form of an Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: Address,
    /// Destination address.
    pub dst_addr: Address,
    /// EtherType (or the TPID of the first VLAN tag).
    pub ethertype: u16,
}

impl Repr {
    /// Parses the header of a frame.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &Frame<&T>) -> Result<Repr, ParseError> {
        frame.check_len()?;
        Ok(Repr {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            ethertype: frame.ethertype(),
        })
    }

    fixed_repr_len!(HEADER_LEN);

    /// Writes the header into the first [`HEADER_LEN`] bytes of `frame` (which must be that long:
    /// [`OutOfRange`] at the first field that does not fit).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        frame: &mut Frame<T>,
    ) -> Result<(), OutOfRange> {
        frame.set_dst_addr(self.dst_addr)?;
        frame.set_src_addr(self.src_addr)?;
        frame.set_ethertype(self.ethertype)?;
        Ok(())
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "eth {} > {} type {:#06x}",
            self.src_addr, self.dst_addr, self.ethertype
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Reason;
    use crate::ethertype;
    use proptest::prelude::*;

    /// Broadcast ARP request header from 52:54:00:12:34:56, with the start of the ARP body.
    static FRAME_BYTES: [u8; 18] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x08, 0x06, 0x00,
        0x01, 0x08, 0x00,
    ];

    const REPR: Repr = Repr {
        src_addr: Address([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]),
        dst_addr: Address::BROADCAST,
        ethertype: ethertype::ARP,
    };

    #[test]
    fn parse_fields() {
        let frame = Frame::new_checked(&FRAME_BYTES[..]).unwrap();
        assert_eq!(frame.dst_addr(), Address::BROADCAST);
        assert!(frame.dst_addr().is_broadcast() && frame.dst_addr().is_multicast());
        assert!(frame.src_addr().is_unicast());
        assert_eq!(frame.src_addr().to_string(), "52:54:00:12:34:56");
        assert_eq!(frame.ethertype(), ethertype::ARP);
        assert_eq!(frame.payload(), &[0x00, 0x01, 0x08, 0x00]);
        assert_eq!(Repr::parse(&frame).unwrap(), REPR);
    }

    #[test]
    fn emit_matches() {
        let mut buf = [0u8; 18];
        buf[14..].copy_from_slice(&FRAME_BYTES[14..]);
        let mut frame = Frame::new_unchecked(&mut buf[..]);
        REPR.emit(&mut frame).unwrap();
        assert_eq!(frame.payload_mut().len(), 4);
        assert_eq!(buf, FRAME_BYTES);
    }

    #[test]
    fn rejects_truncation() {
        for n in 0..HEADER_LEN {
            let err = Frame::new_checked(&FRAME_BYTES[..n]).unwrap_err();
            assert_eq!(err.layer, Layer::Eth);
            assert_eq!(err.reason, Reason::Truncated { need: 14, have: n });
        }
        assert!(Frame::new_checked(&FRAME_BYTES[..HEADER_LEN])
            .unwrap()
            .payload()
            .is_empty());
    }

    #[test]
    fn unchecked_short_buffer_reads_zero() {
        let buf = [0xffu8; 3];
        let frame = Frame::new_unchecked(&buf[..]);
        assert_eq!(frame.ethertype(), 0);
        assert!(frame.payload().is_empty());
    }

    /// A setter out of range (only possible on a short `new_unchecked` buffer) is an error, and
    /// writes nothing.
    #[test]
    fn unchecked_short_buffer_write_is_an_error() {
        let mut buf = [7u8; 3];
        let mut frame = Frame::new_unchecked(&mut buf[..]);
        let e = frame.set_ethertype(0x0800).unwrap_err();
        assert_eq!((e.at, e.len, e.buf_len), (12, 2, 3));
        let repr = Repr {
            src_addr: Address([1; 6]),
            dst_addr: Address([2; 6]),
            ethertype: 0x86dd,
        };
        assert!(repr.emit(&mut frame).is_err());
        assert_eq!(buf, [7; 3]);
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(frame) = Frame::new_checked(&data[..]) {
                let _ = (frame.dst_addr(), frame.src_addr(), frame.ethertype(), frame.payload());
                prop_assert!(Repr::parse(&frame).is_ok());
            }
        }

        #[test]
        fn repr_round_trips(src in any::<[u8; 6]>(), dst in any::<[u8; 6]>(), ty in any::<u16>()) {
            let repr = Repr { src_addr: Address(src), dst_addr: Address(dst), ethertype: ty };
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Frame::new_unchecked(&mut buf[..])).unwrap();
            prop_assert_eq!(Repr::parse(&Frame::new_checked(&buf[..]).unwrap()).unwrap(), repr);
        }
    }
}
