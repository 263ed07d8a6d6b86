//! Every merge and flush rule of the engine, once, each a small function named after what it
//! checks (Linux 6.18: `inet_gro_flush`, `tcp_gro_receive`, `udp_gro_receive_segment`, the
//! IP-layer refusals of `inet_gro_receive` / `ipv6_gro_receive`). Every lane calls these; what a
//! lane cannot settle cheaply it leaves to the general path, whose [`decide`] applies every
//! per-segment rule in one function. The table "rule → function" is in the module documentation
//! of `gro` and in `docs/gro.md`.

use super::csum::pseudo_at;
use super::flow::{key_walk, shape, Info, IpFields, Proto, ETH_HLEN};
use super::table::Held;
use super::FlushReason;
use sluice_checksum::{combine, sum};
use sluice_packet::{CsumStatus, OffloadMeta, Slot};
use sluice_wire::bytes::{read_u16, read_u32};
use sluice_wire::{ip_proto, L3Kind, Layer, Layout, TunnelKind};

/// Largest IP packet a merged frame may carry: frame length less the Ethernet header.
pub(super) const MAX_IP_LEN: usize = 65_535;

/// Most datagrams merged into one UDP packet (Linux `UDP_GRO_CNT_MAX`).
pub(super) const UDP_GRO_CNT_MAX: u16 = 64;

/// TCP flag bits (byte 13 of the TCP header).
pub(super) const TCP_FIN: u8 = 0x01;
/// See [`TCP_FIN`].
pub(super) const TCP_SYN: u8 = 0x02;
/// See [`TCP_FIN`].
pub(super) const TCP_RST: u8 = 0x04;
/// See [`TCP_FIN`].
pub(super) const TCP_PSH: u8 = 0x08;
/// See [`TCP_FIN`].
pub(super) const TCP_URG: u8 = 0x20;
/// See [`TCP_FIN`].
pub(super) const TCP_CWR: u8 = 0x80;

/// Flags that finish a packet (Linux `out_check_final`).
pub(super) const TCP_FINISHING: u8 = TCP_URG | TCP_PSH | TCP_RST | TCP_SYN | TCP_FIN;

/// Flags a joining segment may carry that its packet's first segment lacks: ORed into the
/// merged header ([`merged_flags`]). Every other flag (CWR aside, [`carries_cwr`]) must be equal.
pub(super) const TCP_MAY_DIFFER: u8 = TCP_FIN | TCP_PSH;

/// What to do with a frame whose flow holds a packet.
pub(super) enum Decision {
    /// It joins; `finish`: the packet then leaves, for this reason.
    Join { finish: Option<FlushReason> },
    /// It may not join: the held packet leaves first, for this reason.
    Refuse(FlushReason),
}

// ---- Which frames may be held at all ----

/// Whether a frame with no held packet to join may start one (Linux: not flushed on its own):
/// a TCP segment with payload and neither a finishing flag nor CWR, or a UDP datagram.
#[inline]
pub(super) fn may_start(info: &Info) -> bool {
    match info.proto {
        // Neither `finishes_packet` nor `carries_cwr`, tested at once.
        Some(Proto::Tcp) => info.payload_len() >= 1 && info.flags & (TCP_FINISHING | TCP_CWR) == 0,
        Some(Proto::Udp) => true,
        None => false,
    }
}

/// Whether an IP header's length field (IPv4 total length, IPv6 payload length) says the IP
/// packet at `l3` ends exactly at the frame's end `end`: no Ethernet padding, no truncation
/// (Linux flushes on a length mismatch).
#[inline(always)]
pub(super) fn ip_fills_frame(l3: usize, v6: bool, len_field: u16, end: usize) -> bool {
    l3 + usize::from(len_field) + if v6 { 40 } else { 0 } == end
}

/// Whether an IPv4 header's first byte is version 4 with no options (IHL 5): Linux's IP layer
/// does not coalesce packets with options.
#[inline(always)]
pub(super) fn ipv4_without_options(version_ihl: u8) -> bool {
    version_ihl == 0x45
}

/// Whether an IPv4 flags/fragment-offset field marks a fragment (MF or an offset): never held.
#[inline(always)]
pub(super) fn ipv4_is_fragment(frag_field: u16) -> bool {
    frag_field & 0x3fff != 0
}

