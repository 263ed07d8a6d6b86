//! A [`Layout`] kept in step with a frame's edits, so that a packet is parsed once, when it is
//! received, and its layout then travels with it (issue 15, item 1): a VLAN tag pushed or
//! popped after the MAC addresses ([`Layout::tag_pushed`], [`Layout::tag_popped`]), outer
//! headers put in front of a frame ([`parse_encapsulated`]: only the new outer headers are
//! parsed) or taken off it ([`Layout::decapsulated`]).
//!
//! Each edit gives exactly the layout a fresh [`parse_with`](super::parse_with) of the edited
//! frame would give, or refuses (`false` / `None`) where it cannot be sure of that — the
//! caller then forgets the layout and parses again when it next needs one. The edits apply
//! to whole layouts only (a [`parse_partial`](super::parse_partial) that met no error).

use super::{Headers, Layout, LinkType, Next, ParseConfig, Stack, Start, MAX_VLAN_DEPTH};
use super::{Layer, VlanTag};
use crate::bytes::read_u16;

/// Where a VLAN tag is pushed or popped: right after the MAC addresses.
const TAG_AT: usize = 12;
/// A VLAN tag's length.
const TAG_LEN: usize = 4;

/// `o` moved by `by` bytes when it is at or after `from`; `None` when it would leave `usize`.
fn moved(o: usize, from: usize, by: isize) -> Option<usize> {
    if o < from {
        Some(o)
    } else {
        o.checked_add_signed(by)
    }
}

/// Every offset of `h` at or after `from` moved by `by` bytes, in place; `false` (`h` part-way
/// changed) on an overflow.
fn shift_headers_in_place(h: &mut Headers, from: usize, by: isize) -> bool {
    for o in [
        &mut h.l2,
        &mut h.l3,
        &mut h.l4,
        &mut h.payload,
        &mut h.l3_end,
    ]
    .into_iter()
    .flatten()
    {
        match moved(*o, from, by) {
            Some(m) => *o = m,
            None => return false,
        }
    }
    true
}

/// [`shift_headers_in_place`] on a copy of `h`.
fn shift_headers(h: &Headers, from: usize, by: isize) -> Option<Headers> {
    let mut out = *h;
    shift_headers_in_place(&mut out, from, by).then_some(out)
}

impl Layout {
    /// The layout after a VLAN tag (`tpid`, `tci`) was inserted right after the MAC addresses
    /// of an Ethernet frame (the outermost position); `false` when the frame is not Ethernet
    /// at 0 or its stack is already as deep as the parser goes (the layout is then unchanged),
    /// or when the layout cannot follow (an offset past 64 KiB: it is then to be forgotten).
    ///
    /// ```
    /// use sluice_wire::{parse, Layer};
    /// let mut frame = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0xb5, 0xde, 0xad];
    /// let mut layout = parse(&frame).unwrap();
    /// frame.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
    /// assert!(layout.tag_pushed(0x8100, 7));
    /// assert_eq!(layout, parse(&frame).unwrap());
    /// assert_eq!(layout.layers.as_slice(), &[(Layer::Eth, 0), (Layer::Vlan, 12)]);
    /// ```
    pub fn tag_pushed(&mut self, tpid: u16, tci: u16) -> bool {
        let n = self.layers.len();
        let first = self.layers.as_slice().first().copied();
        if self.outer.l2 != Some(0)
            || first != Some((Layer::Eth, 0))
            || self.outer.vlans.len() >= MAX_VLAN_DEPTH
            || n >= super::MAX_LAYERS
            || !crate::ethertype::is_vlan_tpid(tpid)
        {
            return false;
        }
        // In place (this runs once per packet on the datapath): a failure part-way leaves the
        // layout wrong, which the caller then forgets.
        if !self.shift_in_place(TAG_AT, TAG_LEN as isize) {
            return false;
        }
        let v = &mut self.outer.vlans;
        let k = usize::from(v.len);
        v.tags.copy_within(0..k, 1);
        v.tags[0] = VlanTag::from_tci(tpid, tci);
        v.len += 1;
        let l = &mut self.layers;
        l.items.copy_within(1..n, 2);
        l.items[1] = (Layer::Vlan, TAG_AT as u16);
        l.len += 1;
        true
    }

