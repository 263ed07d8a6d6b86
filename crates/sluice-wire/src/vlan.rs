//! 802.1Q / 802.1ad VLAN tags: a zero-copy [`Tag`] view, the [`Repr`] builder, and control-path
//! helpers that push and pop tags in a frame buffer.
//!
//! # Model
//!
//! On the wire a tag is TPID(2) + TCI(2), and the two bytes after it are the next EtherType (or
//! the next tag's TPID). The TPID sits where an EtherType would be, so it belongs to the field
//! *before* the tag: the Ethernet EtherType for the outer tag, the previous tag's next type for an
//! inner one. The [`Tag`] view therefore covers TCI(2) + next-type(2) and starts right after that
//! preceding type field:
//!
//! ```text
//! dst(6) src(6) 0x88a8 | TCI next=0x8100 | TCI next=0x0800 | IPv4 ...
//!               ^ Ethernet EtherType     ^ Tag            ^ Tag
//! ```
//!
//! A [`Repr`] likewise has no TPID; [`crate::VlanTag`] pairs a TPID with a TCI where both are
//! needed ([`push_tag`], [`pop_tag`], [`Tag::vlan_tag`]).
//!
//! After [`Tag::new_checked`] succeeds no accessor panics; accessors on an unchecked short buffer
//! read zeros, and setters return [`OutOfRange`] for a field that does not fit.

use crate::bytes::OutOfRange;
use crate::error::{ParseError, Reason};
use crate::layout::{Layer, VlanTag};
use crate::view::{self, range, range_mut, u16_at};

/// Byte offsets of a tag view (TCI and next type).
mod field {
    pub const TCI: usize = 0;
    pub const NEXT_TYPE: usize = 2;
    pub const PAYLOAD: usize = 4;
}

/// Length of a tag view: TCI(2) + next type(2). Also the bytes a tag adds to a frame.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// Offset of the (outer) EtherType in an Ethernet frame, where [`push_tag`] inserts.
const ETHERTYPE_OFFSET: usize = 12;

view! {
    /// A zero-copy view of one VLAN tag: TCI followed by the next EtherType or TPID.
    ///
    /// Contract: once [`Tag::new_checked`] succeeded, the buffer holds at least [`HEADER_LEN`] bytes
    /// and no accessor panics.
    ///
    /// ```
    /// use sluice_wire::vlan::Tag;
    /// // TCI: PCP 5, DEI 0, VID 100; then IPv4.
    /// let tag = Tag::new_checked(&[0xa0, 0x64, 0x08, 0x00][..]).unwrap();
    /// assert_eq!((tag.pcp(), tag.dei(), tag.vid(), tag.next_type()), (5, false, 100, 0x0800));
    /// ```
    pub struct Tag {
        /// The 16-bit tag control information.
        tci, set_tci: u16 @ field::TCI;

        /// The type after the tag: the inner EtherType, or the TPID of the next tag.
        next_type, set_next_type: u16 @ field::NEXT_TYPE;
    }
}

impl<T: AsRef<[u8]>> Tag<T> {
    fixed_view_len!(HEADER_LEN, Layer::Vlan);

    /// Priority code point (0–7).
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    /// Drop eligible indicator.
    pub fn dei(&self) -> bool {
        self.tci() & 0x1000 != 0
    }

