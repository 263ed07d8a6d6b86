//! Fuzzes the GRO engine with random frame sequences: no panic, bounded memory, conservation
//! (every received frame leaves in exactly one output packet), and every merged packet parses,
//! carries a GSO request and has correct checksums wherever its metadata says `Good`.
//!
//! Input: byte 0 picks the configuration (bit 0 UDP GRO, bit 1 software verification, bits 2–4
//! the flow table size 1..=8, bit 5 a max age of 1 instead of flushing at every batch end). The
//! rest is records `[op][len lo][len hi][bytes…]`: op & 3 == 0 → a raw frame of `len` bytes;
//! 1 → the next in-sequence segment of the previous frame (TCP sequence advanced by its payload,
//! IPv4 ID + 1, checksums recomputed) — so that the fuzzer reaches the merge paths; 2 → the
//! previous frame again with one byte (`len` picks which) flipped; 3 → end of batch.
//!
//! Burst mode is checked against copying mode: with batches flushed at their end (max age 0),
//! every batch is also fed to a second engine's `coalesce_burst`, whose packets (headers plus
//! pieces of the input frames, linearized) must be exactly the copying engine's for that batch.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_offload::gro::{GroBurst, GroConfig, GroEngine};
use sluice_packet::verify::{verify_frame, Verdict};
use sluice_packet::{rewrite, CsumStatus, GsoType, OffloadMeta, Slot};

const MAX_HELD: usize = 48;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, mut rest)) = data.split_first() else {
        return;
    };
    let max_flows = usize::from((sel >> 2) & 7) + 1;
    let cfg = GroConfig {
        udp: sel & 1 != 0,
        verify_checksums: sel & 2 != 0,
        max_flows,
        max_held_packets: MAX_HELD,
        max_age: u64::from(sel >> 5 & 1),
        ..GroConfig::default()
    };
    let mut e = GroEngine::new(cfg);
    let mut burst_engine = GroEngine::new(cfg);
    let mut burst_out = GroBurst::new();
    let compare = cfg.max_age == 0;
    // This batch's input (for the burst engine) and the copying engine's output of it.
    let mut batch: Vec<(Vec<u8>, OffloadMeta)> = Vec::new();
    let mut copied: Vec<(Vec<u8>, OffloadMeta, u16)> = Vec::new();
    let mut prev: Vec<u8> = Vec::new();
    let mut frames_in = 0usize;
    let mut segments_out = 0usize;
    let mut biggest = 0usize;
    let mut now = 0u64;
    while rest.len() >= 3 {
        let op = rest[0];
        let len = usize::from(u16::from_le_bytes([rest[1], rest[2]]));
        rest = &rest[3..];
        let frame = match op & 3 {
            0 => {
                let n = len.min(rest.len());
                let f = rest[..n].to_vec();
                rest = &rest[n..];
                f
            }
            1 => match next_segment(&prev) {
                Some(f) => f,
                None => continue,
            },
            2 => {
                let mut f = prev.clone();
                if let Some(b) = f.get_mut(len % prev.len().max(1)) {
                    *b ^= op | 1;
                }
                f
            }
            _ => {
                e.end_batch(now);
                now += 1;
                drain(&mut e, &mut segments_out, &mut copied);
                if compare {
                    check_burst(&mut burst_engine, &mut burst_out, &batch, &copied);
                }
                batch.clear();
                copied.clear();
                continue;
            }
        };
        biggest = biggest.max(frame.len());
        let mut meta = OffloadMeta::default();
        if op & 0x80 != 0 {
            if let Ok(l) = sluice_wire::parse(&frame) {
                meta = OffloadMeta::from_layout(&l);
                // An honest device: it reports "checksum unnecessary" only for frames whose
                // checksums are right. `Good` is a verified claim; the engine builds on it (a
                // merged tunnel's outer checksum is derived from the inner sums), so a false
                // claim is garbage in, not a finding.
                let v = verify_frame(&frame, &l);
                let honest = [v.ip, v.l4, v.inner_ip, v.inner_l4]
                    .iter()
                    .all(|&x| x != Verdict::Bad);
                if honest {
                    meta.rx_checksum_unnecessary(op & 0x40 != 0);
                }
            }
        }
        e.receive(&frame, meta, now);
        if compare {
            batch.push((frame.clone(), meta));
        }
        frames_in += 1;
        assert!(e.held_flows() <= max_flows);
        assert!(e.held_segments() <= MAX_HELD);
        prev = frame;
        if e.output_len() > 16 {
            drain(&mut e, &mut segments_out, &mut copied);
        }
    }
    e.flush(sluice_offload::gro::FlushReason::Manual);
    drain(&mut e, &mut segments_out, &mut copied);
    if compare {
        check_burst(&mut burst_engine, &mut burst_out, &batch, &copied);
    }
    assert_eq!(frames_in, segments_out, "frames lost or duplicated");
    let bound = (max_flows + (2 * max_flows).max(64)) * (66_048 + biggest);
    assert!(e.buffer_bytes() <= bound);
});