    /// The layout after the outermost VLAN tag (right after the MAC addresses) was removed;
    /// `false` when there is none (the layout is then unchanged) or the layout cannot follow
    /// (it is then to be forgotten).
    ///
    /// ```
    /// use sluice_wire::parse;
    /// let mut frame = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x81, 0, 0, 7, 0x88, 0xb5, 0xde];
    /// let mut layout = parse(&frame).unwrap();
    /// frame.drain(12..16);
    /// assert!(layout.tag_popped());
    /// assert_eq!(layout, parse(&frame).unwrap());
    /// ```
    pub fn tag_popped(&mut self) -> bool {
        let n = self.layers.len();
        let first = self.layers.as_slice().get(..2);
        if self.outer.l2 != Some(0)
            || self.outer.vlans.is_empty()
            || first != Some(&[(Layer::Eth, 0), (Layer::Vlan, TAG_AT as u16)])
        {
            return false;
        }
        let l = &mut self.layers;
        l.items.copy_within(2..n, 1);
        l.len -= 1;
        let v = &mut self.outer.vlans;
        let k = usize::from(v.len);
        v.tags.copy_within(1..k, 0);
        v.len -= 1;
        if let Some(t) = v.tags.get_mut(usize::from(v.len)) {
            *t = VlanTag::default();
        }
        self.shift_in_place(TAG_AT + TAG_LEN, -(TAG_LEN as isize))
    }

    /// Every offset at or after `from` moved by `by` bytes, outer and inner headers, tunnel
    /// and layer list alike; `false` (the layout part-way changed) on an overflow.
    fn shift_in_place(&mut self, from: usize, by: isize) -> bool {
        if !shift_headers_in_place(&mut self.outer, from, by) {
            return false;
        }
        if let Some(t) = self.tunnel.as_mut() {
            match moved(t.offset, from, by) {
                Some(m) => t.offset = m,
                None => return false,
            }
        }
        if let Some(h) = self.inner.as_mut() {
            if !shift_headers_in_place(h, from, by) {
                return false;
            }
        }
        let n = self.layers.len();
        for item in self.layers.items.iter_mut().take(n) {
            match moved(usize::from(item.1), from, by).and_then(|m| u16::try_from(m).ok()) {
                Some(m) => item.1 = m,
                None => return false,
            }
        }
        true
    }

    /// The layout a parse of the same frame with tunnels off
    /// ([`ParseConfig::parse_tunnels`] false) gives: this one without its VXLAN / Geneve
    /// header and inner stack (the outer stack is the same either way). `None` for GRE, which
    /// is the outer L4 header only when tunnels are parsed.
    ///
    /// ```
    /// use sluice_wire::{parse, parse_with, ParseConfig};
    /// let mut frame = vec![2, 0, 0, 0, 0, 4, 2, 0, 0, 0, 0, 3, 0x08, 0x00]; // Ethernet, IPv4
    /// frame.extend([0x45, 0, 0, 52, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    /// frame.extend([0xc0, 0x00, 0x12, 0xb5, 0, 32, 0, 0]); // UDP -> 4789, length 32
    /// frame.extend([0x08, 0, 0, 0, 0, 0, 42, 0]); // VXLAN, VNI 42
    /// frame.extend([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0xb5, 0xde, 0xad]);
    /// let off = ParseConfig { parse_tunnels: false, ..ParseConfig::DEFAULT };
    /// let outer = parse(&frame).unwrap().outer_only().unwrap();
    /// assert_eq!(outer, parse_with(&frame, &off).unwrap());
    /// ```
    pub fn outer_only(&self) -> Option<Layout> {
        let Some(t) = self.tunnel else {
            return Some(*self);
        };
        if !t.kind.is_udp() {
            return None;
        }
        let mut out = Layout {
            outer: self.outer,
            ..Layout::default()
        };
        for &(layer, o) in self.layers.as_slice() {
            if usize::from(o) >= t.offset {
                break;
            }
            if !out.layers.push(layer, usize::from(o)) {
                return None;
            }
        }
        Some(out)
    }