/// Frame-level conditions for holding a packet (beyond the flow key): Linux's IP-layer refusals.
pub(super) fn eligible(frame: &[u8], layout: &Layout, info: &Info) -> bool {
    let stacks = [Some(&layout.outer), layout.inner.as_ref()];
    for h in stacks.iter().take(info.levels) {
        let Some(h) = h else { return false };
        let (Some(l3), Some(kind)) = (h.l3, h.l3_kind) else {
            return false;
        };
        if h.is_fragment {
            return false;
        }
        if kind == L3Kind::Ipv4 && !frame.get(l3).is_some_and(|&b| ipv4_without_options(b)) {
            return false; // IP options (or a bad version/IHL)
        }
        // Padding after the IP packet: Linux flushes (length mismatch).
        if h.l3_end != Some(frame.len()) {
            return false;
        }
        // An IPv6 payload length of 0 (a jumbogram, or a lie) does not match the packet's
        // length either: Linux's ipv6_gro_receive flushes it, and merging would rewrite the field.
        if kind == L3Kind::Ipv6 && read_u16(frame, l3 + 4) == Some(0) {
            return false;
        }
    }
    // IPv6 extension headers: only hop-by-hop, routing and destination options are skipped by
    // Linux's GRO; a fragment or AH header stops it.
    for &(layer, _) in layout.layers.as_slice() {
        if let Layer::Ipv6Ext(p) = layer {
            if !matches!(p, ip_proto::HOPOPTS | ip_proto::ROUTING | ip_proto::DSTOPTS) {
                return false;
            }
        }
    }
    if let Some(t) = info.tunnel {
        match t.kind {
            TunnelKind::Vxlan => {}
            TunnelKind::Geneve => {
                // Version 0, no OAM (Linux geneve_gro_receive).
                let (Some(b0), Some(b1)) = (frame.get(t.offset), frame.get(t.offset + 1)) else {
                    return false;
                };
                if b0 >> 6 != 0 || b1 & 0x80 != 0 {
                    return false;
                }
            }
            TunnelKind::Gre => {
                // Only the key bit; checksum, routing, sequence and version refused.
                let (Some(b0), Some(b1)) = (frame.get(t.offset), frame.get(t.offset + 1)) else {
                    return false;
                };
                if b0 & !0x20 != 0 || *b1 != 0 {
                    return false;
                }
            }
        }
        if t.kind != TunnelKind::Gre {
            // The outer UDP length must cover exactly the rest of the frame.
            let ulen = read_u16(frame, t.outer_l4 + 4).map(usize::from);
            if ulen != Some(frame.len().saturating_sub(t.outer_l4)) {
                return false;
            }
        }
    }
    match info.proto {
        Some(Proto::Udp) => {
            // Non-zero checksum, length exactly the datagram, some payload.
            let ulen = usize::from(info.udp_len);
            read_u16(frame, info.l4 + 6) != Some(0)
                && ulen > 8
                && ulen == frame.len().saturating_sub(info.l4)
        }
        Some(Proto::Tcp) => true,
        None => false,
    }
}

// ---- Same flow, and the fields that must be equal ----

/// Whether two frames belong to one flow (Linux `same_flow`): the same structure and the same
/// bytes along the flow key ([`key_walk`]: Ethernet and VLAN tags, IP addresses and protocol,
/// IPv6 flow label and extension headers, tunnel headers, ports).
pub(super) fn same_flow(a: &[u8], ai: &Info, b: &[u8], bi: &Info) -> bool {
    shape(ai) == shape(bi)
        && key_walk(
            bi,
            |x, y| matches!((a.get(x..y), b.get(x..y)), (Some(p), Some(q)) if p == q),
            |w| matches!((read_u32(a, w), read_u32(b, w)), (Some(p), Some(q)) if (p ^ q) & 0xf00f_ffff == 0),
        )
}

/// Whether two IP headers of the same level agree on the fields that must not change within a
/// packet: IPv4 TTL, TOS (DSCP and ECN) and DF; IPv6 hop limit and traffic class.
#[inline(always)]
pub(super) fn same_ip_fields(a: &IpFields, b: &IpFields) -> bool {
    a.ttl == b.ttl && a.tos == b.tos && a.df == b.df
}

/// Whether two TCP 4th header words (data offset, flags, window) agree except in the flags that
/// may differ ([`TCP_MAY_DIFFER`]) and CWR (refused on its own, [`carries_cwr`]). Linux compares
/// the whole word, window included.
#[inline(always)]
pub(super) fn same_tcp_word3(a: u32, b: u32) -> bool {
    let may_differ = u32::from(TCP_CWR | TCP_MAY_DIFFER) << 16;
    (a ^ b) & !may_differ == 0
}

