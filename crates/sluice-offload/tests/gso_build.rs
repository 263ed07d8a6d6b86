//! Super-packet builder shared by the GSO tests (included with `#[path]`; on its own it is an
//! empty test crate). Raw bytes, written independently of `sluice-wire`'s builders so the tests
//! do not share a bug with the code under test.
// Test scaffolding: the field names say what they are.
#![allow(dead_code, missing_docs)]

/// The L4 of the innermost packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4 {
    /// TCP with these flags and this many bytes of options (multiple of 4).
    Tcp { flags: u8, opt_len: usize, seq: u32 },
    /// UDP.
    Udp,
}

/// A tunnel around the inner packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tun {
    /// VXLAN (UDP 4789) with the outer UDP checksum set or zero.
    Vxlan { csum: bool },
    /// Geneve (UDP 6081) with `opt_words` 4-byte option words.
    Geneve { csum: bool, opt_words: usize },
    /// GRE carrying Ethernet (0x6558) with optional checksum/key/sequence.
    Gre { csum: bool, key: bool, seq: bool },
}

/// One IP header spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ip {
    /// IPv6 instead of IPv4.
    pub v6: bool,
    /// IPv4 options bytes (multiple of 4) / number of IPv6 extension headers (HBH, DO) before L4.
    pub ext: usize,
    /// IPv4 ID.
    pub id: u16,
    /// IPv4 DF.
    pub df: bool,
}

impl Ip {
    pub const V4: Ip = Ip {
        v6: false,
        ext: 0,
        id: 0x1234,
        df: true,
    };
    pub const V6: Ip = Ip {
        v6: true,
        ext: 0,
        id: 0,
        df: false,
    };
}

/// A whole super-packet spec.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Outer VLAN TPIDs (outermost first).
    pub vlans: Vec<u16>,
    /// The outer IP when tunnelled, else the only IP.
    pub ip: Ip,
    /// Tunnel and the inner packet's VLAN TPIDs and IP.
    pub tunnel: Option<(Tun, Vec<u16>, Ip)>,
    /// Innermost L4.
    pub l4: L4,
    /// Innermost payload.
    pub payload: Vec<u8>,
}

pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn sum(data: &[u8]) -> u32 {
    let mut s = 0u32;
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        s += u32::from(w);
    }
    s
}

pub fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// Pseudo-header sum (folded, uncomplemented) for the IP header at `ip` (v4/v6).
pub fn pseudo(frame: &[u8], ip: usize, v6: bool, proto: u8, len: usize) -> u16 {
    let s = if v6 {
        sum(&frame[ip + 8..ip + 40]) + u32::from(proto) + len as u32
    } else {
        sum(&frame[ip + 12..ip + 20]) + u32::from(proto) + len as u32
    };
    fold(s)
}

fn eth(out: &mut Vec<u8>, vlans: &[u16], ethertype: u16, n: u8) {
    out.extend_from_slice(&[0x02, 0, 0, 0, 0, n, 0x02, 0, 0, 0, 1, n]);
    for (i, &t) in vlans.iter().enumerate() {
        out.extend_from_slice(&t.to_be_bytes());
        out.extend_from_slice(&(100 + i as u16).to_be_bytes());
    }
    out.extend_from_slice(&ethertype.to_be_bytes());
}

