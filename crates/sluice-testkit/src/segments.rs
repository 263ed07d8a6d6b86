//! Segment builders shared by the GRO, datapath and `sluice pcap` tests: TCP/UDP segments over
//! IPv4/IPv6, VLAN stacks, IP options, IPv6 extension headers and VXLAN/Geneve/GRE tunnels, all
//! with correct checksums unless a test breaks one on purpose. A [`Seg`] describes one segment
//! field by field; [`Seg::build`] writes its frame.
//!
//! Test code: the builders index and panic on descriptions a test would never pass (TCP options
//! not padded to 4 bytes, say).

use sluice_checksum::{checksum, combine, pseudo, sum};

/// A tunnel around the segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tun {
    /// VXLAN (UDP port 4789).
    Vxlan {
        /// The VNI.
        vni: u32,
        /// Whether the outer UDP header carries a checksum (else 0).
        outer_csum: bool,
    },
    /// Geneve (UDP port 6081) carrying Ethernet, no options.
    Geneve {
        /// The VNI.
        vni: u32,
        /// Whether the outer UDP header carries a checksum (else 0).
        outer_csum: bool,
    },
    /// GRE carrying Ethernet (transparent Ethernet bridging).
    Gre {
        /// The GRE key, if any.
        key: Option<u32>,
    },
}

/// Outer headers of a tunnel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outer {
    /// The tunnel header.
    pub tun: Tun,
    /// Outer IPv6 (else IPv4).
    pub v6: bool,
    /// Outer TTL / hop limit.
    pub ttl: u8,
    /// Outer IPv4 ID.
    pub id: u16,
    /// Outer IPv4 don't-fragment bit.
    pub df: bool,
    /// Outer UDP source port (VXLAN, Geneve).
    pub sport: u16,
}

/// One segment to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seg {
    /// IPv6 (else IPv4).
    pub v6: bool,
    /// UDP (else TCP).
    pub udp: bool,
    /// VLAN tags, outermost first: (TPID, TCI).
    pub vlans: Vec<(u16, u16)>,
    /// Last byte of the source address (192.0.2.x or 2001:db8::x).
    pub src: u8,
    /// Last byte of the destination address.
    pub dst: u8,
    /// L4 source port.
    pub sport: u16,
    /// L4 destination port.
    pub dport: u16,
    /// TCP sequence number (for UDP: where the payload pattern starts).
    pub seq: u32,
    /// TCP acknowledgment number.
    pub ack: u32,
    /// TCP flags ([`ACK`], [`PSH`], …).
    pub flags: u8,
    /// TCP window.
    pub window: u16,
    /// TCP urgent pointer (kept as given, whatever the URG flag).
    pub urg: u16,
    /// TCP option bytes (a multiple of 4).
    pub options: Vec<u8>,
    /// The L4 payload.
    pub payload: Vec<u8>,
    /// TTL / hop limit.
    pub ttl: u8,
    /// IPv4 TOS / IPv6 traffic class.
    pub tos: u8,
    /// IPv4 ID.
    pub id: u16,
    /// IPv4 don't-fragment bit.
    pub df: bool,
    /// IPv4 option bytes (a multiple of 4).
    pub ip_opts: Vec<u8>,
    /// IPv6 extension headers: (type, total length in bytes, multiple of 8).
    pub ext: Vec<(u8, usize)>,
    /// IPv6 flow label.
    pub flow_label: u32,
    /// A tunnel around the segment, if any.
    pub outer: Option<Outer>,
    /// Write a zero UDP checksum (checksum absent).
    pub udp_csum_zero: bool,
    /// Set the IPv4 more-fragments bit.
    pub frag_mf: bool,
    /// Added to the last byte of the destination MAC (a different L2 flow).
    pub mac: u8,
}

/// TCP flag ACK.
pub const ACK: u8 = 0x10;
/// TCP flag PSH.
pub const PSH: u8 = 0x08;
/// TCP flag FIN.
pub const FIN: u8 = 0x01;
/// TCP flag SYN.
pub const SYN: u8 = 0x02;
/// TCP flag RST.
pub const RST: u8 = 0x04;
/// TCP flag URG.
pub const URG: u8 = 0x20;
/// TCP flag ECE.
pub const ECE: u8 = 0x40;
/// TCP flag CWR.
pub const CWR: u8 = 0x80;