/// Whether two TCP segments carry the same acknowledgment number (Linux flushes on any change).
#[inline(always)]
pub(super) fn same_ack(a: u32, b: u32) -> bool {
    a == b
}

/// Whether the TCP option bytes of two headers are identical (the data offsets were compared as
/// part of the 4th word already, [`same_tcp_word3`]).
pub(super) fn same_options(a: &[u8], al4: usize, b: &[u8], bl4: usize, word3: u32) -> bool {
    let thlen = ((word3 >> 28) as usize) * 4;
    if thlen <= 20 {
        return true;
    }
    match (a.get(al4 + 20..al4 + thlen), b.get(bl4 + 20..bl4 + thlen)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// Whether a segment carries CWR: it never merges (Linux 6.18 holds no CWR segment; it finishes
/// the held packet and passes alone).
#[inline(always)]
pub(super) fn carries_cwr(flags: u8) -> bool {
    flags & TCP_CWR != 0
}

// ---- Order and size ----

/// The IPv4 ID rule of Linux 6.18 (`inet_gro_flush`) for one IPv4 header level of a packet:
/// the packet's second segment decides whether the flow uses a fixed ID (equal to the first
/// segment's) or an incrementing one (the first's + n for the n-th segment after it, modulo
/// 2¹⁶). The state is the ID the next segment must carry and the step after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Ipv4Ids {
    /// The ID the next segment must carry.
    pub(super) next: u16,
    /// 1 (incrementing) or 0 (fixed, once the second segment repeated the first's ID).
    step: u16,
}

impl Ipv4Ids {
    /// The state of a packet whose first segment carries `first_id`.
    #[inline(always)]
    pub(super) fn new(first_id: u16) -> Self {
        Ipv4Ids {
            next: first_id.wrapping_add(1),
            step: 1,
        }
    }

    /// The rule: whether a segment carrying `id` may join a packet of `count` segments; if so
    /// the state moves on to the segment after it (a lane that may still refuse the segment
    /// works on a copy). `false` changes nothing. While `count` is 1 the state is still
    /// [`Ipv4Ids::new`]'s, so the first segment's ID is `next - 1`.
    #[inline(always)]
    pub(super) fn accept(&mut self, id: u16, count: u16) -> bool {
        if id != self.next {
            // The second segment may repeat the first's ID: fixed IDs from then on.
            if count != 1 || id != self.next.wrapping_sub(1) {
                return false;
            }
            self.next = id;
            self.step = 0;
        }
        self.advance();
        true
    }

    /// Moves on after a segment that carried [`Ipv4Ids::next`] joined.
    #[inline(always)]
    pub(super) fn advance(&mut self) {
        self.next = self.next.wrapping_add(self.step);
    }
}

/// Whether a TCP segment continues its packet's byte stream: its sequence number is exactly the
/// end of the held data.
#[inline(always)]
pub(super) fn in_sequence(seq: u32, next_seq: u32) -> bool {
    seq == next_seq
}

/// The segment-size rule: a joining segment carries 1 byte up to the packet's segment size
/// (`mss`, the first segment's payload); no payload never joins, a longer one never joins. (A
/// shorter one joins and finishes the packet: [`join_finish`].)
#[inline(always)]
pub(super) fn fits_segment_size(len: usize, mss: usize) -> bool {
    len.wrapping_sub(1) < mss
}

/// The 64 KiB limit: a held frame of `held_len` bytes (Ethernet header included) may grow by
/// `len` payload bytes while its IP packet stays within 65 535 bytes (Linux:
/// `p->len + len < 65536`, `p->len` without the Ethernet header).
#[inline(always)]
pub(super) fn fits_64k(held_len: usize, len: usize) -> bool {
    held_len + len <= MAX_IP_LEN + ETH_HLEN
}

/// [`fits_64k`] for a held frame whose outer IP header is at `l3`: an Ethernet frame (`l3` at
/// least 14) counts its 14-byte Ethernet header out as Linux does, an L3 packet (`l3` 0, as a
/// TUN device gives it) nothing.
#[inline(always)]
pub(super) fn fits_64k_at(held_len: usize, l3: usize, len: usize) -> bool {
    held_len + len <= MAX_IP_LEN + l3.min(ETH_HLEN)
}

// ---- Finishing ----

/// Whether a TCP segment's flags finish its packet (PSH, FIN, URG, RST, SYN): it joins if it
/// may, then the packet leaves; alone it is not held ([`may_start`]).
#[inline(always)]
pub(super) fn finishes_packet(flags: u8) -> bool {
    flags & TCP_FINISHING != 0
}

/// Whether a TCP segment of `len` payload bytes that joined is shorter than its packet's segment
/// size `mss`: the packet then leaves ([`FlushReason::Size`]).
#[inline(always)]
pub(super) fn short_segment(len: usize, mss: usize) -> bool {
    len < mss
}

/// Why a TCP segment of `len` payload bytes that joined ends its packet: a finishing flag
/// ([`finishes_packet`]), or shorter than the packet's segment size `mss`; `None`: it stays held.
#[inline(always)]
pub(super) fn join_finish(flags: u8, len: usize, mss: usize) -> Option<FlushReason> {
    if finishes_packet(flags) {
        Some(FlushReason::Flags)
    } else if short_segment(len, mss) {
        Some(FlushReason::Size)
    } else {
        None
    }
}

/// The flags of a joining segment that go into its packet's header (Linux ORs FIN and PSH of
/// each joining segment into the held header).
#[inline(always)]
pub(super) fn merged_flags(flags: u8) -> u8 {
    flags & TCP_MAY_DIFFER
}

/// The UDP rule (Linux `udp_gro_receive_segment`) for a datagram of `udp_len` (UDP length) of a
/// packet whose first datagram's is `first_len`, holding `count` datagrams: a longer one may not
/// join (`Err`: the held packet leaves, [`FlushReason::Size`]); an equal one joins; a shorter one,
/// or the [`UDP_GRO_CNT_MAX`]-th, joins and finishes it.
#[inline]
pub(super) fn udp_join(
    first_len: u16,
    udp_len: u16,
    count: u16,
) -> Result<Option<FlushReason>, FlushReason> {
    if udp_len > first_len {
        return Err(FlushReason::Size);
    }
    Ok((udp_len != first_len || count + 1 >= UDP_GRO_CNT_MAX).then_some(FlushReason::Size))
}

// ---- Checksums ----

/// The IP header checksum rule for a joining segment: IPv4 headers are checked (as Linux does):
/// `Good` or `Partial` pass, `Bad` refuses, `Unknown` is verified here (the header at `l3` sums
/// to `0xffff`); an IPv6 header has no checksum, so only a `Bad` verdict given for it refuses.
#[inline(always)]
pub(super) fn ip_header_ok(status: CsumStatus, v6: bool, frame: &[u8], l3: usize) -> bool {
    match status {
        CsumStatus::Bad => false,
        CsumStatus::Unknown if !v6 => frame.get(l3..l3 + 20).is_some_and(|h| sum(h) == 0xffff),
        _ => true,
    }
}

/// Whether a plain segment's checksums were verified by the device: the TCP checksum `Good`,
/// and the IPv4 header checksum `Good` (an IPv6 header: not `Bad`, [`ip_header_ok`]). The
/// tightest lanes take only such segments; others take the lanes that settle checksums.
#[inline(always)]
pub(super) fn device_verified(meta: &OffloadMeta, v6: bool) -> bool {
    // (Written so that the common case, IPv4 `Good`, is two compares.)
    let ip = meta.status(Slot::OuterIp);
    meta.status(Slot::OuterL4) == CsumStatus::Good
        && (ip == CsumStatus::Good || (v6 && ip != CsumStatus::Bad))
}

/// The L4 checksum rule once the verdict is settled (given, or verified when `Unknown` and
/// software verification is on): `Ok(true)` joins with a `Good` checksum, `Ok(false)` with a
/// `Partial` one (the merged packet is then `Partial`); `Err(true)`: `Bad`, passed through and
/// counted; `Err(false)`: not mergeable (unverifiable, or a UDP checksum that is absent).
#[inline(always)]
pub(super) fn l4_verdict(status: CsumStatus, absent: bool) -> Result<bool, bool> {
    match status {
        CsumStatus::Good if absent => Err(false),
        CsumStatus::Good => Ok(true),
        CsumStatus::Partial => Ok(false),
        CsumStatus::Bad => Err(true),
        CsumStatus::Unknown => Err(false),
    }
}

/// [`l4_verdict`] on a fast path, for a TCP segment: whether it joins with a `Good` checksum
/// (`false`: `Partial`), verifying it in software when `Unknown` and `verify` is set (its IP
/// header at `ip.0`, IPv6 when `ip.1`; TCP at `l4`, the frame ending at `end`). `None`: it may
/// not join this way.
#[inline(always)]
pub(super) fn joining_csum(
    status: CsumStatus,
    verify: bool,
    frame: &[u8],
    ip: (usize, bool),
    l4: usize,
    end: usize,
) -> Option<bool> {
    match status {
        CsumStatus::Good => Some(true),
        CsumStatus::Partial => Some(false),
        CsumStatus::Bad => None,
        CsumStatus::Unknown if verify => {
            let pseudo = pseudo_at(frame, ip.0, ip.1, ip_proto::TCP, end.checked_sub(l4)?)?;
            (combine(pseudo, sum(frame.get(l4..)?)) == 0xffff).then_some(true)
        }
        CsumStatus::Unknown => None,
    }
}

// ---- The general path's decision: every per-segment rule in one place ----

/// What a classified, checksum-settled, eligible frame does with its flow's held packet `h`
/// (Linux `tcp_gro_receive` / `udp_gro_receive_segment` with `inet_gro_flush`): every rule in
/// order, the first that refuses names the reason. Records the IPv4 ID mode when it joins.
pub(super) fn decide(h: &mut Held, frame: &[u8], info: &Info) -> Option<Decision> {
    let len = info.payload_len();
    // IP fields of every level.
    let mut ip_flush = false;
    for lvl in 0..info.levels {
        let (a, b) = (h.info.ip.get(lvl)?, info.ip.get(lvl)?);
        if !same_ip_fields(a, b) {
            ip_flush = true;
            continue;
        }
        if !a.v6 && !h.ids.get_mut(lvl)?.accept(b.id, h.count) {
            ip_flush = true;
        }
    }
    let too_big = !fits_64k_at(h.len, h.info.l3[0], len);
    match info.proto? {
        Proto::Tcp => {
            let mismatch = carries_cwr(info.flags)
                || !same_tcp_word3(info.word3, h.info.word3)
                || !same_ack(info.ack, h.info.ack)
                || ip_flush
                || !same_options(&h.buf, h.info.l4, frame, info.l4, info.word3)
                || !fits_segment_size(len, h.mss)
                || !in_sequence(info.seq, h.next_seq);
            if mismatch {
                return Some(Decision::Refuse(FlushReason::Mismatch));
            }
            if too_big {
                return Some(Decision::Refuse(FlushReason::Size));
            }
            let finish = join_finish(info.flags, len, h.mss);
            Some(Decision::Join { finish })
        }
        Proto::Udp => {
            if ip_flush {
                return Some(Decision::Refuse(FlushReason::Mismatch));
            }
            if too_big {
                return Some(Decision::Refuse(FlushReason::Size));
            }
            Some(match udp_join(h.info.udp_len, info.udp_len, h.count) {
                Ok(finish) => Decision::Join { finish },
                Err(reason) => Decision::Refuse(reason),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_packet::Verdict;

    /// Feeds IDs to a packet whose first segment carried `first`; which were accepted.
    fn ids_accepted(first: u16, ids: &[u16]) -> Vec<bool> {
        let mut st = Ipv4Ids::new(first);
        let mut count = 1;
        ids.iter()
            .map(|&id| {
                let ok = st.accept(id, count);
                if ok {
                    count += 1;
                }
                ok
            })
            .collect()
    }

    #[test]
    fn ipv4_id_rule_picks_the_mode_at_the_second_segment() {
        // Incrementing: the n-th segment after the first carries first + n.
        assert_eq!(ids_accepted(100, &[101, 102, 103]), [true; 3]);
        assert_eq!(ids_accepted(100, &[101, 103]), [true, false]);
        assert_eq!(ids_accepted(100, &[101, 101]), [true, false]);
        // Fixed: the second segment repeats the first's ID, and so must every later one.
        assert_eq!(ids_accepted(100, &[100, 100, 100]), [true; 3]);
        assert_eq!(ids_accepted(100, &[100, 102]), [true, false]);
        assert_eq!(ids_accepted(100, &[100, 101]), [true, false]);
        // Any other second ID refuses, and a refusal changes nothing.
        assert_eq!(ids_accepted(100, &[99, 101]), [false, true]);
        assert_eq!(ids_accepted(100, &[102, 101]), [false, true]);
        // IDs wrap modulo 2^16.
        assert_eq!(ids_accepted(0xffff, &[0, 1]), [true, true]);
        let mut st = Ipv4Ids::new(7);
        assert!(st.accept(8, 1));
        st.advance();
        assert_eq!(st.next, 10);
    }

    #[test]
    fn the_64k_limit_counts_the_ip_packet() {
        // A held frame whose IP packet is 65 535 - 10 bytes takes 10 more bytes, not 11.
        let held = ETH_HLEN + MAX_IP_LEN - 10;
        assert!(fits_64k(held, 10));
        assert!(!fits_64k(held, 11));
        assert!(fits_64k(54 + 1448, 1448));
        // The same with the IP header at 14 or behind VLAN tags; an L3 packet has no Ethernet
        // header to count out.
        for l3 in [14, 18, 22] {
            assert!(fits_64k_at(held, l3, 10) && !fits_64k_at(held, l3, 11));
        }
        assert!(fits_64k_at(MAX_IP_LEN - 10, 0, 10));
        assert!(!fits_64k_at(MAX_IP_LEN - 10, 0, 11));
    }

    #[test]
    fn segment_size_is_one_byte_to_mss() {
        assert!(!fits_segment_size(0, 1448));
        assert!(fits_segment_size(1, 1448));
        assert!(fits_segment_size(1448, 1448));
        assert!(!fits_segment_size(1449, 1448));
        assert!(in_sequence(5000, 5000));
        assert!(!in_sequence(5001, 5000));
    }

    #[test]
    fn finishing_flags_and_short_segments_end_a_packet() {
        for f in [TCP_URG, TCP_PSH, TCP_RST, TCP_SYN, TCP_FIN] {
            assert!(finishes_packet(f | 0x10), "flag {f:#x}");
            // A finishing flag is the reason even for a short segment.
            assert_eq!(join_finish(f, 10, 100), Some(FlushReason::Flags));
        }
        for f in [0x10, TCP_CWR, 0x40] {
            assert!(!finishes_packet(f), "flag {f:#x}");
        }
        assert_eq!(join_finish(0x10, 99, 100), Some(FlushReason::Size));
        assert_eq!(join_finish(0x10, 100, 100), None);
        assert!(carries_cwr(TCP_CWR | 0x10));
        assert!(!carries_cwr(0x10 | TCP_PSH));
        // Only FIN and PSH go into the merged header.
        assert_eq!(merged_flags(0xff), TCP_FIN | TCP_PSH);
        assert_eq!(merged_flags(0x10 | TCP_URG), 0);
    }

    #[test]
    fn tcp_word3_compares_all_but_fin_psh_cwr() {
        let base = 0x5010_0200; // data offset 5, ACK, window 512
        assert!(same_tcp_word3(base, base));
        for f in [TCP_FIN, TCP_PSH, TCP_CWR] {
            assert!(
                same_tcp_word3(base, base | u32::from(f) << 16),
                "flag {f:#x}"
            );
        }
        assert!(!same_tcp_word3(base, base | u32::from(TCP_URG) << 16));
        assert!(!same_tcp_word3(base, base ^ 0x0010_0000)); // ACK bit
        assert!(!same_tcp_word3(base, base + 1)); // window
        assert!(!same_tcp_word3(base, 0x8010_0200)); // data offset
        assert!(same_ack(7, 7));
        assert!(!same_ack(7, 8));
    }

    #[test]
    fn options_and_ip_fields_must_be_equal() {
        let mut a = vec![0u8; 40];
        a[20..32].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
        let mut b = a.clone();
        assert!(same_options(&a, 0, &b, 0, 8 << 28));
        b[31] ^= 1;
        assert!(!same_options(&a, 0, &b, 0, 8 << 28));
        // Without options nothing is compared; a header shorter than its data offset refuses.
        assert!(same_options(&a, 0, &b, 0, 5 << 28));
        assert!(!same_options(&a[..30], 0, &b, 0, 8 << 28));
        let ip = IpFields {
            v6: false,
            ttl: 64,
            tos: 0,
            df: true,
            id: 1,
        };
        assert!(same_ip_fields(&ip, &IpFields { id: 9, ..ip }));
        assert!(!same_ip_fields(&ip, &IpFields { ttl: 63, ..ip }));
        assert!(!same_ip_fields(&ip, &IpFields { tos: 1, ..ip }));
        assert!(!same_ip_fields(&ip, &IpFields { df: false, ..ip }));
    }

    #[test]
    fn ip_headers_must_fill_the_frame_without_options_or_fragments() {
        assert!(ip_fills_frame(14, false, 100, 114));
        assert!(!ip_fills_frame(14, false, 100, 115)); // padding
        assert!(!ip_fills_frame(14, false, 100, 113)); // truncated
        assert!(ip_fills_frame(14, true, 60, 114));
        assert!(!ip_fills_frame(14, true, 100, 114));
        assert!(ipv4_without_options(0x45));
        assert!(!ipv4_without_options(0x46));
        assert!(!ipv4_without_options(0x65));
        assert!(!ipv4_is_fragment(0x4000)); // DF alone
        assert!(ipv4_is_fragment(0x2000)); // MF
        assert!(ipv4_is_fragment(0x0001)); // an offset
    }

    #[test]
    fn udp_datagrams_merge_while_equal_up_to_the_count_limit() {
        assert_eq!(udp_join(100, 101, 1), Err(FlushReason::Size));
        assert_eq!(udp_join(100, 100, 1), Ok(None));
        assert_eq!(udp_join(100, 99, 1), Ok(Some(FlushReason::Size)));
        assert_eq!(udp_join(100, 100, UDP_GRO_CNT_MAX - 2), Ok(None));
        assert_eq!(
            udp_join(100, 100, UDP_GRO_CNT_MAX - 1),
            Ok(Some(FlushReason::Size))
        );
    }

    #[test]
    fn checksum_rules() {
        // An IPv4 header with a correct checksum at frame offset 14.
        let mut f = vec![0u8; 34];
        f[14..34].copy_from_slice(&[
            0x45, 0, 0, 20, 0, 1, 0x40, 0, 64, 6, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2,
        ]);
        let c = sluice_checksum::checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        assert!(ip_header_ok(CsumStatus::Unknown, false, &f, 14));
        assert!(ip_header_ok(CsumStatus::Good, false, &f, 14));
        assert!(ip_header_ok(CsumStatus::Partial, false, &f, 14));
        assert!(!ip_header_ok(CsumStatus::Bad, false, &f, 14));
        assert!(!ip_header_ok(CsumStatus::Bad, true, &f, 14));
        assert!(ip_header_ok(CsumStatus::Unknown, true, &f, 14));
        f[25] ^= 1;
        assert!(!ip_header_ok(CsumStatus::Unknown, false, &f, 14));
        assert!(!ip_header_ok(CsumStatus::Unknown, false, &f[..30], 14));

        assert_eq!(l4_verdict(CsumStatus::Good, false), Ok(true));
        assert_eq!(l4_verdict(CsumStatus::Good, true), Err(false));
        assert_eq!(l4_verdict(CsumStatus::Partial, false), Ok(false));
        assert_eq!(l4_verdict(CsumStatus::Bad, false), Err(true));
        assert_eq!(l4_verdict(CsumStatus::Unknown, false), Err(false));

        let mut m = OffloadMeta::default();
        assert!(!device_verified(&m, false));
        assert!(!device_verified(&m, true));
        m.rx_checksum_unnecessary(false);
        assert_eq!(
            device_verified(&m, false),
            m.status(Slot::OuterIp) == CsumStatus::Good
        );
        m.rx_verdict(Slot::OuterIp, Verdict::Good);
        assert!(device_verified(&m, false));
        assert!(device_verified(&m, true));
        m.rx_verdict(Slot::OuterIp, Verdict::Bad);
        assert!(!device_verified(&m, false));
        assert!(!device_verified(&m, true));
    }

    #[test]
    fn may_start_needs_payload_and_no_finishing_flag_or_cwr() {
        let tcp = Info {
            proto: Some(Proto::Tcp),
            payload: 54,
            end: 55,
            flags: 0x10,
            ..Info::default()
        };
        assert!(may_start(&tcp));
        assert!(!may_start(&Info { end: 54, ..tcp }));
        assert!(!may_start(&Info {
            flags: 0x10 | TCP_PSH,
            ..tcp
        }));
        assert!(!may_start(&Info {
            flags: 0x10 | TCP_CWR,
            ..tcp
        }));
        assert!(may_start(&Info {
            proto: Some(Proto::Udp),
            ..Info::default()
        }));
        assert!(!may_start(&Info::default()));
    }
}
