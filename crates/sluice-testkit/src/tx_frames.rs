//! Test frames for the transmit-preparation tests (`sluice-offload`'s `tx_*` and `virtio_*`,
//! `sluice pcap tx`): every encapsulation of the matrix, built byte by byte with an independent
//! checksum implementation ([`ocsum`]), and [`packet`], a frame with its `OffloadMeta` in a
//! chosen checksum state.
//!
//! Test code: the builders panic on combinations a test would never ask for.

use sluice_packet::rewrite::seed_partial;
use sluice_packet::verify::verify_frame;
use sluice_packet::{GsoType, Level, OffloadMeta};
use sluice_wire::Layout;

/// What is around the IP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Envelope {
    /// Ethernet only.
    Plain,
    /// One 802.1Q tag (VID 100).
    Tag1,
    /// 802.1ad (VID 100) outside 802.1Q (VID 101).
    Tag2,
    /// VXLAN (VNI 42) over IP/UDP with an outer UDP checksum.
    Vxlan,
    /// Geneve (VNI 42) over IP/UDP with a zero outer UDP checksum.
    Geneve,
    /// GRE (no key) carrying the IP packet.
    Gre,
}

impl Envelope {
    /// Every encapsulation.
    pub const ALL: [Envelope; 6] = [
        Envelope::Plain,
        Envelope::Tag1,
        Envelope::Tag2,
        Envelope::Vxlan,
        Envelope::Geneve,
        Envelope::Gre,
    ];
    /// VXLAN, Geneve or GRE.
    pub fn tunnelled(self) -> bool {
        matches!(self, Envelope::Vxlan | Envelope::Geneve | Envelope::Gre)
    }
    /// How many VLAN tags the frame carries.
    pub fn tags(self) -> usize {
        match self {
            Envelope::Tag1 => 1,
            Envelope::Tag2 => 2,
            _ => 0,
        }
    }
}

/// The (innermost) IP version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ip {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// The (innermost) transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4 {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

/// The checksum state [`packet`] puts the frame and its metadata in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Csum {
    /// `NEEDS_CSUM`: the L4 field holds the pseudo-header sum.
    Partial,
    /// Verified good.
    Good,
    /// The L4 checksum is wrong, and verified so.
    Bad,
    /// Nothing known (correct bytes, never verified).
    Unknown,
}

impl Csum {
    /// Every state.
    pub const ALL: [Csum; 4] = [Csum::Partial, Csum::Good, Csum::Bad, Csum::Unknown];
}

/// Ones'-complement sum of big-endian words over the concatenation of `parts`, folded (not
/// complemented). Independent of sluice-checksum.
pub fn ocsum(parts: &[&[u8]]) -> u16 {
    let mut acc: u64 = 0;
    let mut odd: Option<u8> = None;
    for p in parts {
        for &b in *p {
            match odd.take() {
                Some(hi) => acc += u64::from(u16::from_be_bytes([hi, b])),
                None => odd = Some(b),
            }
        }
    }
    if let Some(hi) = odd {
        acc += u64::from(u16::from_be_bytes([hi, 0]));
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Inner IPv4 source.
pub const V4_SRC: [u8; 4] = [192, 0, 2, 1];
/// Inner IPv4 destination.
pub const V4_DST: [u8; 4] = [192, 0, 2, 2];
/// Inner IPv6 source.
pub const V6_SRC: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
/// Inner IPv6 destination.
pub const V6_DST: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

fn pseudo(ip: Ip, proto: u8, len: usize, outer: bool) -> Vec<u8> {
    let mut p = Vec::new();
    match ip {
        Ip::V4 => {
            p.extend_from_slice(if outer { &[198, 51, 100, 1] } else { &V4_SRC });
            p.extend_from_slice(if outer { &[198, 51, 100, 2] } else { &V4_DST });
            p.extend_from_slice(&[0, proto]);
            p.extend_from_slice(&(len as u16).to_be_bytes());
        }
        Ip::V6 => {
            let (mut s, mut d) = (V6_SRC, V6_DST);
            if outer {
                s[15] = 0x11;
                d[15] = 0x12;
            }
            p.extend_from_slice(&s);
            p.extend_from_slice(&d);
            p.extend_from_slice(&(len as u32).to_be_bytes());
            p.extend_from_slice(&[0, 0, 0, proto]);
        }
    }
    p
}

/// An IP packet (header + L4 header + payload) with correct checksums; `outer` picks the
/// tunnel endpoint addresses. `l4` is the complete L4 segment with a zero checksum field at
/// `csum_field` (`None`: no L4 checksum to fill).
pub fn ip_packet(
    ip: Ip,
    proto: u8,
    mut l4: Vec<u8>,
    csum_field: Option<usize>,
    outer: bool,
) -> Vec<u8> {
    if let Some(f) = csum_field {
        let ps = pseudo(ip, proto, l4.len(), outer);
        let mut c = !ocsum(&[&ps, &l4]);
        if c == 0 && proto == 17 {
            c = 0xffff;
        }
        l4[f..f + 2].copy_from_slice(&c.to_be_bytes());
    }
    let mut h = match ip {
        Ip::V4 => {
            let total = (20 + l4.len()) as u16;
            let mut h = vec![0x45, 0];
            h.extend_from_slice(&total.to_be_bytes());
            h.extend_from_slice(&[0x12, 0x34, 0x40, 0, 64, proto, 0, 0]);
            if outer {
                h.extend_from_slice(&[198, 51, 100, 1, 198, 51, 100, 2]);
            } else {
                h.extend_from_slice(&V4_SRC);
                h.extend_from_slice(&V4_DST);
            }
            let c = !ocsum(&[&h]);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            h
        }
        Ip::V6 => {
            let mut h = vec![0x60, 0, 0, 0];
            h.extend_from_slice(&(l4.len() as u16).to_be_bytes());
            h.extend_from_slice(&[proto, 64]);
            let (mut s, mut d) = (V6_SRC, V6_DST);
            if outer {
                s[15] = 0x11;
                d[15] = 0x12;
            }
            h.extend_from_slice(&s);
            h.extend_from_slice(&d);
            h
        }
    };
    h.extend_from_slice(&l4);
    h
}

/// `n` deterministic payload bytes.
pub fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + 3) as u8).collect()
}

