//! Fuzzes software GSO over (frame, GSO parameters): `segment`, `segment_zero_copy` and
//! `segment_partial` must never panic; on success every segment stays within the frame limit,
//! contiguous and zero-copy output agree byte for byte, and the segment count respects the limit.
//!
//! Input: byte 0 picks the GSO type (low 3 bits) and the flags (fixed ID, partial L4 checksum,
//! partial IP checksum, outer checksum mode); bytes 1–2 the segment size (big endian); byte 3 the
//! segment limit (low 7 bits) and the partial-segmentation header style (high bit); bytes 4–5 the frame-length limit; the rest is the frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_offload::gso::{
    segment, segment_partial, segment_zero_copy, CsumMode, GsoOutput, GsoParams, OuterCsum,
    PartialHeaders, ZeroCopyOutput,
};
use sluice_packet::GsoType;
use sluice_wire::{parse_partial, ParseConfig};

fuzz_target!(|data: &[u8]| {
    if data.len() < 6 {
        return;
    }
    let (head, frame) = data.split_at(6);
    let ty = match head[0] & 7 {
        0 => GsoType::None,
        1 | 5 => GsoType::TcpV4,
        2 | 6 => GsoType::TcpV6,
        3 => GsoType::UdpL4,
        _ => GsoType::Udp,
    };
    let mut p = GsoParams::new(ty, u16::from_be_bytes([head[1], head[2]]));
    p.fixed_id = head[0] & 0x08 != 0;
    if head[0] & 0x10 != 0 {
        p.l4_csum = CsumMode::Partial;
    }
    if head[0] & 0x20 != 0 {
        p.ip_csum = CsumMode::Partial;
    }
    p.outer_csum = match head[0] >> 6 {
        0 => OuterCsum::AsInput,
        1 => OuterCsum::Zero,
        2 => OuterCsum::Full,
        _ => OuterCsum::Lco,
    };
    p.max_segments = u16::from(head[3] & 0x7f);
    if head[3] & 0x80 != 0 {
        p.partial_headers = PartialHeaders::PerSegment;
    }
    p.max_frame_len = usize::from(u16::from_be_bytes([head[4], head[5]]));
    let (layout, _) = parse_partial(frame, &ParseConfig::DEFAULT);

    let mut out = GsoOutput::new();
    let mut zc = ZeroCopyOutput::new();
    let r = segment(frame, &layout, &p, &mut out);
    let rz = segment_zero_copy(frame, &layout, &p, &mut zc);
    assert_eq!(r, rz);
    if let Ok(n) = r {
        assert_eq!(n, out.len());
        assert!(n <= p.segment_limit());
        for i in 0..n {
            let f = out.frame(i).unwrap();
            if p.max_frame_len != 0 {
                assert!(f.len() <= p.max_frame_len);
            }
            let [h, pl] = zc.parts(i, frame).unwrap();
            assert_eq!([h, pl].concat(), f);
        }
    } else {
        assert!(out.is_empty() && zc.is_empty());
    }
    let mut part = GsoOutput::new();
    let _ = segment_partial(frame, &layout, &p, &mut part);
});
