//! Frame fixtures for the tests that talk to the kernel: a tiny `virtio_net_hdr` encoder
//! (deliberately not the real codec in `sluice-packet`, so the tests of that codec and of the
//! ports do not check it against itself) and Ethernet / IPv4 / IPv6 / TCP / UDP builders.
//!
//! The builders are test code: they index and panic on input a test would never pass.

use sluice_packet::verify::{verify_frame, Verdict};

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`.
pub const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`.
pub const F_DATA_VALID: u8 = 2;
/// `VIRTIO_NET_HDR_GSO_NONE`.
pub const GSO_NONE: u8 = 0;
/// `VIRTIO_NET_HDR_GSO_TCPV4`.
pub const GSO_TCPV4: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_UDP` (UFO).
pub const GSO_UDP: u8 = 3;
/// `VIRTIO_NET_HDR_GSO_TCPV6`.
pub const GSO_TCPV6: u8 = 4;
/// `VIRTIO_NET_HDR_GSO_UDP_L4` (USO).
pub const GSO_UDP_L4: u8 = 5;

/// A `virtio_net_hdr` (little endian), `len` 10 or 12 (v1: `num_buffers` = 0) or 24.
#[derive(Debug, Clone, Copy, Default)]
pub struct VnetHdr {
    /// `flags` (`F_NEEDS_CSUM`, `F_DATA_VALID`).
    pub flags: u8,
    /// `gso_type` (`GSO_*`, optionally with the ECN bit 0x80).
    pub gso_type: u8,
    /// `hdr_len`.
    pub hdr_len: u16,
    /// `gso_size`.
    pub gso_size: u16,
    /// `csum_start`.
    pub csum_start: u16,
    /// `csum_offset`.
    pub csum_offset: u16,
}

impl VnetHdr {
    /// The header as `len` bytes (10, 12 or 24); the bytes after the first 10 are zero.
    pub fn encode(&self, len: usize) -> Vec<u8> {
        let mut h = vec![0u8; len];
        h[0] = self.flags;
        h[1] = self.gso_type;
        h[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        h[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        h[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        h[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        h
    }

    /// Reads the first 10 bytes of `h`.
    pub fn decode(h: &[u8]) -> VnetHdr {
        let u = |i: usize| u16::from_le_bytes([h[i], h[i + 1]]);
        VnetHdr {
            flags: h[0],
            gso_type: h[1],
            hdr_len: u(2),
            gso_size: u(4),
            csum_start: u(6),
            csum_offset: u(8),
        }
    }
}

/// Source MAC of the built frames.
pub const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
/// Destination MAC of the built frames.
pub const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
/// Source IPv4 address of the built packets.
pub const IP_A: [u8; 4] = [192, 0, 2, 1];
/// Destination IPv4 address of the built packets.
pub const IP_B: [u8; 4] = [198, 51, 100, 1];

/// Deterministic payload bytes.
pub fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Ethernet/IPv4 (DF, id `ip_id`)/TCP (ACK|PSH, 20-byte header) around `data`.
pub fn tcp4_frame(seq: u32, ip_id: u16, data: &[u8], partial: bool) -> Vec<u8> {
    tcp4_frame_flags(seq, ip_id, 0x18, data, partial)
}

/// Ethernet/IPv4 (DF, id `ip_id`)/TCP (`flags`, 20-byte header) around `data`.
///
/// `partial`: the TCP checksum field holds the pseudo-header sum (for NEEDS_CSUM); otherwise the
/// full checksum. The IPv4 header checksum is always right.
pub fn tcp4_frame_flags(seq: u32, ip_id: u16, flags: u8, data: &[u8], partial: bool) -> Vec<u8> {
    let mut f = ether(
        0x0800,
        &ipv4_packet(6, ip_id, &tcp_segment(seq, flags, data)),
    );
    fill_l4_checksum(&mut f, 14, partial);
    f
}

/// Whether the frame's checksums verify: the IPv4 header checksum (IPv6 has none), the L4
/// checksum (an outer UDP checksum may be absent by design), and for a tunnel the inner ones.
pub fn checksums_good(frame: &[u8]) -> bool {
    let layout = sluice_wire::parse(frame).expect("frame parses");
    let v = verify_frame(frame, &layout);
    let ip_ok = |verdict: Verdict, present: bool| {
        if present {
            verdict == Verdict::Good
        } else {
            verdict != Verdict::Bad
        }
    };
    let ipv4 = |h: &sluice_wire::Headers| h.ethertype == 0x0800;
    let outer = ip_ok(v.ip, ipv4(&layout.outer))
        && (v.l4 == Verdict::Good || (v.l4_absent && layout.tunnel.is_some()));
    match &layout.inner {
        Some(inner) => outer && ip_ok(v.inner_ip, ipv4(inner)) && v.inner_l4 == Verdict::Good,
        None => outer,
    }
}

/// Inserts an 802.1Q/802.1ad tag after the MAC addresses.
pub fn tagged(frame: &[u8], tpid: u16, tci: u16) -> Vec<u8> {
    let mut f = frame[..12].to_vec();
    f.extend_from_slice(&tpid.to_be_bytes());
    f.extend_from_slice(&tci.to_be_bytes());
    f.extend_from_slice(&frame[12..]);
    f
}

/// Source IPv6 address of the built packets.
pub const IP6_A: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
/// Destination IPv6 address of the built packets.
pub const IP6_B: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

/// A TCP header (ports 40000 → 5001, ack 1, 20 bytes, window 65535) plus payload with a zero
/// checksum field.
pub fn tcp_segment(seq: u32, flags: u8, data: &[u8]) -> Vec<u8> {
    let mut t = Vec::with_capacity(20 + data.len());
    t.extend_from_slice(&40000u16.to_be_bytes());
    t.extend_from_slice(&5001u16.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&1u32.to_be_bytes());
    t.extend_from_slice(&[0x50, flags]);
    t.extend_from_slice(&65535u16.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 0]);
    t.extend_from_slice(data);
    t
}

/// A UDP header plus payload with a zero checksum field.
pub fn udp_datagram(sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut u = Vec::with_capacity(8 + data.len());
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + data.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(data);
    u
}

/// IPv4 header (DF, id, TTL 64, right checksum) + `l4`.
pub fn ipv4_packet(proto: u8, id: u16, l4: &[u8]) -> Vec<u8> {
    let mut p = vec![0x45, 0];
    p.extend_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&[0x40, 0, 64, proto, 0, 0]);
    p.extend_from_slice(&IP_A);
    p.extend_from_slice(&IP_B);
    let c = sluice_checksum::checksum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(l4);
    p
}

/// IPv6 header + `l4`.
pub fn ipv6_packet(next_header: u8, l4: &[u8]) -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    p.extend_from_slice(&[next_header, 64]);
    p.extend_from_slice(&IP6_A);
    p.extend_from_slice(&IP6_B);
    p.extend_from_slice(l4);
    p
}

/// Ethernet header (B ← A) + `l3`.
pub fn ether(ethertype: u16, l3: &[u8]) -> Vec<u8> {
    let mut f = MAC_B.to_vec();
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(l3);
    f
}

/// Fills the L4 checksum of the IP packet at `l3` in `frame`: the pseudo-header sum when
/// `partial`, else the full checksum (UDP 0 becomes 0xffff). Returns (csum_start, csum_offset).
pub fn fill_l4_checksum(frame: &mut [u8], l3: usize, partial: bool) -> (u16, u16) {
    let (l4, proto, pseudo) = if frame[l3] >> 4 == 4 {
        let ihl = usize::from(frame[l3] & 0x0f) * 4;
        let proto = frame[l3 + 9];
        let src: [u8; 4] = frame[l3 + 12..l3 + 16].try_into().unwrap();
        let dst: [u8; 4] = frame[l3 + 16..l3 + 20].try_into().unwrap();
        let len = (frame.len() - l3 - ihl) as u16;
        (
            l3 + ihl,
            proto,
            sluice_checksum::pseudo::ipv4(src, dst, proto, len),
        )
    } else {
        let proto = frame[l3 + 6];
        let src: [u8; 16] = frame[l3 + 8..l3 + 24].try_into().unwrap();
        let dst: [u8; 16] = frame[l3 + 24..l3 + 40].try_into().unwrap();
        let len = (frame.len() - l3 - 40) as u32;
        (
            l3 + 40,
            proto,
            sluice_checksum::pseudo::ipv6(&src, &dst, proto, len),
        )
    };
    let off = if proto == 6 { 16 } else { 6 };
    frame[l4 + off..l4 + off + 2].copy_from_slice(&[0, 0]);
    let v = if partial {
        pseudo
    } else {
        let c = !sluice_checksum::sum_from(pseudo, &frame[l4..]);
        if c == 0 && proto == 17 {
            0xffff
        } else {
            c
        }
    };
    frame[l4 + off..l4 + off + 2].copy_from_slice(&v.to_be_bytes());
    (l4 as u16, off as u16)
}