/// Writes an IP header for `l4_len` bytes of L4 with protocol `proto`; returns (offset of the
/// IP header, offset of the pseudo/next-header-bearing header).
fn ip(out: &mut Vec<u8>, spec: &Ip, proto: u8, l4_len: usize, n: u8) -> usize {
    let at = out.len();
    if spec.v6 {
        let ext_len = spec.ext * 8;
        let first = if spec.ext > 0 { 0 } else { proto };
        out.extend_from_slice(&[0x60, 0, 0, 0]);
        out.extend_from_slice(&((l4_len + ext_len) as u16).to_be_bytes());
        out.extend_from_slice(&[first, 64]);
        out.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, n, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        out.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, n, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        for i in 0..spec.ext {
            // HBH first, then destination options; each 8 bytes with a PadN option.
            let nh = if i + 1 == spec.ext {
                proto
            } else {
                60 // destination options
            };
            out.extend_from_slice(&[nh, 0, 1, 4, 0, 0, 0, 0]);
        }
    } else {
        let ihl = 20 + spec.ext;
        let total = ihl + l4_len;
        out.push(0x40 | (ihl / 4) as u8);
        out.push(0);
        out.extend_from_slice(&(total as u16).to_be_bytes());
        out.extend_from_slice(&spec.id.to_be_bytes());
        out.extend_from_slice(&(if spec.df { 0x4000u16 } else { 0 }).to_be_bytes());
        out.extend_from_slice(&[64, proto, 0, 0]);
        out.extend_from_slice(&[192, 0, 2, n]);
        out.extend_from_slice(&[198, 51, 100, n]);
        for i in 0..spec.ext {
            // NOP options, ending with EOL.
            out.push(if i + 1 == spec.ext { 0 } else { 1 });
        }
        let c = !fold(sum(&out[at..at + ihl]));
        out[at + 10..at + 12].copy_from_slice(&c.to_be_bytes());
    }
    at
}

fn l4_len(l4: &L4, payload: usize) -> usize {
    match l4 {
        L4::Tcp { opt_len, .. } => 20 + opt_len + payload,
        L4::Udp => 8 + payload,
    }
}

/// How to fill the innermost L4 checksum of the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seed {
    /// Garbage (the segmenter must not trust it).
    Garbage,
    /// The pseudo-header sum (what the kernel expects with NEEDS_CSUM).
    Pseudo,
}