/// A TCP (12345 → 80, ACK|PSH) or UDP (12345 → 53) header plus `data`, with a zero checksum:
/// (IP protocol, bytes, offset of the checksum field).
pub fn l4_segment(l4: L4, data: &[u8]) -> (u8, Vec<u8>, usize) {
    match l4 {
        L4::Tcp => {
            let mut t = vec![
                0x30, 0x39, 0x00, 0x50, 0, 0, 0x03, 0xe8, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0, 0,
                0, 0,
            ];
            t.extend_from_slice(data);
            (6, t, 16)
        }
        L4::Udp => {
            let len = (8 + data.len()) as u16;
            let mut u = vec![0x30, 0x39, 0x00, 0x35];
            u.extend_from_slice(&len.to_be_bytes());
            u.extend_from_slice(&[0, 0]);
            u.extend_from_slice(data);
            (17, u, 6)
        }
    }
}

fn eth(tags: usize, ethertype: u16) -> Vec<u8> {
    let mut e = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    for i in 0..tags {
        let tpid: u16 = if i + 1 < tags { 0x88a8 } else { 0x8100 };
        e.extend_from_slice(&tpid.to_be_bytes());
        e.extend_from_slice(&(100 + i as u16).to_be_bytes());
    }
    e.extend_from_slice(&ethertype.to_be_bytes());
    e
}

fn ethertype(ip: Ip) -> u16 {
    match ip {
        Ip::V4 => 0x0800,
        Ip::V6 => 0x86dd,
    }
}

/// A frame with every checksum correct.
pub fn frame(encap: Envelope, ip: Ip, l4: L4, payload_len: usize) -> Vec<u8> {
    let data = payload(payload_len);
    let (proto, seg, field) = l4_segment(l4, &data);
    let inner_ip = ip_packet(ip, proto, seg, Some(field), false);
    match encap {
        Envelope::Plain | Envelope::Tag1 | Envelope::Tag2 => {
            let mut f = eth(encap.tags(), ethertype(ip));
            f.extend_from_slice(&inner_ip);
            f
        }
        Envelope::Vxlan | Envelope::Geneve => {
            let mut inner = eth(0, ethertype(ip));
            inner.extend_from_slice(&inner_ip);
            let (port, hdr): (u16, [u8; 8]) = match encap {
                Envelope::Vxlan => (4789, [0x08, 0, 0, 0, 0, 0, 42, 0]),
                _ => (6081, [0, 0, 0x65, 0x58, 0, 0, 42, 0]),
            };
            let len = (8 + 8 + inner.len()) as u16;
            let mut udp = vec![0xc0, 0x00];
            udp.extend_from_slice(&port.to_be_bytes());
            udp.extend_from_slice(&len.to_be_bytes());
            udp.extend_from_slice(&[0, 0]);
            udp.extend_from_slice(&hdr);
            udp.extend_from_slice(&inner);
            // VXLAN carries an outer UDP checksum, Geneve a zero one.
            let field = (encap == Envelope::Vxlan).then_some(6);
            let mut f = eth(0, ethertype(ip));
            f.extend_from_slice(&ip_packet(ip, 17, udp, field, true));
            f
        }
        Envelope::Gre => {
            let mut gre = vec![0, 0];
            gre.extend_from_slice(&ethertype(ip).to_be_bytes());
            gre.extend_from_slice(&inner_ip);
            let mut f = eth(0, ethertype(ip));
            f.extend_from_slice(&ip_packet(ip, 47, gre, None, true));
            f
        }
    }
}