/// The deterministic payload byte at absolute stream offset `off`.
pub fn pbyte(off: u32) -> u8 {
    (off.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// `len` payload bytes of the deterministic stream from offset `seq` on ([`pbyte`]).
pub fn payload_at(seq: u32, len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| pbyte(seq.wrapping_add(i)))
        .collect()
}

impl Seg {
    /// A `len`-byte TCP/IPv4 segment (ACK) of flow 0 at `seq`.
    pub fn tcp4(seq: u32, len: usize) -> Seg {
        Seg {
            v6: false,
            udp: false,
            vlans: vec![],
            src: 1,
            dst: 2,
            sport: 40000,
            dport: 5201,
            seq,
            ack: 0x1000_0000,
            flags: ACK,
            window: 512,
            urg: 0,
            options: vec![],
            payload: payload_at(seq, len),
            ttl: 64,
            tos: 0,
            id: 100,
            df: true,
            ip_opts: vec![],
            ext: vec![],
            flow_label: 0x12345,
            outer: None,
            udp_csum_zero: false,
            frag_mf: false,
            mac: 0,
        }
    }

    /// [`Seg::tcp4`] over IPv6.
    pub fn tcp6(seq: u32, len: usize) -> Seg {
        Seg {
            v6: true,
            ..Seg::tcp4(seq, len)
        }
    }

    /// The `n`-th `len`-byte UDP/IPv4 datagram of flow 0 (IPv4 ID 100 + `n`, payload from
    /// stream offset `n × len`).
    pub fn udp4(len: usize, n: u32) -> Seg {
        Seg {
            udp: true,
            id: 100u16.wrapping_add(n as u16),
            ..Seg::tcp4(n.wrapping_mul(len as u32), len)
        }
    }

    /// The following segment of the same flow (sequence and IPv4 ID advanced).
    pub fn next(&self, len: usize) -> Seg {
        let seq = self.seq.wrapping_add(self.payload.len() as u32);
        let mut s = self.clone();
        s.seq = seq;
        s.payload = payload_at(seq, len);
        s.id = self.id.wrapping_add(1);
        if let Some(o) = &mut s.outer {
            o.id = o.id.wrapping_add(1);
        }
        s
    }

    fn addr4(&self, which: u8) -> [u8; 4] {
        [192, 0, 2, which]
    }

    fn addr6(&self, which: u8) -> [u8; 16] {
        let mut a = [0u8; 16];
        a[0] = 0x20;
        a[1] = 0x01;
        a[2] = 0x0d;
        a[3] = 0xb8;
        a[15] = which;
        a
    }

    /// Builds the L4 header + payload with a correct checksum for the given pseudo-header.
    fn l4(&self, v6: bool, srcdst: (&[u8], &[u8])) -> Vec<u8> {
        let mut l4 = Vec::new();
        if self.udp {
            let len = 8 + self.payload.len();
            l4.extend_from_slice(&self.sport.to_be_bytes());
            l4.extend_from_slice(&self.dport.to_be_bytes());
            l4.extend_from_slice(&(len as u16).to_be_bytes());
            l4.extend_from_slice(&[0, 0]);
            l4.extend_from_slice(&self.payload);
        } else {
            let thlen = 20 + self.options.len();
            assert_eq!(thlen % 4, 0, "TCP options must be padded to 4 bytes");
            l4.extend_from_slice(&self.sport.to_be_bytes());
            l4.extend_from_slice(&self.dport.to_be_bytes());
            l4.extend_from_slice(&self.seq.to_be_bytes());
            l4.extend_from_slice(&self.ack.to_be_bytes());
            l4.push(((thlen / 4) as u8) << 4);
            l4.push(self.flags);
            l4.extend_from_slice(&self.window.to_be_bytes());
            l4.extend_from_slice(&[0, 0]);
            l4.extend_from_slice(&self.urg.to_be_bytes());
            l4.extend_from_slice(&self.options);
            l4.extend_from_slice(&self.payload);
        }
        let proto = if self.udp { 17 } else { 6 };
        let ps = if v6 {
            pseudo::ipv6(
                srcdst.0.try_into().unwrap(),
                srcdst.1.try_into().unwrap(),
                proto,
                l4.len() as u32,
            )
        } else {
            pseudo::ipv4(
                srcdst.0.try_into().unwrap(),
                srcdst.1.try_into().unwrap(),
                proto,
                l4.len() as u16,
            )
        };
        let mut c = !combine(ps, sum(&l4));
        if self.udp && c == 0 {
            c = 0xffff;
        }
        if self.udp && self.udp_csum_zero {
            c = 0;
        }
        let off = if self.udp { 6 } else { 16 };
        l4[off..off + 2].copy_from_slice(&c.to_be_bytes());
        l4
    }

    /// The IP packet (header + L4).
    fn ip(&self) -> Vec<u8> {
        let proto = if self.udp { 17u8 } else { 6u8 };
        if self.v6 {
            let (s, d) = (self.addr6(self.src), self.addr6(self.dst));
            let l4 = self.l4(true, (&s, &d));
            let mut ext = Vec::new();
            let mut next = proto;
            for (i, &(t, len)) in self.ext.iter().enumerate().rev() {
                let mut h = vec![0u8; len];
                h[0] = next;
                h[1] = (len / 8 - 1) as u8;
                if t == 44 {
                    h[1] = 0;
                    h[4..8].copy_from_slice(&(0x1234_0000u32 + i as u32).to_be_bytes());
                } else if t == 43 {
                    h[2] = 0; // routing type 0... segments left 0
                    h[3] = 0;
                } else {
                    // PadN option filling the rest
                    h[2] = 1;
                    h[3] = (len - 4) as u8;
                }
                let mut e = h;
                e.extend_from_slice(&ext);
                ext = e;
                next = t;
            }
            let plen = ext.len() + l4.len();
            let mut ip = Vec::new();
            let w: u32 = (6 << 28) | (u32::from(self.tos) << 20) | (self.flow_label & 0xfffff);
            ip.extend_from_slice(&w.to_be_bytes());
            ip.extend_from_slice(&(plen as u16).to_be_bytes());
            ip.push(next);
            ip.push(self.ttl);
            ip.extend_from_slice(&s);
            ip.extend_from_slice(&d);
            ip.extend_from_slice(&ext);
            ip.extend_from_slice(&l4);
            ip
        } else {
            let (s, d) = (self.addr4(self.src), self.addr4(self.dst));
            let l4 = self.l4(false, (&s, &d));
            let hl = 20 + self.ip_opts.len();
            assert_eq!(hl % 4, 0);
            let mut ip = vec![0u8; hl];
            ip[0] = 0x40 | (hl / 4) as u8;
            ip[1] = self.tos;
            ip[2..4].copy_from_slice(&((hl + l4.len()) as u16).to_be_bytes());
            ip[4..6].copy_from_slice(&self.id.to_be_bytes());
            let mut frag = if self.df { 0x4000u16 } else { 0 };
            if self.frag_mf {
                frag |= 0x2000;
            }
            ip[6..8].copy_from_slice(&frag.to_be_bytes());
            ip[8] = self.ttl;
            ip[9] = proto;
            ip[12..16].copy_from_slice(&s);
            ip[16..20].copy_from_slice(&d);
            ip[20..].copy_from_slice(&self.ip_opts);
            let c = checksum(&ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            ip.extend_from_slice(&l4);
            ip
        }
    }

    /// The Ethernet frame (untunnelled part).
    fn inner_frame(&self) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 0x02 + self.mac, 0x02, 0, 0, 0, 0, 0x01];
        for &(tpid, tci) in &self.vlans {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&tci.to_be_bytes());
        }
        let et: u16 = if self.v6 { 0x86dd } else { 0x0800 };
        f.extend_from_slice(&et.to_be_bytes());
        f.extend_from_slice(&self.ip());
        f
    }

    /// The complete frame.
    pub fn build(&self) -> Vec<u8> {
        let Some(o) = &self.outer else {
            return self.inner_frame();
        };
        let inner_seg = Seg {
            vlans: vec![],
            outer: None,
            ..self.clone()
        };
        let (payload, proto, tun_hdr): (Vec<u8>, u8, Vec<u8>) = match &o.tun {
            Tun::Vxlan { vni, .. } => {
                let mut h = vec![0x08, 0, 0, 0];
                h.extend_from_slice(&(vni << 8).to_be_bytes());
                (inner_seg.inner_frame(), 17, h)
            }
            Tun::Geneve { vni, .. } => {
                let mut h = vec![0x00, 0x00, 0x65, 0x58];
                h.extend_from_slice(&(vni << 8).to_be_bytes());
                (inner_seg.inner_frame(), 17, h)
            }
            Tun::Gre { key } => {
                let mut h = vec![if key.is_some() { 0x20 } else { 0 }, 0, 0x65, 0x58];
                if let Some(k) = key {
                    h.extend_from_slice(&k.to_be_bytes());
                }
                (inner_seg.inner_frame(), 47, h)
            }
        };
        let outer_csum = matches!(
            o.tun,
            Tun::Vxlan {
                outer_csum: true,
                ..
            } | Tun::Geneve {
                outer_csum: true,
                ..
            }
        );
        let dport: u16 = match o.tun {
            Tun::Vxlan { .. } => 4789,
            _ => 6081,
        };
        let mut l4 = Vec::new();
        if proto == 17 {
            let len = 8 + tun_hdr.len() + payload.len();
            l4.extend_from_slice(&o.sport.to_be_bytes());
            l4.extend_from_slice(&dport.to_be_bytes());
            l4.extend_from_slice(&(len as u16).to_be_bytes());
            l4.extend_from_slice(&[0, 0]);
        }
        l4.extend_from_slice(&tun_hdr);
        l4.extend_from_slice(&payload);
        let (s4, d4) = ([198, 51, 100, 1], [198, 51, 100, 2]);
        let mut s6 = [0u8; 16];
        s6[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        let mut d6 = s6;
        s6[15] = 0xa1;
        d6[15] = 0xa2;
        if proto == 17 && outer_csum {
            let ps = if o.v6 {
                pseudo::ipv6(&s6, &d6, 17, l4.len() as u32)
            } else {
                pseudo::ipv4(s4, d4, 17, l4.len() as u16)
            };
            let mut c = !combine(ps, sum(&l4));
            if c == 0 {
                c = 0xffff;
            }
            l4[6..8].copy_from_slice(&c.to_be_bytes());
        }
        let mut f = vec![0x02, 0, 0, 0, 0, 0x22, 0x02, 0, 0, 0, 0, 0x21];
        for &(tpid, tci) in &self.vlans {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&tci.to_be_bytes());
        }
        if o.v6 {
            f.extend_from_slice(&0x86ddu16.to_be_bytes());
            let w: u32 = 6 << 28;
            f.extend_from_slice(&w.to_be_bytes());
            f.extend_from_slice(&(l4.len() as u16).to_be_bytes());
            f.push(proto);
            f.push(o.ttl);
            f.extend_from_slice(&s6);
            f.extend_from_slice(&d6);
        } else {
            f.extend_from_slice(&0x0800u16.to_be_bytes());
            let mut ip = [0u8; 20];
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
            ip[4..6].copy_from_slice(&o.id.to_be_bytes());
            if o.df {
                ip[6] = 0x40;
            }
            ip[8] = o.ttl;
            ip[9] = proto;
            ip[12..16].copy_from_slice(&s4);
            ip[16..20].copy_from_slice(&d4);
            let c = checksum(&ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&ip);
        }
        f.extend_from_slice(&l4);
        f
    }
}

/// A stream of `n` full segments of `mss` bytes starting at `seq`, IPv4 ID incrementing.
pub fn stream(first: &Seg, n: usize, mss: usize) -> Vec<Seg> {
    let mut v = vec![first.clone()];
    while v.len() < n {
        let s = v.last().unwrap().next(mss);
        v.push(s);
    }
    v
}

/// VXLAN (VNI 42, no outer UDP checksum) over IPv4, TTL 64, ID 7, source port 49152.
pub fn outer_vxlan() -> Outer {
    Outer {
        tun: Tun::Vxlan {
            vni: 42,
            outer_csum: false,
        },
        v6: false,
        ttl: 64,
        id: 7,
        df: false,
        sport: 49152,
    }
}
