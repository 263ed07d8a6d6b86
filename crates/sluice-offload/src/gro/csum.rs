//! Checksum handling: settling a segment's checksum verdicts (given, or verified in software),
//! and the header-only sums that give a merged packet's checksums without reading payload again.

use super::flow::{be32_in, plain_headers, plain_offsets, Info, Proto};
use super::rules::l4_verdict;
use super::table::Held;
use super::GroEngine;
use sluice_checksum::combine;
use sluice_packet::verify::{verify_ip, verify_l4};
use sluice_packet::{CsumStatus, Level, OffloadMeta, Slot, Verdict};
use sluice_wire::{ip_proto, Headers};

/// A payload sum with `n` deferred segments folded in: each such segment's payload sums to
/// minus (`fixed_sum` + its varying words + its length), so all of them to minus
/// (`n` × `fixed_sum` + `acc`) (see [`Held::deferred_acc`]).
#[inline]
pub(super) fn with_deferred(payload_sum: u16, n: u64, fixed_sum: u32, acc: u64) -> u16 {
    if n == 0 {
        return payload_sum;
    }
    let pending = n.wrapping_mul(u64::from(fixed_sum)).wrapping_add(acc);
    combine(payload_sum, !fold64(pending))
}

/// [`Held::fixed_sum`] of a TCP packet's first segment.
pub(super) fn fixed_tcp_sum(frame: &[u8], info: &Info) -> Option<u32> {
    let lvl = info.innermost();
    fixed_tcp_sum_at(
        frame,
        *info.l3.get(lvl)?,
        info.ip.get(lvl)?.v6,
        info.l4,
        info.payload,
    )
}

/// [`fixed_tcp_sum`] of a segment whose innermost IP header is at `l3` (IPv6 when `v6`), TCP
/// header at `l4` and payload at `payload`.
#[inline]
pub(super) fn fixed_tcp_sum_at(
    frame: &[u8],
    l3: usize,
    v6: bool,
    l4: usize,
    payload: usize,
) -> Option<u32> {
    Some(u32::from(fold64(fixed_tcp_acc_at(
        frame, l3, v6, l4, payload,
    )?)))
}

/// [`fixed_tcp_sum_at`] not folded (below 2^40).
#[inline(always)]
pub(super) fn fixed_tcp_acc_at(
    frame: &[u8],
    l3: usize,
    v6: bool,
    l4: usize,
    payload: usize,
) -> Option<u64> {
    let addrs = if v6 {
        frame.get(l3 + 8..l3 + 40)?
    } else {
        frame.get(l3 + 12..l3 + 20)?
    };
    // Pseudo-header without the length (addresses, protocol), then the TCP header words that
    // `varying_words` leaves out: ports, acknowledgment number, options.
    let t: &[u8; 20] = frame.get(l4..l4 + 20)?.try_into().ok()?;
    let w = |k: usize| u64::from(be32_in(t, k));
    let options = frame.get(l4 + 20..payload)?;
    Some(u64::from(ip_proto::TCP) + words_sum(addrs) + w(0) + w(8) + words_sum(options))
}

/// The folded ones'-complement sum of a short slice (a header), inline: cheaper than the
/// dispatched [`sum`](sluice_checksum::sum) for a few dozen bytes. Same value as [`sum`](sluice_checksum::sum).
#[inline(always)]
pub(super) fn small_sum(b: &[u8]) -> u16 {
    let mut acc = words_sum(b);
    if b.len() % 2 == 1 {
        acc += u64::from(*b.last().unwrap_or(&0)) << 8;
    }
    fold64(acc)
}

/// The unfolded sum of the big-endian 16-bit words of a short slice (an odd last byte is
/// ignored).
#[inline(always)]
pub(super) fn words_sum(b: &[u8]) -> u64 {
    // 32-bit words: each adds its two 16-bit halves at once (folded later).
    let mut quads = b.chunks_exact(4);
    let mut acc = 0u64;
    for q in &mut quads {
        acc += u64::from(be32_in(q, 0));
    }
    if let [a, b, ..] = quads.remainder() {
        acc += u64::from(u16::from_be_bytes([*a, *b]));
    }
    acc
}

/// The payload sum of a segment that passed [`same_headers`](super::view::same_headers) for held packet `h` and whose TCP
/// checksum is good: the complement of its pseudo-header and TCP header sums, from
/// [`Held::fixed_sum`] plus the words that vary.
#[inline(always)]
pub(super) fn fast_payload_sum(h: &Held, frame: &[u8], end: usize) -> Option<u16> {
    let l4 = h.info.l4;
    let t: &[u8; 20] = frame.get(l4..l4 + 20)?.try_into().ok()?;
    Some(tcp_payload_sum(h.fixed_sum, end.checked_sub(l4)?, t))
}

