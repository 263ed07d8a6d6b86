//! Software receive-side scaling: which datapath thread a frame belongs to.
//!
//! Where the kernel cannot spread a port's load over several queues (one TAP queue, one
//! `AF_PACKET` socket without fanout, a tunnel whose outer headers are the same for every flow),
//! the datapath spreads it itself: [`flow_hash`] hashes the **innermost** flow of a frame and
//! [`bucket`] maps the hash to one of `n` threads. Frames of one flow therefore always land on the
//! same thread, and packets of one flow never overtake each other.
//!
//! # What is hashed
//!
//! The frame is parsed once with the ordinary parser ([`sluice_wire::layout::parse_partial`]);
//! the hash reads the header stack it finds innermost: the one inside a VXLAN, Geneve or GRE
//! tunnel when there is one with an IP header, else the outer one. VLAN tags (any TPID, any depth
//! the parser takes), the tunnel's outer addresses, ports and VNI, and MAC addresses of an IP
//! frame are not hashed, so they do not move a flow.
//!
//! | innermost stack                                      | hashed                             |
//! |------------------------------------------------------|------------------------------------|
//! | IPv4 / IPv6, TCP, UDP or SCTP, not a fragment        | source and destination address, protocol, source and destination port |
//! | IPv4 / IPv6 fragment, or any other protocol (ICMP …) | source and destination address     |
//! | no IP header (ARP, unknown EtherType)                | destination and source MAC, EtherType |
//! | not even an Ethernet header                          | nothing (every such frame: one hash) |
//!
//! Fragments hash over addresses only so that every fragment of a datagram (only the first
//! carries the ports) lands on the same thread. The hash is not symmetric: the two directions of
//! a connection may land on different threads.
//!
//! # Guarantees
//!
//! No panic and no allocation on any input: a frame that does not parse is hashed over what was
//! parsed. The hash is a fixed function of the hashed fields and the seed (the same on every run
//! and every thread).

use sluice_wire::layout::{parse_partial, Headers, L3Kind, Layout, ParseConfig};

/// The seed [`Rss::new`] uses.
pub const DEFAULT_SEED: u64 = 0x736c_7569_6365_7273;

/// Spreads frames over `threads` datapath threads by their innermost flow. See the
/// [module documentation](self).
///
/// ```
/// use sluice_datapath::Rss;
/// let frame = [
///     0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, // Ethernet, IPv4
///     0x45, 0, 0, 32, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4, UDP
///     0x04, 0xd2, 0, 53, 0, 12, 0, 0, b'p', b'i', b'n', b'g', // UDP 1234 -> 53, "ping"
/// ];
/// let rss = Rss::new(4);
/// let t = rss.thread(&frame);
/// assert!(t < 4);
/// assert_eq!(rss.thread(&frame), t); // the same flow always goes to the same thread
/// assert_eq!(rss.hash(&frame), Rss::new(8).hash(&frame)); // the hash does not depend on `threads`
/// assert_ne!(rss.hash(&frame), rss.with_seed(7).hash(&frame));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rss {
    threads: usize,
    seed: u64,
    parse: ParseConfig,
}

impl Rss {
    /// Spreads over `threads` threads (0 is taken as 1) with the default seed, parsing tunnels by
    /// the default ports (VXLAN 4789, Geneve 6081).
    pub fn new(threads: usize) -> Rss {
        Rss {
            threads: threads.max(1),
            seed: DEFAULT_SEED,
            parse: ParseConfig::DEFAULT,
        }
    }

    /// The same with another seed (e.g. a random one per daemon, so that a remote sender cannot
    /// aim every flow at one thread).
    pub fn with_seed(self, seed: u64) -> Rss {
        Rss { seed, ..self }
    }

    /// The same with other tunnel ports (the ports' [`ParseConfig`]).
    pub fn with_parse(self, parse: ParseConfig) -> Rss {
        Rss { parse, ..self }
    }

