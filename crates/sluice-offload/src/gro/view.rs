//! The fast path's header view: one masked comparison of up to 128 header bytes with a held
//! packet's first segment proves the same flow and every "must be identical" rule at once.

use super::flow::{load_word, Info, IpFields, Proto, ETH_HLEN};
use super::rules::TCP_MAY_DIFFER;
use super::table::Held;
use sluice_wire::TunnelKind;

/// The fast-path masks of the plain shapes ([`plain_tcp`](super::flow::plain_tcp)), by IP version and TCP data
/// offset, computed once ([`fast_view`] gives the same for a plain packet).
#[derive(Debug)]
pub(super) struct PlainMasks {
    pub(super) masks: [[[u64; CMP_WORDS]; 16]; 2],
}

impl PlainMasks {
    pub(super) fn new() -> Self {
        let mut masks = [[[0u64; CMP_WORDS]; 16]; 2];
        for (v, per_version) in masks.iter_mut().enumerate() {
            let v6 = v == 1;
            for (doff, m) in per_version.iter_mut().enumerate().skip(5) {
                let info = plain_info(v6, doff);
                let frame = [0u8; CMP_WORDS * 8];
                let mut r = [0u8; CMP_WORDS * 8];
                fast_view(&frame, &info, &mut r, m);
            }
        }
        PlainMasks { masks }
    }

    /// The mask of a held packet if it is plain.
    #[inline(always)]
    pub(super) fn get(&self, info: &Info) -> Option<&[u64; CMP_WORDS]> {
        let v6 = info.ip[0].v6;
        if !info.is_plain() {
            return None;
        }
        let doff = info.payload.checked_sub(info.l4)? / 4;
        self.masks.get(usize::from(v6))?.get(doff)
    }
}

/// The [`Info`] shape of a plain segment (for [`PlainMasks`]).
pub(super) fn plain_info(v6: bool, doff: usize) -> Info {
    let l4 = if v6 { 54 } else { 34 };
    Info {
        proto: Some(Proto::Tcp),
        l3: [ETH_HLEN, 0],
        ip: [
            IpFields {
                v6,
                ..IpFields::default()
            },
            IpFields::default(),
        ],
        levels: 1,
        l4,
        payload: l4 + doff * 4,
        ..Info::default()
    }
}

/// Entries of [`GroEngine::port_cache`](super::GroEngine::port_cache).
pub(super) const PORT_CACHE: usize = 64;

/// The port cache entry for 4 frame bytes (a multiplicative hash).
#[inline(always)]
pub(super) fn port_cache_index(b: &[u8]) -> usize {
    let v = b.first_chunk::<4>().map_or(0, |c| u32::from_ne_bytes(*c));
    (v.wrapping_mul(0x9e37_79b1) >> 26) as usize
}

/// The fast path's reference header bytes ([`Held::cmp_ref`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct HeadBytes(pub(super) [u8; CMP_WORDS * 8]);

impl Default for HeadBytes {
    fn default() -> Self {
        HeadBytes([0; CMP_WORDS * 8])
    }
}

/// The mask bits [`Held::start_prediction`] adds for a plain packet (little-endian words): the
/// IPv4 total length (frame bytes 16..18) or the IPv6 payload length (18..20).
pub(super) const fn prediction_bits(v6: bool) -> [u64; CMP_WORDS] {
    let mut m = [0u64; CMP_WORDS];
    m[2] = if v6 { 0xffff_0000 } else { 0xffff };
    m
}

/// Most header words the fast path compares (128 bytes of headers).
pub(super) const CMP_WORDS: usize = 16;