    /// The layout of `frame` (the frame this layout describes) once its outer headers up to
    /// the inner Ethernet header are taken off: the inner stack becomes the outer one. `None`
    /// where a fresh parse of what is left could differ: no tunnel or no inner Ethernet, an
    /// L3 link type, bytes after the tunnel's datagram (they would stay in the frame), or an
    /// inner packet that is itself a tunnel the parser would now descend into.
    pub fn decapsulated(&self, frame: &[u8], cfg: &ParseConfig) -> Option<Layout> {
        let (tunnel, inner) = (self.tunnel?, self.inner.as_ref()?);
        let at = inner.l2?;
        if cfg.link != LinkType::Ethernet {
            return None;
        }
        // The inner stack was parsed within the tunnel's datagram (UDP) or outer IP packet
        // (GRE); the frame left behind must end where that did.
        let end = if tunnel.kind.is_udp() {
            let l4 = self.outer.l4?;
            l4 + usize::from(read_u16(frame, l4 + 4)?)
        } else {
            self.outer.l3_end?
        };
        if end != frame.len() {
            return None;
        }
        // Inside a tunnel the parser does not descend; once outside, it would.
        if cfg.parse_tunnels {
            match inner.l4_proto {
                Some(crate::ip_proto::GRE) => return None,
                Some(crate::ip_proto::UDP) => {
                    let port = read_u16(frame, inner.l4? + 2)?;
                    if cfg.vxlan_ports.contains(port) || cfg.geneve_ports.contains(port) {
                        return None;
                    }
                }
                _ => {}
            }
        }
        let by = -isize::try_from(at).ok()?;
        let mut out = Layout {
            outer: shift_headers(inner, at, by)?,
            ..Layout::default()
        };
        for &(layer, o) in self.layers.as_slice() {
            let o = usize::from(o);
            if o >= at && !out.layers.push(layer, o - at) {
                return None;
            }
        }
        Some(out)
    }
}

/// The layout of `frame`, which is a frame described by `before` (parsed with `cfg`) with
/// `pushed` bytes of Ethernet, IP, UDP and VXLAN / Geneve (or GRE) headers put in front of
/// it: only those outer headers are parsed; the inner stack is `before`'s, moved. `None`
/// (parse the whole frame instead) when the outer headers do not end in a tunnel carrying Ethernet at `pushed` whose
/// datagram ends with the frame, or when `before` is not a plain Ethernet layout (a tunnel of
/// its own, or another link type).
///
/// ```
/// use sluice_wire::{parse, parse_encapsulated, ParseConfig};
/// let inner = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0xb5, 0xde, 0xad];
/// let before = parse(&inner).unwrap();
/// let mut frame = vec![2, 0, 0, 0, 0, 4, 2, 0, 0, 0, 0, 3, 0x08, 0x00]; // Ethernet, IPv4
/// frame.extend([0x45, 0, 0, 52, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
/// frame.extend([0xc0, 0x00, 0x12, 0xb5, 0, 32, 0, 0]); // UDP -> 4789, length 32
/// frame.extend([0x08, 0, 0, 0, 0, 0, 42, 0]); // VXLAN, VNI 42
/// let pushed = frame.len();
/// frame.extend(&inner);
/// let layout = parse_encapsulated(&frame, &ParseConfig::DEFAULT, &before, pushed).unwrap();
/// assert_eq!(layout, parse(&frame).unwrap());
/// ```
pub fn parse_encapsulated(
    frame: &[u8],
    cfg: &ParseConfig,
    before: &Layout,
    pushed: usize,
) -> Option<Layout> {
    if before.tunnel.is_some()
        || before.inner.is_some()
        || before.outer.l2 != Some(0)
        || cfg.link != LinkType::Ethernet
        || !cfg.parse_tunnels
    {
        return None;
    }
    let mut out = Layout::default();
    let mut outer = Stack {
        cfg,
        tunnels: true,
        layers: &mut out.layers,
    };
    let next = outer.stack(frame, Start::Eth(0), &mut out.outer).ok()?;
    let Next::Tunnel(tunnel, Some((Start::Eth(at), end))) = next else {
        return None;
    };
    if at != pushed || end != frame.len() {
        return None;
    }
    out.tunnel = Some(tunnel);
    let by = isize::try_from(pushed).ok()?;
    out.inner = Some(shift_headers(&before.outer, 0, by)?);
    for &(layer, o) in before.layers.as_slice() {
        if !out.layers.push(layer, usize::from(o) + pushed) {
            return None;
        }
    }
    Some(out)
}