fn drain(
    e: &mut GroEngine,
    segments_out: &mut usize,
    copied: &mut Vec<(Vec<u8>, OffloadMeta, u16)>,
) {
    while let Some(p) = e.pop_output() {
        *segments_out += usize::from(p.segments);
        if p.segments > 1 {
            check_merged(&p.frame, &p.meta);
        }
        copied.push((p.frame.clone(), p.meta, p.segments));
        e.recycle(p.frame);
    }
}

/// One batch through `coalesce_burst`: the same packets as the copying engine gave for it.
fn check_burst(
    engine: &mut GroEngine,
    out: &mut GroBurst,
    batch: &[(Vec<u8>, OffloadMeta)],
    copied: &[(Vec<u8>, OffloadMeta, u16)],
) {
    let frames: Vec<&[u8]> = batch.iter().map(|(f, _)| f.as_slice()).collect();
    let metas: Vec<OffloadMeta> = batch.iter().map(|(_, m)| *m).collect();
    engine.coalesce_burst(&frames, &metas, out);
    assert_eq!(out.packets().len(), copied.len(), "burst mode: packet count");
    for (p, (frame, meta, segments)) in out.packets().iter().zip(copied) {
        let mut f = Vec::new();
        out.linearize(p, &frames, &mut f);
        assert_eq!(&f, frame, "burst mode: packet bytes");
        assert_eq!(p.meta, *meta, "burst mode: metadata");
        assert_eq!(p.segments, *segments, "burst mode: segments");
        for piece in out.pieces(p) {
            assert!(piece.frame < frames.len() && piece.range.end <= frames[piece.frame].len());
        }
    }
}

/// A merged packet must parse, fit 64 KiB, carry a GSO request, and verify where it says `Good`.
fn check_merged(frame: &[u8], meta: &OffloadMeta) {
    assert!(frame.len() - 14 <= 65_535, "merged packet too big");
    assert_ne!(meta.gso_type(), GsoType::None);
    assert!(meta.segment_size() > 0);
    let layout = sluice_wire::parse(frame).expect("merged packet parses");
    let v = verify_frame(frame, &layout);
    let slots = [
        (Slot::OuterIp, v.ip),
        (Slot::OuterL4, v.l4),
        (Slot::InnerIp, v.inner_ip),
        (Slot::InnerL4, v.inner_l4),
    ];
    for (slot, verdict) in slots {
        // `None`: nothing to check there (an IPv6 header, which a caller's "checksum
        // unnecessary" may well have marked Good).
        if meta.status(slot) == CsumStatus::Good && !meta.csum_absent(slot.level()) {
            assert_ne!(verdict, Verdict::Bad, "{slot:?} marked Good but wrong");
        }
    }
    // Filling a Partial checksum must give a correct one.
    let mut f = frame.to_vec();
    let mut m = *meta;
    for slot in [Slot::InnerL4, Slot::OuterL4] {
        if m.status(slot) == CsumStatus::Partial {
            rewrite::recompute_checksum(&mut f, &mut m, slot).expect("fill partial");
        }
    }
}

/// The next in-sequence segment of a TCP frame: sequence + payload, IPv4 ID + 1 at every level,
/// checksums recomputed. `None` when the frame is no parsable TCP segment.
fn next_segment(prev: &[u8]) -> Option<Vec<u8>> {
    let layout = sluice_wire::parse(prev).ok()?;
    let h = layout.innermost();
    let (l4, payload, end) = (h.l4?, h.payload?, h.l3_end?);
    if h.l4_proto? != 6 || end != prev.len() {
        return None;
    }
    let mut f = prev.to_vec();
    let seq = u32::from_be_bytes(f.get(l4 + 4..l4 + 8)?.try_into().ok()?);
    let seq = seq.wrapping_add((end - payload) as u32);
    f.get_mut(l4 + 4..l4 + 8)?
        .copy_from_slice(&seq.to_be_bytes());
    for stack in [Some(&layout.outer), layout.inner.as_ref()]
        .into_iter()
        .flatten()
    {
        if let (Some(l3), Some(sluice_wire::L3Kind::Ipv4)) = (stack.l3, stack.l3_kind) {
            let id = u16::from_be_bytes(f.get(l3 + 4..l3 + 6)?.try_into().ok()?);
            f.get_mut(l3 + 4..l3 + 6)?
                .copy_from_slice(&id.wrapping_add(1).to_be_bytes());
        }
    }
    let mut m = OffloadMeta::from_layout(&layout);
    for slot in [Slot::InnerL4, Slot::InnerIp, Slot::OuterL4, Slot::OuterIp] {
        let _ = rewrite::recompute_checksum(&mut f, &mut m, slot);
    }
    Some(f)
}