/// The payload sum of a good TCP segment of `tcp_len` bytes (header `t`) whose other header
/// words sum to `fixed_sum` (see [`Held::fixed_sum`]).
#[inline(always)]
pub(super) fn tcp_payload_sum(fixed_sum: u32, tcp_len: usize, t: &[u8; 20]) -> u16 {
    !fold64(u64::from(fixed_sum) + tcp_len as u64 + varying_words(t))
}

/// The unfolded sum of the TCP header words [`Held::fixed_sum`] leaves out: the sequence number,
/// data offset/flags/window and checksum/urgent pointer, as three 32-bit words (a 32-bit word is
/// congruent to the sum of its 16-bit halves modulo 0xffff).
#[inline(always)]
pub(super) fn varying_words(t: &[u8; 20]) -> u64 {
    let w = |k: usize| u64::from(be32_in(t, k));
    w(4) + w(12) + w(16)
}

/// Folds a ones'-complement accumulator to 16 bits.
#[inline(always)]
pub(super) fn fold64(acc: u64) -> u16 {
    // Four end-around-carry steps reduce any 64-bit value to 16 bits (branch-free).
    let a = (acc & 0xffff_ffff) + (acc >> 32);
    let a = (a & 0xffff) + (a >> 16);
    let a = (a & 0xffff) + (a >> 16);
    let a = (a & 0xffff) + (a >> 16);
    a as u16
}

pub(super) fn absent_verdicts(slot: Slot) -> sluice_packet::Verdicts {
    let mut v = sluice_packet::Verdicts::default();
    match slot {
        Slot::InnerL4 => v.inner_l4_absent = true,
        _ => v.l4_absent = true,
    }
    v
}

/// The pseudo-header sum of the innermost L4 header for `l4_len` bytes.
#[inline]
pub(super) fn l4_pseudo(frame: &[u8], info: &Info, proto: u8, l4_len: usize) -> Option<u16> {
    let lvl = info.innermost();
    pseudo_at(
        frame,
        *info.l3.get(lvl)?,
        info.ip.get(lvl)?.v6,
        proto,
        l4_len,
    )
}

#[inline]
pub(super) fn pseudo_at(
    frame: &[u8],
    l3: usize,
    v6: bool,
    proto: u8,
    l4_len: usize,
) -> Option<u16> {
    if v6 {
        let src: [u8; 16] = frame.get(l3 + 8..l3 + 24)?.try_into().ok()?;
        let dst: [u8; 16] = frame.get(l3 + 24..l3 + 40)?.try_into().ok()?;
        Some(sluice_checksum::pseudo::ipv6(
            &src,
            &dst,
            proto,
            u32::try_from(l4_len).ok()?,
        ))
    } else {
        let src: [u8; 4] = frame.get(l3 + 12..l3 + 16)?.try_into().ok()?;
        let dst: [u8; 4] = frame.get(l3 + 16..l3 + 20)?.try_into().ok()?;
        Some(sluice_checksum::pseudo::ipv4(
            src,
            dst,
            proto,
            u16::try_from(l4_len).ok()?,
        ))
    }
}

/// The ones'-complement sum of a verified segment's payload, from its headers only: the whole
/// L4 region with its pseudo-header sums to `0xffff`, so the payload sums to the complement of
/// the pseudo-header and the L4 header.
pub(super) fn segment_payload_sum(frame: &[u8], info: &Info, end: usize) -> Option<u16> {
    let proto = match info.proto? {
        Proto::Tcp => ip_proto::TCP,
        Proto::Udp => ip_proto::UDP,
    };
    let pseudo = l4_pseudo(frame, info, proto, end.checked_sub(info.l4)?)?;
    let hdr = small_sum(frame.get(info.l4..info.payload)?);
    Some(!combine(pseudo, hdr))
}

/// The caller's metadata if it describes this frame's headers (the same offsets, tunnel, IP
/// versions and L4 protocols at both levels: a caller may hand over the metadata of another
/// frame with the same header sizes, as the datapath does for the datagrams of one UDP-GSO
/// frame), else fresh metadata for the layout carrying over the caller's checksum statuses.
pub(super) fn adopt(fresh: OffloadMeta, given: OffloadMeta) -> OffloadMeta {
    let mut m = fresh;
    let same_kinds = [Level::Outer, Level::Inner]
        .into_iter()
        .all(|l| given.l3_kind(l) == m.l3_kind(l) && given.l4_proto(l) == m.l4_proto(l));
    if given.offsets() == m.offsets() && given.tunnel() == m.tunnel() && same_kinds {
        return given;
    }
    for slot in Slot::ALL {
        match given.status(slot) {
            CsumStatus::Good => m.rx_verdict(slot, Verdict::Good),
            CsumStatus::Bad => m.rx_verdict(slot, Verdict::Bad),
            CsumStatus::Partial if slot.is_l4() => {
                let field = match m.l4_proto(slot.level()) {
                    Some(ip_proto::TCP) => Some(16),
                    Some(ip_proto::UDP) => Some(6),
                    _ => None,
                };
                if let (Some(off), Some(f)) = (m.offsets().of(slot), field) {
                    let _ = m.rx_needs_csum(off, f);
                }
            }
            _ => {}
        }
    }
    m
}