    /// How many threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The flow hash of `frame` ([`flow_hash`] after parsing it).
    #[inline]
    pub fn hash(&self, frame: &[u8]) -> u32 {
        let (layout, _) = parse_partial(frame, &self.parse);
        flow_hash(frame, &layout, self.seed)
    }

    /// The thread (`0..threads`) that `frame` belongs to.
    #[inline]
    pub fn thread(&self, frame: &[u8]) -> usize {
        bucket(self.hash(frame), self.threads)
    }

    /// The thread of a frame already parsed into `layout` (no second parse).
    #[inline]
    pub fn thread_of_layout(&self, frame: &[u8], layout: &Layout) -> usize {
        bucket(flow_hash(frame, layout, self.seed), self.threads)
    }
}

/// The hash of the innermost flow of `frame`, whose headers are at `layout` (as
/// [`parse_partial`] left them, also after an error), with `seed`. See the
/// [module documentation](self) for what is hashed.
#[inline]
pub fn flow_hash(frame: &[u8], layout: &Layout, seed: u64) -> u32 {
    let h = match &layout.inner {
        Some(inner) if inner.l3.is_some() => inner,
        _ => &layout.outer,
    };
    finish(hash_headers(frame, h, seed))
}

/// Maps a 32-bit hash to `0..n` by multiplication (`hash × n / 2³²`): no division, and every
/// bucket gets ⌊2³²/n⌋ or ⌈2³²/n⌉ hash values. `n == 0` gives 0.
#[inline]
pub const fn bucket(hash: u32, n: usize) -> usize {
    ((hash as u64 * n as u64) >> 32) as usize
}

/// Folds the flow fields of one header stack into the running hash.
#[inline]
fn hash_headers(frame: &[u8], h: &Headers, seed: u64) -> u64 {
    let mut acc = seed;
    let Some(l3) = h.l3 else {
        // No IP header: the Ethernet addresses and the EtherType, when there is an Ethernet header.
        if let Some(eth) = h.l2.and_then(|o| frame.get(o..)) {
            if let Some(macs) = eth.first_chunk::<12>() {
                let (dst, src) = macs.split_at(6);
                acc = mix(acc, word(dst));
                acc = mix(acc, word(src));
            }
        }
        return mix(acc, u64::from(h.ethertype));
    };
    let ip = frame.get(l3..).unwrap_or_default();
    match h.l3_kind {
        Some(L3Kind::Ipv4) => {
            if let Some(addrs) = ip.get(12..20) {
                acc = mix(acc, word(addrs));
            }
        }
        Some(L3Kind::Ipv6) => {
            if let Some(addrs) = ip.get(8..40) {
                for half in addrs.chunks_exact(8) {
                    acc = mix(acc, word(half));
                }
            }
        }
        None => {}
    }
    if h.is_fragment {
        return acc;
    }
    use sluice_wire::ip_proto::{SCTP, TCP, UDP};
    match (h.l4_proto, h.l4) {
        (Some(proto @ (TCP | UDP | SCTP)), Some(l4)) => {
            // Source and destination port are the first four bytes of all three.
            match frame.get(l4..).and_then(<[u8]>::first_chunk::<4>) {
                Some(ports) => mix(
                    acc,
                    u64::from(proto) << 32 | u64::from(u32::from_be_bytes(*ports)),
                ),
                None => acc,
            }
        }
        _ => acc,
    }
}

/// Up to 8 bytes as a big-endian integer (8: one load; fewer: byte by byte).
#[inline]
fn word(bytes: &[u8]) -> u64 {
    match bytes.first_chunk::<8>() {
        Some(eight) => u64::from_be_bytes(*eight),
        None => bytes.iter().fold(0u64, |w, &b| (w << 8) | u64::from(b)),
    }
}

/// One multiply-rotate round per 64-bit word.
#[inline]
fn mix(acc: u64, v: u64) -> u64 {
    (acc ^ v)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .rotate_left(31)
}