/// The level of the innermost headers: inner for a tunnelled packet, else outer.
pub fn innermost_level(meta: &OffloadMeta) -> Level {
    if meta.tunnel().is_some() {
        Level::Inner
    } else {
        Level::Outer
    }
}

/// Frame + metadata in the given checksum state, with an optional GSO request.
pub fn packet(
    encap: Envelope,
    ip: Ip,
    l4: L4,
    gso: bool,
    csum: Csum,
) -> (Vec<u8>, OffloadMeta, Layout) {
    let mut f = frame(encap, ip, l4, if gso { 3000 } else { 200 });
    let layout = sluice_wire::parse(&f).expect("test frame parses");
    let mut meta = OffloadMeta::from_layout(&layout);
    let level = innermost_level(&meta);
    let l4_off = usize::from(meta.offsets().l4(level).expect("l4"));
    let field = l4_off + if l4 == L4::Tcp { 16 } else { 6 };
    match csum {
        Csum::Unknown => {}
        Csum::Good => meta.apply_verdicts(&verify_frame(&f, &layout)),
        Csum::Bad => {
            f[field] ^= 0x55;
            meta.apply_verdicts(&verify_frame(&f, &layout));
        }
        Csum::Partial => {
            meta.apply_verdicts(&verify_frame(&f, &layout));
            meta.rx_needs_csum(l4_off as u16, (field - l4_off) as u16)
                .expect("partial");
            seed_partial(&mut f, &meta).expect("seed");
        }
    }
    if gso {
        let t = match (l4, ip) {
            (L4::Tcp, Ip::V4) => GsoType::TcpV4,
            (L4::Tcp, Ip::V6) => GsoType::TcpV6,
            (L4::Udp, _) => GsoType::UdpL4,
        };
        meta.set_gso(t, 1000, false).expect("gso");
    }
    (f, meta, layout)
}

/// The metadata a receiving packet socket's `virtio_net_hdr` gives a UDP-GSO frame that a
/// sender wrote with its outer UDP checksum left partial at `csum_start` / `csum_offset` and
/// `gso_size` bytes per datagram (what `sluice pcap`'s and the datapath's tunnel hop tests feed
/// a receiving port). Panics if the header would be refused.
pub fn uso_rx_meta(frame: &[u8], csum_start: u16, csum_offset: u16, gso_size: u16) -> OffloadMeta {
    use sluice_packet::virtio::{HdrFormat, VirtioNetHdr, F_NEEDS_CSUM, GSO_UDP_L4};
    let hdr = VirtioNetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_UDP_L4,
        hdr_len: csum_start + 8,
        gso_size,
        csum_start,
        csum_offset,
        ..VirtioNetHdr::default()
    };
    let layout = sluice_wire::parse(frame).expect("a UDP-GSO frame parses");
    hdr.to_meta(HdrFormat::V0, frame, &layout)
        .expect("a header a packet socket would give")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_frames_verify() {
        use sluice_packet::Verdict;
        for encap in Envelope::ALL {
            for ip in [Ip::V4, Ip::V6] {
                for l4 in [L4::Tcp, L4::Udp] {
                    let f = frame(encap, ip, l4, 101);
                    let layout = sluice_wire::parse(&f).unwrap();
                    assert_eq!(layout.tunnel.is_some(), encap.tunnelled(), "{encap:?}");
                    assert_eq!(layout.outer.vlans.len(), encap.tags());
                    let v = verify_frame(&f, &layout);
                    let l4v = if encap.tunnelled() { v.inner_l4 } else { v.l4 };
                    assert_eq!(l4v, Verdict::Good, "{encap:?} {ip:?} {l4:?}: {v:?}");
                }
            }
        }
    }
}