    /// VLAN identifier (0–4095).
    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }

    /// This tag as a [`VlanTag`], given the TPID that announced it.
    pub fn vlan_tag(&self, tpid: u16) -> VlanTag {
        VlanTag::from_tci(tpid, self.tci())
    }

    /// The bytes after the tag.
    pub fn payload(&self) -> &[u8] {
        range(self.buffer.as_ref(), field::PAYLOAD..usize::MAX)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Tag<T> {
    /// Sets the priority code point (low 3 bits of `pcp`).
    pub fn set_pcp(&mut self, pcp: u8) -> Result<(), OutOfRange> {
        self.set_tci((self.tci() & 0x1fff) | (u16::from(pcp & 7) << 13))?;
        Ok(())
    }

    /// Sets the drop eligible indicator.
    pub fn set_dei(&mut self, dei: bool) -> Result<(), OutOfRange> {
        let tci = self.tci() & !0x1000;
        self.set_tci(if dei { tci | 0x1000 } else { tci })?;
        Ok(())
    }

    /// Sets the VLAN identifier (low 12 bits of `vid`).
    pub fn set_vid(&mut self, vid: u16) -> Result<(), OutOfRange> {
        self.set_tci((self.tci() & 0xf000) | (vid & 0x0fff))?;
        Ok(())
    }

    /// The bytes after the tag, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        range_mut(self.buffer.as_mut(), field::PAYLOAD..usize::MAX)
    }
}

/// The parsed form of a VLAN tag view (see the module docs for why there is no TPID).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Priority code point (0–7).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (0–4095).
    pub vid: u16,
    /// The type after the tag: inner EtherType or the next tag's TPID.
    pub next_type: u16,
}

impl Repr {
    /// Parses a tag view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(tag: &Tag<&T>) -> Result<Repr, ParseError> {
        tag.check_len()?;
        Ok(Repr {
            pcp: tag.pcp(),
            dei: tag.dei(),
            vid: tag.vid(),
            next_type: tag.next_type(),
        })
    }

    /// The 16-bit TCI of this tag (`pcp` and `vid` are masked to their widths).
    pub const fn tci(&self) -> u16 {
        VlanTag {
            tpid: 0,
            pcp: self.pcp,
            dei: self.dei,
            vid: self.vid,
        }
        .tci()
    }

    fixed_repr_len!(HEADER_LEN);

    /// Writes TCI and next type into `tag` (which must hold [`HEADER_LEN`] bytes).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, tag: &mut Tag<T>) -> Result<(), OutOfRange> {
        tag.set_tci(self.tci())?;
        tag.set_next_type(self.next_type)?;
        Ok(())
    }
}

/// Inserts a tag as the outermost one of an Ethernet frame: `tpid` and `tci` go right after the
/// MAC addresses and the frame's old EtherType becomes the tag's next type.
///
/// Control-path helper (it moves the frame's bytes). Fails with `Reason::Truncated` when the frame
/// is shorter than an Ethernet header.
pub fn push_tag(frame: &mut Vec<u8>, tpid: u16, tci: u16) -> Result<(), ParseError> {
    view::need(Layer::Eth, crate::ethernet::HEADER_LEN, frame.len())?;
    let [t0, t1] = tpid.to_be_bytes();
    let [c0, c1] = tci.to_be_bytes();
    frame.splice(ETHERTYPE_OFFSET..ETHERTYPE_OFFSET, [t0, t1, c0, c1]);
    Ok(())
}

/// Removes the outermost tag of an Ethernet frame and returns it; the tag's next type becomes the
/// frame's EtherType. Returns `None` (and leaves the frame alone) when the EtherType is not a VLAN
/// TPID ([`crate::ethertype::is_vlan_tpid`]) or the frame is too short to hold the tag.
///
/// Control-path helper (it moves the frame's bytes).
pub fn pop_tag(frame: &mut Vec<u8>) -> Option<VlanTag> {
    let tpid = u16_at(frame, ETHERTYPE_OFFSET);
    let needed = crate::ethernet::HEADER_LEN + HEADER_LEN;
    if frame.len() < needed || !crate::ethertype::is_vlan_tpid(tpid) {
        return None;
    }
    let tci = u16_at(frame, ETHERTYPE_OFFSET + 2);
    frame.drain(ETHERTYPE_OFFSET..ETHERTYPE_OFFSET + 4);
    Some(VlanTag::from_tci(tpid, tci))
}

