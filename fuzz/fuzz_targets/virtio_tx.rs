//! Fuzzes the receive-to-transmit path of a virtio port: decode a `virtio_net_hdr` against a
//! frame, and when Sluice accepts it, run the packet through `tx_prepare` for a fuzzed device.
//! Nothing may panic; an accepted header re-encodes; a prepared packet's frames stay within the
//! output.
//!
//! Input: byte 0 picks the header format (low 2 bits) and multi-tag; bytes 1–4 the device's
//! features (low 28 bits); bytes 5–6 the MTU; byte 7 the envelope; then the 24 header bytes
//! (only the format's length is used), then the frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_offload::features::{Device, Feature, Features};
use sluice_offload::tx::{tx_prepare, TxOutcome, TxOutput, TxPacket};
use sluice_packet::virtio::{HdrFormat, VirtioNetHdr};
use sluice_wire::{parse_partial, ParseConfig};

fuzz_target!(|data: &[u8]| {
    if data.len() < 32 {
        return;
    }
    let (head, frame) = data.split_at(32);
    let fmt = match head[0] & 3 {
        0 => HdrFormat::V0,
        1 => HdrFormat::V1,
        _ => HdrFormat::V1HashTunnel,
    };
    let bits = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
    let mut features = Features::NONE;
    for (i, f) in Feature::ALL.iter().enumerate() {
        if bits & (1 << i) != 0 {
            features = features | Features::of(*f);
        }
    }
    let mut dev = Device::new(features)
        .with_mtu(u32::from(u16::from_le_bytes([head[5], head[6]])))
        .with_envelope(u32::from(head[7]));
    // VLAN depth 0 to 3 (3 and above behave alike for the fuzzer's frames).
    dev.vlan_depth = (head[0] >> 2) & 3;
    let Ok(h) = VirtioNetHdr::decode(&head[8..], fmt) else {
        return;
    };
    let (layout, _) = parse_partial(frame, &ParseConfig::DEFAULT);
    let Ok(meta) = h.to_meta(fmt, frame, &layout) else {
        return;
    };
    let mut raw = [0u8; 24];
    assert_eq!(h.encode(fmt, &mut raw), Ok(fmt.size()));
    let _ = VirtioNetHdr::from_meta(&meta, frame, fmt);
    let mut out = TxOutput::new();
    if let TxOutcome::Prepared { frames, .. } =
        tx_prepare(&TxPacket::new(frame, meta), &dev, &mut out)
    {
        assert_eq!(frames, out.len());
    }
});
