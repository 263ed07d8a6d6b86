//! Hand-built test frames with checksums from naive reference implementations (not the code
//! under test), and the layouts that describe them.

use sluice_wire::{ip_proto, Headers, L3Kind, Layout, Tunnel, TunnelKind};

pub const SRC4: [u8; 4] = [192, 0, 2, 1];
pub const DST4: [u8; 4] = [198, 51, 100, 7];
pub const SRC6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
pub const DST6: [u8; 16] = [
    0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0xab, 0xcd, 0, 2,
];

/// RFC 1071 sum of the concatenation of `parts`, the slow way: one byte at a time.
pub fn naive_sum(parts: &[&[u8]]) -> u16 {
    let mut acc: u64 = 0;
    let mut i = 0usize;
    for p in parts {
        for &b in *p {
            acc += if i & 1 == 0 {
                u64::from(b) << 8
            } else {
                u64::from(b)
            };
            i += 1;
        }
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Bitwise CRC32c (reflected polynomial 0x82f63b78, init and final XOR all ones).
pub fn naive_crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// The pseudo-header bytes for an L4 checksum.
pub fn pseudo_bytes(kind: L3Kind, src: &[u8], dst: &[u8], proto: u8, len: usize) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(src);
    v.extend_from_slice(dst);
    match kind {
        L3Kind::Ipv4 => {
            v.extend_from_slice(&[0, proto]);
            v.extend_from_slice(&(len as u16).to_be_bytes());
        }
        L3Kind::Ipv6 => {
            v.extend_from_slice(&(len as u32).to_be_bytes());
            v.extend_from_slice(&[0, 0, 0, proto]);
        }
    }
    v
}

fn addrs(kind: L3Kind) -> (Vec<u8>, Vec<u8>) {
    match kind {
        L3Kind::Ipv4 => (SRC4.to_vec(), DST4.to_vec()),
        L3Kind::Ipv6 => (SRC6.to_vec(), DST6.to_vec()),
    }
}

/// Fills in the checksum of the L4 segment `seg` of `proto` (reference implementation).
pub fn fill_l4(kind: L3Kind, src: &[u8], dst: &[u8], proto: u8, seg: &mut [u8]) {
    match proto {
        ip_proto::SCTP => {
            seg[8..12].fill(0);
            let crc = naive_crc32c(seg);
            seg[8..12].copy_from_slice(&crc.to_le_bytes());
        }
        _ => {
            let (field, pseudo) = match proto {
                ip_proto::TCP => (16, true),
                ip_proto::UDP => (6, true),
                ip_proto::ICMP => (2, false),
                ip_proto::ICMPV6 => (2, true),
                ip_proto::GRE => (4, false),
                _ => return,
            };
            seg[field..field + 2].fill(0);
            let ph = if pseudo {
                pseudo_bytes(kind, src, dst, proto, seg.len())
            } else {
                vec![]
            };
            let mut c = !naive_sum(&[&ph, seg]);
            if proto == ip_proto::UDP && c == 0 {
                c = 0xffff;
            }
            seg[field..field + 2].copy_from_slice(&c.to_be_bytes());
        }
    }
}

/// An IP header for a payload of `len` bytes, with a correct IPv4 header checksum.
pub fn ip_header(kind: L3Kind, proto: u8, len: usize) -> Vec<u8> {
    let (src, dst) = addrs(kind);
    match kind {
        L3Kind::Ipv4 => {
            let total = (20 + len) as u16;
            let mut h = vec![0x45, 0x28, 0, 0, 0x12, 0x34, 0x40, 0, 64, proto, 0, 0];
            h[2..4].copy_from_slice(&total.to_be_bytes());
            h.extend_from_slice(&src);
            h.extend_from_slice(&dst);
            let c = !naive_sum(&[&h]);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            h
        }
        L3Kind::Ipv6 => {
            let mut h = vec![0x6a, 0x80, 0x00, 0x01, 0, 0, proto, 64];
            h[4..6].copy_from_slice(&(len as u16).to_be_bytes());
            h.extend_from_slice(&src);
            h.extend_from_slice(&dst);
            h
        }
    }
}

/// A TCP segment with `payload`; checksum left zero.
pub fn tcp(payload: &[u8]) -> Vec<u8> {
    let mut s = vec![
        0x30, 0x39, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff,
    ];
    s.extend_from_slice(&[0, 0, 0, 0]);
    s.extend_from_slice(payload);
    s
}

/// A UDP datagram with `payload` to `dport`; checksum left zero.
pub fn udp(dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut s = vec![0xc0, 0x01];
    s.extend_from_slice(&dport.to_be_bytes());
    s.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    s.extend_from_slice(&[0, 0]);
    s.extend_from_slice(payload);
    s
}

/// An SCTP packet with one DATA-like chunk.
pub fn sctp(payload: &[u8]) -> Vec<u8> {
    let mut s = vec![0x0b, 0x59, 0x0b, 0x5a, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0];
    s.extend_from_slice(payload);
    s
}

/// An ICMP (or ICMPv6) echo request.
pub fn icmp_echo(v6: bool, payload: &[u8]) -> Vec<u8> {
    let mut s = vec![if v6 { 128 } else { 8 }, 0, 0, 0, 0x12, 0x34, 0, 1];
    s.extend_from_slice(payload);
    s
}

pub fn headers(
    l2: Option<usize>,
    l3: usize,
    kind: L3Kind,
    l4: usize,
    proto: u8,
    end: usize,
) -> Headers {
    Headers {
        l2,
        ethertype: match kind {
            L3Kind::Ipv4 => 0x0800,
            L3Kind::Ipv6 => 0x86dd,
        },
        l3: Some(l3),
        l3_kind: Some(kind),
        l4: Some(l4),
        l4_proto: Some(proto),
        payload: None,
        l3_end: Some(end),
        ..Headers::default()
    }
}

fn ethernet(kind: L3Kind) -> Vec<u8> {
    let mut e = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    e.extend_from_slice(match kind {
        L3Kind::Ipv4 => &[0x08, 0x00],
        L3Kind::Ipv6 => &[0x86, 0xdd],
    });
    e
}

/// Ethernet + IP + `seg` (checksum filled in when `fill`), padded to 60 bytes like a real
/// Ethernet frame. Returns the frame and its layout.
pub fn frame(kind: L3Kind, proto: u8, mut seg: Vec<u8>, fill: bool) -> (Vec<u8>, Layout) {
    let (src, dst) = addrs(kind);
    if fill {
        fill_l4(kind, &src, &dst, proto, &mut seg);
    }
    let ip = ip_header(kind, proto, seg.len());
    let mut f = ethernet(kind);
    f.extend_from_slice(&ip);
    let l4 = f.len();
    f.extend_from_slice(&seg);
    let end = f.len();
    if f.len() < 60 {
        f.resize(60, 0xee);
    }
    let layout = Layout {
        outer: headers(Some(0), 14, kind, l4, proto, end),
        ..Layout::default()
    };
    (f, layout)
}

/// Shifts every offset of `h` by `by`.
fn shifted(h: &Headers, by: usize) -> Headers {
    Headers {
        l2: h.l2.map(|x| x + by),
        l3: h.l3.map(|x| x + by),
        l4: h.l4.map(|x| x + by),
        payload: h.payload.map(|x| x + by),
        l3_end: h.l3_end.map(|x| x + by),
        ..*h
    }
}

/// A VXLAN frame over `outer` IP around the inner frame `inner` (with its layout); the outer UDP
/// checksum is computed when `outer_csum`, else zero.
pub fn vxlan(outer: L3Kind, inner: (Vec<u8>, Layout), outer_csum: bool) -> (Vec<u8>, Layout) {
    let (inner_bytes, inner_layout) = inner;
    let inner_end = inner_layout.outer.l3_end.unwrap_or(inner_bytes.len());
    let inner_bytes = &inner_bytes[..inner_end];
    let mut payload = vec![0x08, 0, 0, 0, 0, 0x12, 0x34, 0];
    payload.extend_from_slice(inner_bytes);
    let seg = udp(sluice_wire::VXLAN_PORT, &payload);
    let (f, mut layout) = frame(outer, ip_proto::UDP, seg, outer_csum);
    let l4 = layout.outer.l4.unwrap_or(0);
    layout.tunnel = Some(Tunnel {
        kind: TunnelKind::Vxlan,
        offset: l4 + 8,
        len: 8,
        id: Some(0x1234),
        proto: 0x6558,
    });
    layout.inner = Some(shifted(&inner_layout.outer, l4 + 16));
    (f, layout)
}

/// A GRE frame over IPv4 carrying the IP packet of `inner` (its Ethernet header dropped), with
/// the GRE checksum when `csum`.
pub fn gre(inner: (Vec<u8>, Layout), csum: bool) -> (Vec<u8>, Layout) {
    let (inner_bytes, inner_layout) = inner;
    let h = inner_layout.outer;
    let ip = &inner_bytes[h.l3.unwrap_or(14)..h.l3_end.unwrap_or(inner_bytes.len())];
    let ethertype = h.ethertype.to_be_bytes();
    let mut seg = if csum {
        vec![0x80, 0, ethertype[0], ethertype[1], 0, 0, 0, 0]
    } else {
        vec![0, 0, ethertype[0], ethertype[1]]
    };
    let glen = seg.len();
    seg.extend_from_slice(ip);
    let (f, mut layout) = frame(L3Kind::Ipv4, ip_proto::GRE, seg, csum);
    let l4 = layout.outer.l4.unwrap_or(0);
    layout.tunnel = Some(Tunnel {
        kind: TunnelKind::Gre,
        offset: l4,
        len: glen,
        id: None,
        proto: h.ethertype,
    });
    let mut ih = shifted(&h, l4 + glen - h.l3.unwrap_or(14));
    ih.l2 = None;
    layout.inner = Some(ih);
    (f, layout)
}

/// IPv4/TCP with a payload.
pub fn v4_tcp() -> (Vec<u8>, Layout) {
    frame(L3Kind::Ipv4, ip_proto::TCP, tcp(b"hello, sluice!!"), true)
}

/// IPv6/TCP with a payload.
pub fn v6_tcp() -> (Vec<u8>, Layout) {
    frame(L3Kind::Ipv6, ip_proto::TCP, tcp(b"hello, sluice!!"), true)
}

/// IPv4/UDP.
pub fn v4_udp() -> (Vec<u8>, Layout) {
    frame(L3Kind::Ipv4, ip_proto::UDP, udp(53, b"abcdefg"), true)
}

/// IPv6/UDP.
pub fn v6_udp() -> (Vec<u8>, Layout) {
    frame(L3Kind::Ipv6, ip_proto::UDP, udp(53, b"abcdefg"), true)
}

/// IPv4/SCTP.
pub fn v4_sctp() -> (Vec<u8>, Layout) {
    frame(
        L3Kind::Ipv4,
        ip_proto::SCTP,
        sctp(b"\x00\x03\x00\x08chunk!!!"),
        true,
    )
}

/// The stored L4 checksum minus the correct one (ones' complement), computed with the reference:
/// the "error" a rewrite must preserve. Zero (as 0 or 0xffff) for a correct checksum.
pub fn l4_error(frame: &[u8], h: &Headers) -> u16 {
    let (l3, l4, end) = (h.l3.unwrap(), h.l4.unwrap(), h.l3_end.unwrap());
    let kind = h.l3_kind.unwrap();
    let (src, dst) = match kind {
        L3Kind::Ipv4 => (&frame[l3 + 12..l3 + 16], &frame[l3 + 16..l3 + 20]),
        L3Kind::Ipv6 => (&frame[l3 + 8..l3 + 24], &frame[l3 + 24..l3 + 40]),
    };
    let proto = h.l4_proto.unwrap();
    let seg = &frame[l4..end];
    let ph = match proto {
        ip_proto::ICMP | ip_proto::GRE => vec![],
        _ => pseudo_bytes(kind, src, dst, proto, seg.len()),
    };
    naive_sum(&[&ph, seg])
}