/// The 64-bit finaliser of MurmurHash3 (every input bit affects every output bit), top half.
#[inline]
fn finish(mut h: u64) -> u32 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    (h >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sluice_wire::ip_proto::{GRE, ICMP, TCP, UDP};

    /// One flow: addresses (v4 or v6), protocol, ports.
    #[derive(Debug, Clone, Copy)]
    struct Flow {
        v6: bool,
        src: [u8; 16],
        dst: [u8; 16],
        proto: u8,
        sport: u16,
        dport: u16,
    }

    impl Flow {
        fn v4(src: [u8; 4], dst: [u8; 4], proto: u8, sport: u16, dport: u16) -> Flow {
            let mut s = [0; 16];
            let mut d = [0; 16];
            s[..4].copy_from_slice(&src);
            d[..4].copy_from_slice(&dst);
            Flow {
                v6: false,
                src: s,
                dst: d,
                proto,
                sport,
                dport,
            }
        }

        fn v6(src: [u8; 16], dst: [u8; 16], proto: u8, sport: u16, dport: u16) -> Flow {
            Flow {
                v6: true,
                src,
                dst,
                proto,
                sport,
                dport,
            }
        }

        /// The L4 header (TCP: 20 bytes, UDP: 8, else 8 bytes of ICMP-like header) and `payload`.
        fn l4(&self, payload: usize) -> Vec<u8> {
            let mut l4 = match self.proto {
                TCP => {
                    let mut t = vec![0u8; 20];
                    t[12] = 5 << 4;
                    t
                }
                _ => vec![0u8; 8],
            };
            if matches!(self.proto, TCP | UDP) {
                l4[0..2].copy_from_slice(&self.sport.to_be_bytes());
                l4[2..4].copy_from_slice(&self.dport.to_be_bytes());
            }
            l4.resize(l4.len() + payload, 0xab);
            if self.proto == UDP {
                let len = l4.len() as u16;
                l4[4..6].copy_from_slice(&len.to_be_bytes());
            }
            l4
        }

        /// The IP packet: header, then `l4` bytes; `frag` = (more fragments, offset in 8-byte units).
        fn ip(&self, proto: u8, l4: &[u8], frag: Option<(bool, u16)>) -> Vec<u8> {
            if self.v6 {
                let mut p = vec![0u8; 40];
                p[0] = 0x60;
                let mut ext = Vec::new();
                let next = if let Some((mf, off)) = frag {
                    ext = vec![proto, 0, 0, 0, 0, 0, 0, 7];
                    let v = (off << 3) | u16::from(mf);
                    ext[2..4].copy_from_slice(&v.to_be_bytes());
                    sluice_wire::ip_proto::FRAGMENT
                } else {
                    proto
                };
                let plen = (ext.len() + l4.len()) as u16;
                p[4..6].copy_from_slice(&plen.to_be_bytes());
                p[6] = next;
                p[7] = 64;
                p[8..24].copy_from_slice(&self.src);
                p[24..40].copy_from_slice(&self.dst);
                p.extend_from_slice(&ext);
                p.extend_from_slice(l4);
                p
            } else {
                let mut p = vec![0u8; 20];
                p[0] = 0x45;
                let total = (20 + l4.len()) as u16;
                p[2..4].copy_from_slice(&total.to_be_bytes());
                if let Some((mf, off)) = frag {
                    let v = off | if mf { 0x2000 } else { 0 };
                    p[6..8].copy_from_slice(&v.to_be_bytes());
                }
                p[8] = 64;
                p[9] = proto;
                p[12..16].copy_from_slice(&self.src[..4]);
                p[16..20].copy_from_slice(&self.dst[..4]);
                p.extend_from_slice(l4);
                p
            }
        }

        fn ethertype(&self) -> u16 {
            if self.v6 {
                0x86dd
            } else {
                0x0800
            }
        }

        /// Ethernet (with `tags`: TPID, VID) + IP + L4.
        fn frame(&self, mac: u8, tags: &[(u16, u16)]) -> Vec<u8> {
            let ip = self.ip(self.proto, &self.l4(100), None);
            eth(mac, tags, self.ethertype(), &ip)
        }
    }

    fn eth(mac: u8, tags: &[(u16, u16)], ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, mac, 0x02, 0, 0, 0, 1, mac];
        for &(tpid, vid) in tags {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&vid.to_be_bytes());
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// `inner` (an Ethernet frame) in VXLAN (`geneve`: Geneve with one 8-byte option) over
    /// UDP `sport` over `outer`'s addresses, with outer `tags`.
    fn udp_tunnel(
        outer: &Flow,
        geneve: bool,
        sport: u16,
        vni: u32,
        tags: &[(u16, u16)],
        inner: &[u8],
    ) -> Vec<u8> {
        let mut tun = if geneve {
            // ver 0, opt_len 2 words, protocol TEB, VNI, then one option with 4 data bytes.
            let mut g = vec![
                0x02, 0, 0x65, 0x58, 0, 0, 0, 0, 0x01, 0x02, 0x03, 0x01, 9, 9, 9, 9,
            ];
            g[4..7].copy_from_slice(&vni.to_be_bytes()[1..]);
            g
        } else {
            let mut v = vec![0x08, 0, 0, 0, 0, 0, 0, 0];
            v[4..7].copy_from_slice(&vni.to_be_bytes()[1..]);
            v
        };
        tun.extend_from_slice(inner);
        let dport: u16 = if geneve { 6081 } else { 4789 };
        let mut udp = vec![0u8; 8];
        udp[0..2].copy_from_slice(&sport.to_be_bytes());
        udp[2..4].copy_from_slice(&dport.to_be_bytes());
        udp[4..6].copy_from_slice(&((8 + tun.len()) as u16).to_be_bytes());
        udp.extend_from_slice(&tun);
        eth(9, tags, outer.ethertype(), &outer.ip(UDP, &udp, None))
    }

    /// `inner` in GRE (with a key) over `outer`'s addresses: Ethernet inside (TEB) or, with
    /// `ip_only`, `inner` is an IP packet.
    fn gre(outer: &Flow, key: u32, ip_only: bool, inner: &[u8]) -> Vec<u8> {
        let proto: u16 = if ip_only { 0x0800 } else { 0x6558 };
        let mut g = vec![0x20, 0];
        g.extend_from_slice(&proto.to_be_bytes());
        g.extend_from_slice(&key.to_be_bytes());
        g.extend_from_slice(inner);
        eth(7, &[], outer.ethertype(), &outer.ip(GRE, &g, None))
    }

    fn flow_a() -> Flow {
        Flow::v4([10, 1, 2, 3], [10, 4, 5, 6], TCP, 40000, 5201)
    }

    const TAG_STACKS: [&[(u16, u16)]; 5] = [
        &[],
        &[(0x8100, 10)],
        &[(0x88a8, 100), (0x8100, 10)],
        &[(0x9100, 7), (0x88a8, 100), (0x8100, 10)],
        &[(0x8100, 1), (0x8100, 2), (0x88a8, 3)],
    ];

    /// Every encapsulation of `flow` the tests look at, each with a different outer envelope.
    fn wrappings(flow: &Flow) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        for (i, tags) in TAG_STACKS.iter().enumerate() {
            out.push((format!("{} tags", tags.len()), flow.frame(i as u8, tags)));
        }
        let outers = [
            Flow::v4([192, 0, 2, 1], [192, 0, 2, 2], UDP, 0, 0),
            Flow::v4([198, 51, 100, 9], [198, 51, 100, 10], UDP, 0, 0),
            Flow::v6([0x20; 16], [0x21; 16], UDP, 0, 0),
        ];
        for (i, outer) in outers.iter().enumerate() {
            let i16 = i as u16;
            for (t, tags) in TAG_STACKS.iter().enumerate().take(3) {
                let inner = flow.frame(t as u8 + 20, TAG_STACKS[(t + i) % 4]);
                for geneve in [false, true] {
                    let f = udp_tunnel(outer, geneve, 1000 + i16 * 77, 5 + i as u32, tags, &inner);
                    let kind = if geneve { "geneve" } else { "vxlan" };
                    out.push((format!("{kind} outer {i} tags {t}"), f));
                }
            }
            out.push((
                format!("gre/teb outer {i}"),
                gre(outer, 99 + i as u32, false, &flow.frame(3, &[(0x8100, 5)])),
            ));
            let ip = flow.ip(flow.proto, &flow.l4(100), None);
            if !flow.v6 {
                out.push((
                    format!("gre/ip outer {i}"),
                    gre(outer, 1 + i as u32, true, &ip),
                ));
            }
        }
        out
    }

    fn assert_one_thread(flow: &Flow) {
        let rss = Rss::new(4);
        let frames = wrappings(flow);
        let (_, first) = &frames[0];
        let h0 = rss.hash(first);
        for (what, f) in &frames {
            // The frames are well formed: a parse error would hide a test-builder bug.
            assert!(sluice_wire::parse(f).is_ok(), "{what} does not parse");
            assert_eq!(rss.hash(f), h0, "{what}: {flow:?}");
            for n in 1..=8 {
                assert_eq!(bucket(rss.hash(f), n), bucket(h0, n), "{what} n={n}");
            }
        }
    }

    #[test]
    fn one_flow_one_thread_under_tags_and_tunnels() {
        assert_one_thread(&flow_a());
        assert_one_thread(&Flow::v4([172, 16, 0, 1], [172, 16, 9, 9], UDP, 53, 33333));
        assert_one_thread(&Flow::v6([0xfd; 16], [0xfe; 16], TCP, 1, 2));
        assert_one_thread(&Flow::v4([1, 1, 1, 1], [2, 2, 2, 2], ICMP, 0, 0));
    }

    #[test]
    fn flows_that_differ_in_one_field_hash_differently() {
        let rss = Rss::new(1);
        let a = flow_a();
        let variants = [
            Flow { sport: 40001, ..a },
            Flow { dport: 5202, ..a },
            Flow { proto: UDP, ..a },
            Flow::v4([10, 1, 2, 4], [10, 4, 5, 6], TCP, 40000, 5201),
            Flow::v4([10, 1, 2, 3], [10, 4, 5, 7], TCP, 40000, 5201),
        ];
        let h = rss.hash(&a.frame(0, &[]));
        for v in variants {
            assert_ne!(rss.hash(&v.frame(0, &[])), h, "{v:?}");
        }
        // The tunnel's outer headers alone do not separate flows, the inner ones do.
        let outer = Flow::v4([192, 0, 2, 1], [192, 0, 2, 2], UDP, 0, 0);
        let in_a = udp_tunnel(&outer, false, 1, 1, &[], &a.frame(0, &[]));
        let b = Flow { sport: 1, ..a };
        let in_b = udp_tunnel(&outer, false, 1, 1, &[], &b.frame(0, &[]));
        assert_ne!(rss.hash(&in_a), rss.hash(&in_b));
    }

    #[test]
    fn fragments_and_portless_protocols_hash_over_addresses_only() {
        let rss = Rss::new(1);
        for a in [flow_a(), Flow::v6([0x11; 16], [0x22; 16], UDP, 4000, 4001)] {
            let l4 = a.l4(64);
            let first = a.ip(a.proto, &l4, Some((true, 0)));
            let later = a.ip(a.proto, &l4[..16], Some((false, 100)));
            let h_first = rss.hash(&eth(1, &[], a.ethertype(), &first));
            let h_later = rss.hash(&eth(2, &[(0x8100, 3)], a.ethertype(), &later));
            assert_eq!(h_first, h_later, "{a:?}");
            // Fragments of another port pair: the same thread (ports are not hashed) …
            let b = Flow {
                sport: 1,
                dport: 2,
                ..a
            };
            let b_first = b.ip(b.proto, &b.l4(64), Some((true, 0)));
            assert_eq!(rss.hash(&eth(1, &[], a.ethertype(), &b_first)), h_first);
            // … and an ICMP packet between the same addresses hashes as a fragment does.
            let icmp = Flow { proto: ICMP, ..a };
            assert_eq!(rss.hash(&icmp.frame(4, &[])), h_first);
            // An unfragmented packet of the flow does hash its ports.
            assert_ne!(rss.hash(&a.frame(1, &[])), h_first);
        }
    }

    #[test]
    fn non_ip_frames_hash_over_macs_and_ethertype() {
        let rss = Rss::new(1);
        let arp = |mac: u8, tags: &[(u16, u16)]| eth(mac, tags, 0x0806, &[0u8; 28]);
        assert_eq!(rss.hash(&arp(1, &[])), rss.hash(&arp(1, &[(0x8100, 9)])));
        assert_ne!(rss.hash(&arp(1, &[])), rss.hash(&arp(2, &[])));
        // Shorter than an Ethernet header: one fixed hash, no panic.
        assert_eq!(rss.hash(&[]), rss.hash(&[1, 2, 3]));
    }

    #[test]
    fn a_broken_inner_frame_hashes_over_the_outer_one() {
        let rss = Rss::new(1);
        let outer = Flow::v4([192, 0, 2, 1], [192, 0, 2, 2], UDP, 0, 0);
        // The inner Ethernet header is cut short: the outer stack (with its UDP ports) is used.
        let a = udp_tunnel(&outer, false, 1111, 1, &[], &[0u8; 6]);
        let b = udp_tunnel(&outer, false, 2222, 1, &[], &[0u8; 6]);
        assert!(sluice_wire::parse(&a).is_err());
        assert_ne!(rss.hash(&a), rss.hash(&b));
        assert_eq!(
            rss.hash(&a),
            rss.hash(&udp_tunnel(&outer, false, 1111, 1, &[], &[1u8; 6]))
        );
        // A truncated TCP header: hashed over the addresses only.
        let f = flow_a();
        let mut cut = f.frame(0, &[]);
        cut.truncate(14 + 20 + 10);
        let ip_len = (20 + 10) as u16;
        cut[16..18].copy_from_slice(&ip_len.to_be_bytes());
        let h = rss.hash(&cut);
        let other_ports = Flow { sport: 9, ..f };
        let mut cut2 = other_ports.frame(0, &[]);
        cut2.truncate(14 + 20 + 10);
        cut2[16..18].copy_from_slice(&ip_len.to_be_bytes());
        assert_eq!(rss.hash(&cut2), h);
    }

    /// A deterministic generator (xorshift64*), so the spread test always sees the same flows.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    fn random_flow(g: &mut Gen) -> Flow {
        let r = g.next();
        let s = g.next().to_be_bytes();
        let d = g.next().to_be_bytes();
        let proto = if r & 1 == 0 { TCP } else { UDP };
        if r & 6 == 0 {
            let mut src = [0u8; 16];
            let mut dst = [0u8; 16];
            src[..8].copy_from_slice(&s);
            dst[..8].copy_from_slice(&d);
            src[8..].copy_from_slice(&g.next().to_be_bytes());
            dst[8..].copy_from_slice(&g.next().to_be_bytes());
            Flow::v6(src, dst, proto, (r >> 16) as u16, (r >> 32) as u16)
        } else {
            let src = [s[0], s[1], s[2], s[3]];
            let dst = [d[0], d[1], d[2], d[3]];
            Flow::v4(src, dst, proto, (r >> 16) as u16, (r >> 32) as u16)
        }
    }

    /// Counts per bucket of `flows` flows, with `flow` turned into a frame by `build`.
    fn spread(n: usize, flows: usize, build: impl Fn(&Flow, &mut Gen) -> Vec<u8>) -> Vec<usize> {
        let rss = Rss::new(n);
        let mut g = Gen(0x1234_5678_9abc_def1);
        let mut counts = vec![0usize; n];
        for _ in 0..flows {
            let f = random_flow(&mut g);
            counts[rss.thread(&build(&f, &mut g))] += 1;
        }
        counts
    }

    fn assert_even(counts: &[usize], flows: usize) {
        let expect = flows / counts.len();
        // Binomial standard deviation is at most 50 here; allow about 5 of them.
        for &c in counts {
            assert!(c.abs_diff(expect) <= expect / 10, "{counts:?}");
        }
        assert_eq!(counts.iter().sum::<usize>(), flows);
    }

    #[test]
    fn random_flows_spread_evenly() {
        for n in [2, 3, 4] {
            let plain = spread(n, 10_000, |f, _| f.frame(0, &[]));
            assert_even(&plain, 10_000);
        }
        // Flows that differ only in the source port (one client, many connections).
        let mut counts = [0usize; 4];
        let rss = Rss::new(4);
        for sport in 0..10_000u16 {
            let f = Flow {
                sport: 20000 + sport,
                ..flow_a()
            };
            counts[rss.thread(&f.frame(0, &[]))] += 1;
        }
        assert_even(&counts, 10_000);
        // Inside one tunnel (same outer headers for every flow): still spread by the inner flow.
        let outer = Flow::v4([192, 0, 2, 1], [192, 0, 2, 2], UDP, 0, 0);
        for geneve in [false, true] {
            let tunnelled = spread(4, 10_000, |f, _| {
                udp_tunnel(&outer, geneve, 4000, 1, &[(0x8100, 1)], &f.frame(0, &[]))
            });
            assert_even(&tunnelled, 10_000);
        }
    }

    #[test]
    fn bucket_covers_every_thread_and_stays_in_range() {
        assert_eq!(bucket(u32::MAX, 0), 0);
        assert_eq!(bucket(u32::MAX, 1), 0);
        assert_eq!(bucket(0, 7), 0);
        assert_eq!(bucket(u32::MAX, 7), 6);
        assert_eq!(bucket(u32::MAX / 2, 2), 0);
        assert_eq!(bucket(u32::MAX / 2 + 1, 2), 1);
        assert_eq!(Rss::new(0).threads(), 1);
        // Seeds change the hash.
        let f = flow_a().frame(0, &[]);
        assert_ne!(Rss::new(1).hash(&f), Rss::new(1).with_seed(1).hash(&f));
    }

    #[test]
    fn layout_given_or_parsed_gives_the_same_thread() {
        let rss = Rss::new(3);
        for (_, f) in wrappings(&flow_a()) {
            let (layout, _) = parse_partial(&f, &ParseConfig::DEFAULT);
            assert_eq!(rss.thread_of_layout(&f, &layout), rss.thread(&f));
        }
    }

    #[test]
    fn tunnel_ports_follow_the_parse_config() {
        // VXLAN on a port the default config does not know: the outer UDP flow is hashed until
        // the port is configured.
        let outer = Flow::v4([192, 0, 2, 1], [192, 0, 2, 2], UDP, 0, 0);
        let inner = flow_a().frame(0, &[]);
        let mut f = udp_tunnel(&outer, false, 1, 1, &[], &inner);
        f[14 + 20 + 2..14 + 20 + 4].copy_from_slice(&8472u16.to_be_bytes());
        let plain = Rss::new(1);
        let mut cfg = ParseConfig::DEFAULT;
        assert!(cfg.vxlan_ports.insert(8472));
        let custom = Rss::new(1).with_parse(cfg);
        assert_eq!(custom.hash(&f), plain.hash(&inner));
        assert_ne!(plain.hash(&f), plain.hash(&inner));
    }

    proptest! {
        #[test]
        fn never_panics_and_stays_in_range(bytes in proptest::collection::vec(any::<u8>(), 0..300),
                                           n in 0usize..17) {
            let rss = Rss::new(n);
            let t = rss.thread(&bytes);
            prop_assert!(t < n.max(1));
        }

        #[test]
        fn never_panics_on_mutated_tunnel_frames(pos in 0usize..200, val in any::<u8>(),
                                                 cut in 0usize..220) {
            let outer = Flow::v4([192, 0, 2, 1], [192, 0, 2, 2], UDP, 0, 0);
            let mut f = udp_tunnel(&outer, true, 7, 7, &[(0x8100, 1)],
                                   &flow_a().frame(0, &[(0x88a8, 2)]));
            if let Some(b) = f.get_mut(pos) {
                *b = val;
            }
            f.truncate(cut);
            prop_assert!(Rss::new(4).thread(&f) < 4);
        }
    }
}