impl GroEngine {
    /// [`GroEngine::check_csums`] for a plain frame (one level, no tunnel), without building
    /// [`Headers`] unless a checksum must be verified in software.
    #[inline(always)]
    pub(super) fn plain_csums(
        &self,
        frame: &[u8],
        info: &Info,
        meta: &mut OffloadMeta,
    ) -> Result<bool, bool> {
        let v6 = info.ip[0].v6;
        let [fresh4, fresh6] = &self.plain_meta;
        let fresh = if v6 { fresh6 } else { fresh4 };
        if meta.offsets() != plain_offsets(v6) || meta.tunnel().is_some() {
            *meta = adopt(*fresh, *meta);
        }
        // The common case first: a device verified both.
        if meta.status(Slot::OuterIp) == CsumStatus::Good
            && meta.status(Slot::OuterL4) == CsumStatus::Good
            && !meta.csum_absent(Level::Outer)
        {
            return Ok(true);
        }
        if meta.status(Slot::OuterIp) == CsumStatus::Unknown && !v6 {
            meta.rx_verdict(Slot::OuterIp, verify_ip(frame, &plain_headers(info, v6)));
        }
        if meta.status(Slot::OuterIp) == CsumStatus::Bad {
            return Err(true);
        }
        if meta.status(Slot::OuterL4) == CsumStatus::Unknown {
            let h = plain_headers(info, v6);
            self.settle_l4(frame, &h, false, Slot::OuterL4, meta);
        }
        l4_verdict(meta.status(Slot::OuterL4), meta.csum_absent(Level::Outer))
    }

    /// Establishes the checksum state of a segment. `Ok(all_good)`: every checksum is good or
    /// partial (`all_good` false when the merged L4 one is partial). `Err(bad)`: the frame may not
    /// join (`bad`: some checksum is `Bad`).
    pub(super) fn check_csums(
        &self,
        frame: &[u8],
        fresh: OffloadMeta,
        outer: &Headers,
        inner: Option<&Headers>,
        info: &Info,
        meta: &mut OffloadMeta,
    ) -> Result<bool, bool> {
        *meta = adopt(fresh, *meta);
        // IPv4 header checksums: always checked (20 bytes), as Linux does.
        let levels: &[(Slot, Slot, Option<&Headers>)] = &[
            (Slot::OuterIp, Slot::OuterL4, Some(outer)),
            (Slot::InnerIp, Slot::InnerL4, inner),
        ];
        for &(ip_slot, _, h) in levels.iter().take(info.levels) {
            let Some(h) = h else { return Err(false) };
            if meta.status(ip_slot) == CsumStatus::Unknown {
                meta.rx_verdict(ip_slot, verify_ip(frame, h));
            }
            if meta.status(ip_slot) == CsumStatus::Bad {
                return Err(true);
            }
        }
        // The outer UDP checksum of a tunnel, when in use.
        if let (Some(t), true) = (info.tunnel, info.levels == 2) {
            if t.outer_csum {
                let s = self.settle_l4(frame, outer, true, Slot::OuterL4, meta);
                match s {
                    CsumStatus::Good | CsumStatus::Partial => {}
                    CsumStatus::Bad => return Err(true),
                    CsumStatus::Unknown => return Err(false),
                }
            }
        }
        let (slot, h) = if info.levels == 2 {
            (Slot::InnerL4, inner)
        } else {
            (Slot::OuterL4, Some(outer))
        };
        let Some(h) = h else { return Err(false) };
        let status = self.settle_l4(frame, h, false, slot, meta);
        l4_verdict(status, meta.csum_absent(slot.level()))
    }

    pub(super) fn settle_l4(
        &self,
        frame: &[u8],
        h: &Headers,
        udp_tunnel: bool,
        slot: Slot,
        meta: &mut OffloadMeta,
    ) -> CsumStatus {
        if meta.status(slot) == CsumStatus::Unknown && self.cfg.verify_checksums {
            let (v, absent) = verify_l4(frame, h, udp_tunnel);
            if absent {
                meta.apply_verdicts(&absent_verdicts(slot));
            } else {
                meta.rx_verdict(slot, v);
            }
        }
        meta.status(slot)
    }
}