/// Builds the frame. Returns (frame, offset of the innermost L4 header).
pub fn build(spec: &Spec, seed: Seed) -> (Vec<u8>, usize) {
    let mut f = Vec::new();
    let inner_l4_len = l4_len(&spec.l4, spec.payload.len());
    let proto = match spec.l4 {
        L4::Tcp { .. } => 6,
        L4::Udp => 17,
    };
    let ethertype = |v6: bool| if v6 { 0x86ddu16 } else { 0x0800 };
    let (inner_ip_at, inner_v6);
    match &spec.tunnel {
        None => {
            eth(&mut f, &spec.vlans, ethertype(spec.ip.v6), 1);
            inner_ip_at = ip(&mut f, &spec.ip, proto, inner_l4_len, 1);
            inner_v6 = spec.ip.v6;
        }
        Some((tun, ivlans, iip)) => {
            let inner_ip_len = if iip.v6 {
                40 + iip.ext * 8
            } else {
                20 + iip.ext
            };
            let inner_frame = 14 + 4 * ivlans.len() + inner_ip_len + inner_l4_len;
            let (thdr, oproto) = match tun {
                Tun::Vxlan { .. } => (8 + 8, 17),
                Tun::Geneve { opt_words, .. } => (8 + 8 + 4 * opt_words, 17),
                Tun::Gre { csum, key, seq } => {
                    (4 + 4 * (*csum as usize + *key as usize + *seq as usize), 47)
                }
            };
            eth(&mut f, &spec.vlans, ethertype(spec.ip.v6), 1);
            let oip = ip(&mut f, &spec.ip, oproto, thdr + inner_frame, 1);
            let tstart = f.len();
            match tun {
                Tun::Vxlan { .. } | Tun::Geneve { .. } => {
                    let port: u16 = if matches!(tun, Tun::Vxlan { .. }) {
                        4789
                    } else {
                        6081
                    };
                    f.extend_from_slice(&40000u16.to_be_bytes());
                    f.extend_from_slice(&port.to_be_bytes());
                    f.extend_from_slice(&((thdr + inner_frame) as u16).to_be_bytes());
                    f.extend_from_slice(&[0xab, 0xcd]); // fixed later if csum
                    match tun {
                        Tun::Vxlan { .. } => f.extend_from_slice(&[0x08, 0, 0, 0, 0, 0, 42, 0]),
                        Tun::Geneve { opt_words, .. } => {
                            f.extend_from_slice(&[*opt_words as u8, 0, 0x65, 0x58, 0, 0, 42, 0]);
                            for w in 0..*opt_words {
                                if w == 0 {
                                    // class 0x0102, type 0x03, length opt_words-1
                                    f.extend_from_slice(&[1, 2, 3, (*opt_words - 1) as u8]);
                                } else {
                                    f.extend_from_slice(&[w as u8, 0xee, 0xdd, 0xcc]);
                                }
                            }
                        }
                        Tun::Gre { .. } => unreachable!(),
                    }
                }
                Tun::Gre { csum, key, seq } => {
                    let mut b0 = 0u8;
                    if *csum {
                        b0 |= 0x80;
                    }
                    if *key {
                        b0 |= 0x20;
                    }
                    if *seq {
                        b0 |= 0x10;
                    }
                    f.extend_from_slice(&[b0, 0, 0x65, 0x58]);
                    if *csum {
                        f.extend_from_slice(&[0x55, 0x66, 0, 0]);
                    }
                    if *key {
                        f.extend_from_slice(&[0, 0, 0x12, 0x34]);
                    }
                    if *seq {
                        f.extend_from_slice(&[0, 0, 0, 7]);
                    }
                }
            }
            eth(&mut f, ivlans, ethertype(iip.v6), 2);
            inner_ip_at = ip(&mut f, iip, proto, inner_l4_len, 2);
            inner_v6 = iip.v6;
            let _ = (oip, tstart);
        }
    }
    let l4_at = f.len();
    match spec.l4 {
        L4::Tcp {
            flags,
            opt_len,
            seq,
        } => {
            f.extend_from_slice(&[0x9c, 0x40, 0x00, 0x50]);
            f.extend_from_slice(&seq.to_be_bytes());
            f.extend_from_slice(&0x0102_0304u32.to_be_bytes());
            f.push((((20 + opt_len) / 4) as u8) << 4);
            f.push(flags);
            f.extend_from_slice(&[0xfa, 0xf0, 0xde, 0xad, 0x00, 0x00]);
            for i in 0..opt_len {
                // NOPs then a timestamp-like filler (kind 1 = NOP keeps it valid).
                let _ = i;
                f.push(1);
            }
        }
        L4::Udp => {
            f.extend_from_slice(&[0x9c, 0x40, 0x13, 0x88]);
            f.extend_from_slice(&(inner_l4_len as u16).to_be_bytes());
            f.extend_from_slice(&[0xde, 0xad]);
        }
    }
    f.extend_from_slice(&spec.payload);
    let field = l4_at
        + if matches!(spec.l4, L4::Tcp { .. }) {
            16
        } else {
            6
        };
    let v = match seed {
        Seed::Garbage => 0xdead,
        Seed::Pseudo => pseudo(&f, inner_ip_at, inner_v6, proto, inner_l4_len),
    };
    f[field..field + 2].copy_from_slice(&v.to_be_bytes());
    (f, l4_at)
}

/// Fills the outer UDP checksum of a tunnel frame (for inputs that should say "checksummed")
/// with a non-zero marker (the segmenter computes it from scratch).
pub fn mark_outer_csum(frame: &mut [u8], spec: &Spec) {
    if let Some((Tun::Vxlan { csum } | Tun::Geneve { csum, .. }, ..)) = spec.tunnel {
        let ip_len = if spec.ip.v6 {
            40 + spec.ip.ext * 8
        } else {
            20 + spec.ip.ext
        };
        let udp = 14 + 4 * spec.vlans.len() + ip_len;
        let v: u16 = if csum { 0x1111 } else { 0 };
        frame[udp + 6..udp + 8].copy_from_slice(&v.to_be_bytes());
    }
}