/// Walks the VLAN stack of an Ethernet frame: yields each tag (outermost first) with the offset
/// of its [`Tag`] view, and stops at the first non-VLAN type. At most `max` tags are yielded; one
/// more yields `Reason::TooManyVlanTags`. A tag cut short yields `Reason::Truncated`. Errors carry
/// the tag's offset in the frame.
pub fn tags(frame: &[u8], max: usize) -> Tags<'_> {
    Tags {
        frame,
        offset: crate::ethernet::HEADER_LEN,
        seen: 0,
        max,
        done: frame.len() < crate::ethernet::HEADER_LEN,
    }
}

/// Iterator returned by [`tags`].
#[derive(Debug, Clone)]
pub struct Tags<'a> {
    frame: &'a [u8],
    offset: usize,
    seen: usize,
    max: usize,
    done: bool,
}

impl Tags<'_> {
    /// The type after the tags walked so far (the frame's EtherType before any), and its end
    /// offset: after exhaustion, the inner EtherType and the offset of the L3 header.
    pub fn next_type(&self) -> (u16, usize) {
        (u16_at(self.frame, self.offset - 2), self.offset)
    }
}

impl Iterator for Tags<'_> {
    type Item = Result<(VlanTag, usize), ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let (tpid, offset) = self.next_type();
        if !crate::ethertype::is_vlan_tpid(tpid) {
            self.done = true;
            return None;
        }
        let fail = |reason| {
            Some(Err(ParseError {
                layer: Layer::Vlan,
                offset,
                reason,
            }))
        };
        if self.seen >= self.max {
            self.done = true;
            return fail(Reason::TooManyVlanTags);
        }
        let tag = match Tag::new_checked(range(self.frame, offset..usize::MAX)) {
            Ok(tag) => tag,
            Err(e) => {
                self.done = true;
                return fail(e.reason);
            }
        };
        self.seen += 1;
        self.offset = offset + HEADER_LEN;
        Some(Ok((tag.vlan_tag(tpid), offset)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ethertype;
    use proptest::prelude::*;

    /// QinQ frame: S-tag 0x88a8 (pcp 3, vid 100), C-tag 0x8100 (dei, vid 200), then 0x9100 tag
    /// (vid 4095), then IPv4; the first IPv4 byte follows.
    static FRAME_BYTES: [u8; 27] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02, // addresses
        0x88, 0xa8, 0x60, 0x64, // S-tag: TPID, TCI pcp=3 vid=100
        0x81, 0x00, 0x10, 0xc8, // C-tag: TPID, TCI dei vid=200
        0x91, 0x00, 0x0f, 0xff, // 0x9100 tag: TPID, TCI vid=4095
        0x08, 0x00, 0x45,
    ];

    #[test]
    fn parse_fields() {
        let outer = Tag::new_checked(&FRAME_BYTES[14..]).unwrap();
        assert_eq!(
            Repr::parse(&outer).unwrap(),
            Repr {
                pcp: 3,
                dei: false,
                vid: 100,
                next_type: ethertype::VLAN_8021Q
            }
        );
        assert_eq!(outer.tci(), 0x6064);
        let inner = Tag::new_checked(outer.payload()).unwrap();
        assert_eq!((inner.pcp(), inner.dei(), inner.vid()), (0, true, 200));
        assert_eq!(inner.next_type(), ethertype::VLAN_9100);
        let third = Tag::new_checked(inner.payload()).unwrap();
        assert_eq!(third.vid(), 4095);
        assert_eq!(third.next_type(), ethertype::IPV4);
        assert_eq!(third.payload(), &[0x45]);
        assert_eq!(
            third.vlan_tag(0x9100),
            VlanTag {
                tpid: 0x9100,
                pcp: 0,
                dei: false,
                vid: 4095
            }
        );
    }

    #[test]
    fn walk_stack() {
        let got: Vec<_> = tags(&FRAME_BYTES, 8).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            got,
            vec![
                (VlanTag::from_tci(0x88a8, 0x6064), 14),
                (VlanTag::from_tci(0x8100, 0x10c8), 18),
                (VlanTag::from_tci(0x9100, 0x0fff), 22),
            ]
        );
        let mut it = tags(&FRAME_BYTES, 8);
        it.by_ref().for_each(drop);
        assert_eq!(it.next_type(), (ethertype::IPV4, 26));
        let errs: Vec<_> = tags(&FRAME_BYTES, 2).collect();
        assert_eq!(errs[2].unwrap_err().reason, Reason::TooManyVlanTags);
        assert_eq!(errs[2].unwrap_err().offset, 22);
        let cut: Vec<_> = tags(&FRAME_BYTES[..21], 8).collect();
        assert_eq!(cut.len(), 2);
        assert!(matches!(
            cut[1].unwrap_err().reason,
            Reason::Truncated { need: 4, have: 3 }
        ));
    }

    #[test]
    fn emit_matches() {
        let mut buf = [0u8; 4];
        Repr {
            pcp: 3,
            dei: false,
            vid: 100,
            next_type: 0x8100,
        }
        .emit(&mut Tag::new_unchecked(&mut buf))
        .unwrap();
        assert_eq!(buf, FRAME_BYTES[14..18]);
        let mut tag = Tag::new_unchecked(&mut buf);
        tag.set_pcp(0).unwrap();
        tag.set_dei(true).unwrap();
        tag.set_vid(200).unwrap();
        tag.set_next_type(0x9100).unwrap();
        assert_eq!(buf, FRAME_BYTES[18..22]);
    }

    #[test]
    fn push_pop() {
        let mut frame = FRAME_BYTES.to_vec();
        let mut popped = Vec::new();
        while let Some(tag) = pop_tag(&mut frame) {
            popped.push(tag);
        }
        assert_eq!(popped.len(), 3);
        assert_eq!(frame.len(), FRAME_BYTES.len() - 12);
        assert_eq!(&frame[12..], &[0x08, 0x00, 0x45]);
        for tag in popped.iter().rev() {
            push_tag(&mut frame, tag.tpid, tag.tci()).unwrap();
        }
        assert_eq!(frame, FRAME_BYTES);
        assert!(push_tag(&mut vec![0; 13], 0x8100, 1).is_err());
        let mut short = FRAME_BYTES[..17].to_vec();
        assert_eq!(pop_tag(&mut short), None);
        assert_eq!(short.len(), 17);
    }

    #[test]
    fn rejects_truncation() {
        for n in 0..HEADER_LEN {
            let err = Tag::new_checked(&FRAME_BYTES[14..14 + n]).unwrap_err();
            assert_eq!(err.layer, Layer::Vlan);
            assert_eq!(err.reason, Reason::Truncated { need: 4, have: n });
        }
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(tag) = Tag::new_checked(&data[..]) {
                let _ = (tag.tci(), tag.pcp(), tag.dei(), tag.vid(), tag.next_type(), tag.payload());
                prop_assert!(Repr::parse(&tag).is_ok());
            }
            let _ = tags(&data, 8).count();
            let mut frame = data.clone();
            if let Some(tag) = pop_tag(&mut frame) {
                push_tag(&mut frame, tag.tpid, tag.tci()).unwrap();
                prop_assert_eq!(&frame, &data);
            }
        }

        #[test]
        fn repr_round_trips(pcp in 0u8..8, dei in any::<bool>(), vid in 0u16..4096, next in any::<u16>()) {
            let repr = Repr { pcp, dei, vid, next_type: next };
            let mut buf = [0u8; HEADER_LEN];
            repr.emit(&mut Tag::new_unchecked(&mut buf)).unwrap();
            prop_assert_eq!(Repr::parse(&Tag::new_checked(&buf[..]).unwrap()).unwrap(), repr);
        }
    }
}