/// The fast path's reference words and mask for a held TCP packet: every header byte must be
/// equal except the per-segment fields (IP lengths, IDs and checksums, outer UDP length and
/// checksum, TCP sequence, PSH/FIN bits, checksum and urgent pointer). Headers longer than
/// [`CMP_WORDS`] words get no fast path (`words` 0).
pub(super) fn fast_view(
    frame: &[u8],
    info: &Info,
    r: &mut [u8; CMP_WORDS * 8],
    m: &mut [u64; CMP_WORDS],
) -> usize {
    *r = [0; CMP_WORDS * 8];
    *m = [0; CMP_WORDS];
    let hl = info.payload;
    if info.proto != Some(Proto::Tcp) || !(8..=CMP_WORDS * 8).contains(&hl) {
        return 0;
    }
    let Some(hdr) = frame.get(..hl) else { return 0 };
    let mut head = [0u8; CMP_WORDS * 8];
    if let Some(d) = head.get_mut(..hl) {
        d.copy_from_slice(hdr);
    }
    let words = hl.div_ceil(8);
    for (k, w) in m.iter_mut().enumerate().take(words) {
        // Little-endian words: byte j of the word is bits 8j..8j+8; bytes past `hl` are ignored.
        let valid = hl - k * 8;
        *w = if valid >= 8 {
            !0
        } else {
            (1u64 << (8 * valid)) - 1
        };
    }
    // Keeps only the bits of `keep` in bytes a..b (a word at a time).
    let mut clear = |a: usize, b: usize, keep: u8| {
        let drop = u64::from_ne_bytes([!keep; 8]);
        let mut i = a;
        while i < b {
            let lo = i % 8;
            let n = (8 - lo).min(b - i);
            let bytes = if n == 8 {
                !0
            } else {
                ((1u64 << (8 * n)) - 1) << (8 * lo)
            };
            if let Some(w) = m.get_mut(i / 8) {
                *w &= !(bytes & drop);
            }
            i += n;
        }
    };
    for lvl in 0..info.levels.min(2) {
        let (Some(&l3), Some(ip)) = (info.l3.get(lvl), info.ip.get(lvl)) else {
            return 0;
        };
        if ip.v6 {
            clear(l3 + 4, l3 + 6, 0);
        } else {
            clear(l3 + 2, l3 + 6, 0);
            clear(l3 + 10, l3 + 12, 0);
        }
    }
    if let Some(t) = info.tunnel.filter(|t| t.kind != TunnelKind::Gre) {
        clear(t.outer_l4 + 4, t.outer_l4 + 8, 0);
    }
    let l4 = info.l4;
    clear(l4 + 4, l4 + 8, 0);
    clear(l4 + 13, l4 + 14, !TCP_MAY_DIFFER);
    clear(l4 + 16, l4 + 20, 0);
    *r = head;
    words
}

/// Whether `frame`'s headers equal held packet `h`'s first segment's under the fast-path mask.
#[inline(always)]
pub(super) fn same_headers(h: &Held, frame: &[u8]) -> bool {
    if frame.len() <= h.info.payload {
        return false;
    }
    // Branch-free over 8 or all 16 words (the mask and reference are zero past `cmp_words`),
    // which the compiler vectorises.
    if h.cmp_words <= 8 {
        if let (Some(head), Some(r), Some(m)) = (
            frame.first_chunk::<64>(),
            h.cmp_ref.0.first_chunk::<64>(),
            h.cmp_mask.first_chunk::<8>(),
        ) {
            return masked_equal(head, r, m);
        }
    } else if let Some(head) = frame.first_chunk::<128>() {
        return masked_equal(head, &h.cmp_ref.0, &h.cmp_mask);
    }
    same_headers_short(h, frame)
}

#[inline(always)]
pub(super) fn masked_equal<const B: usize, const W: usize>(
    head: &[u8; B],
    r: &[u8; B],
    m: &[u64; W],
) -> bool {
    let mut diff = 0u64;
    let (head, r) = (head.as_chunks::<8>().0, r.as_chunks::<8>().0);
    for ((c, r), m) in head.iter().zip(r.iter()).zip(m.iter()) {
        diff |= (u64::from_le_bytes(*c) ^ u64::from_le_bytes(*r)) & m;
    }
    diff == 0
}

/// [`same_headers`] for a frame too short for the fixed-size comparison.
#[cold]
#[inline(never)]
pub(super) fn same_headers_short(h: &Held, frame: &[u8]) -> bool {
    let mut diff = 0u64;
    for k in 0..h.cmp_words.min(CMP_WORDS) {
        let (r, m) = (
            load_word(&h.cmp_ref.0, k * 8),
            h.cmp_mask.get(k).copied().unwrap_or(0),
        );
        diff |= (load_word(frame, k * 8) ^ r) & m;
    }
    diff == 0
}
