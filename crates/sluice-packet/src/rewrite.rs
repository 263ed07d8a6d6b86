//! Byte-level header rewrites that keep every checksum as honest as the metadata says.
//!
//! Each setter changes a header field of the outer or inner stack of a frame and then moves
//! every checksum that covers the changed bytes, following the [`RewritePlan`] of the matching
//! [`OffloadMeta`] event (see the state table in [`crate::meta`]):
//!
//! - `Good`, `Unknown`, `Bad`: an exact incremental update (RFC 1624; for SCTP, a CRC32c recompute
//!   that XORs the old error back in), so a correct checksum stays correct and a wrong one stays
//!   exactly as wrong. Statuses never change.
//! - `Partial` L4: a port is left to the device; an address change moves the stored
//!   pseudo-header sum. `Partial` IPv4 header: left to the device.
//! - Absent checksums stay absent: those the metadata flags ([`OffloadMeta::csum_absent`]) and
//!   those the frame shows (UDP zero, GRE without the C bit), even when the metadata does not
//!   know. A UDP checksum that an update brings to zero is written as `0xffff` (RFC 768).
//! - An inner rewrite also moves the outer tunnel checksum (outer UDP or GRE), which covers the
//!   inner headers. An outer checksum over a `Partial` inner header is kept as it will be once
//!   that header is filled (local checksum offload): changes inside the partial region are
//!   compensated by the fill and not applied, and a pseudo-header change is.
//!
//! Every function checks its offsets against the frame before writing anything: an `Err`
//! leaves the frame untouched. The metadata must describe the frame (the IP version nibble is
//! checked as a guard against stale metadata).

use crate::calc::{self, L4Region};
use crate::error::Error;
use crate::meta::{self, CsumStatus, Fixup, Level, OffloadMeta, RewritePlan, Slot};
use sluice_checksum::incremental::update16;
use sluice_wire::bytes::{read_u16, write_u16};
use sluice_wire::{ip_proto, L3Kind};

/// Sets the IPv4 source address of `level`.
///
/// ```
/// use sluice_packet::{rewrite, verify::verify_frame, Level, OffloadMeta, Slot, Verdict};
/// let mut frame = vec![
///     0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, // Ethernet, IPv4
///     0x45, 0, 0, 32, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4, UDP
///     0x04, 0xd2, 0, 53, 0, 12, 0, 0, b'p', b'i', b'n', b'g', // UDP 1234 -> 53, "ping"
/// ];
/// let layout = sluice_wire::parse(&frame).unwrap();
/// let mut meta = OffloadMeta::from_layout(&layout);
/// rewrite::recompute_checksum(&mut frame, &mut meta, Slot::OuterIp).unwrap();
/// rewrite::recompute_checksum(&mut frame, &mut meta, Slot::OuterL4).unwrap();
///
/// // Source NAT: the address changes and both checksums (IPv4 header, UDP) stay correct.
/// rewrite::set_ipv4_src(&mut frame, &meta, Level::Outer, [192, 168, 1, 1]).unwrap();
/// assert_eq!(frame[26..30], [192, 168, 1, 1]);
/// let v = verify_frame(&frame, &layout);
/// assert_eq!((v.ip, v.l4), (Verdict::Good, Verdict::Good));
/// ```
pub fn set_ipv4_src(
    frame: &mut [u8],
    meta: &OffloadMeta,
    level: Level,
    addr: [u8; 4],
) -> Result<(), Error> {
    set_addr(frame, meta, level, L3Kind::Ipv4, 12, &addr)
}

/// Sets the IPv4 destination address of `level`.
pub fn set_ipv4_dst(
    frame: &mut [u8],
    meta: &OffloadMeta,
    level: Level,
    addr: [u8; 4],
) -> Result<(), Error> {
    set_addr(frame, meta, level, L3Kind::Ipv4, 16, &addr)
}

/// Sets the IPv6 source address of `level`.
pub fn set_ipv6_src(
    frame: &mut [u8],
    meta: &OffloadMeta,
    level: Level,
    addr: [u8; 16],
) -> Result<(), Error> {
    set_addr(frame, meta, level, L3Kind::Ipv6, 8, &addr)
}

/// Sets the IPv6 destination address of `level`.
pub fn set_ipv6_dst(
    frame: &mut [u8],
    meta: &OffloadMeta,
    level: Level,
    addr: [u8; 16],
) -> Result<(), Error> {
    set_addr(frame, meta, level, L3Kind::Ipv6, 24, &addr)
}

/// Writes an address at `at` bytes into the IP header of `level` and moves every checksum that
/// covers it (the one body behind the four address setters).
fn set_addr(
    frame: &mut [u8],
    meta: &OffloadMeta,
    level: Level,
    kind: L3Kind,
    at: usize,
    addr: &[u8],
) -> Result<(), Error> {
    let l3 = ip_header(frame, meta, level, kind)?;
    rewrite(
        frame,
        meta,
        level,
        meta.l3_addr_rewritten(level),
        l3 + at,
        addr,
    )
}

/// Sets the TCP, UDP or SCTP source and/or destination port of `level` (`None` keeps a port).
///
/// ```
/// use sluice_packet::{rewrite, verify::verify_frame, Level, OffloadMeta, Slot, Verdict};
/// let mut frame = vec![
///     0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, // Ethernet, IPv4
///     0x45, 0, 0, 32, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4, UDP
///     0x04, 0xd2, 0, 53, 0, 12, 0, 0, b'p', b'i', b'n', b'g', // UDP 1234 -> 53, "ping"
/// ];
/// let layout = sluice_wire::parse(&frame).unwrap();
/// let mut meta = OffloadMeta::from_layout(&layout);
/// rewrite::recompute_checksum(&mut frame, &mut meta, Slot::OuterL4).unwrap();
/// rewrite::set_ports(&mut frame, &meta, Level::Outer, None, Some(5353)).unwrap();
/// assert_eq!(frame[34..38], [0x04, 0xd2, 0x14, 0xe9]); // 1234 kept, 53 -> 5353
/// assert_eq!(verify_frame(&frame, &layout).l4, Verdict::Good);
/// ```
pub fn set_ports(
    frame: &mut [u8],
    meta: &OffloadMeta,
    level: Level,
    src: Option<u16>,
    dst: Option<u16>,
) -> Result<(), Error> {
    let l4 = l4_header(frame, meta, level)?;
    match meta.l4_proto(level) {
        Some(ip_proto::TCP | ip_proto::UDP | ip_proto::SCTP) => {}
        _ => {
            return Err(Error::Unsupported(
                "ports of a protocol other than TCP, UDP, SCTP",
            ))
        }
    }
    let old_src = read_u16(frame, l4).ok_or_else(|| trunc(l4 + 4, frame))?;
    let old_dst = read_u16(frame, l4 + 2).ok_or_else(|| trunc(l4 + 4, frame))?;
    let [a, b] = src.unwrap_or(old_src).to_be_bytes();
    let [c, d] = dst.unwrap_or(old_dst).to_be_bytes();
    rewrite(
        frame,
        meta,
        level,
        meta.l4_field_rewritten(level),
        l4,
        &[a, b, c, d],
    )
}

/// Sets the IPv4 TTL (or the IPv6 hop limit) of `level`.
///
/// ```
/// use sluice_packet::{rewrite, verify::verify_frame, Level, OffloadMeta, Slot, Verdict};
/// let mut frame = vec![
///     0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, // Ethernet, IPv4
///     0x45, 0, 0, 32, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4, UDP
///     0x04, 0xd2, 0, 53, 0, 12, 0, 0, b'p', b'i', b'n', b'g', // UDP 1234 -> 53, "ping"
/// ];
/// let layout = sluice_wire::parse(&frame).unwrap();
/// let mut meta = OffloadMeta::from_layout(&layout);
/// rewrite::recompute_checksum(&mut frame, &mut meta, Slot::OuterIp).unwrap();
/// rewrite::set_ttl(&mut frame, &meta, Level::Outer, 63).unwrap();
/// assert_eq!(frame[22], 63);
/// assert_eq!(verify_frame(&frame, &layout).ip, Verdict::Good);
/// ```
pub fn set_ttl(frame: &mut [u8], meta: &OffloadMeta, level: Level, ttl: u8) -> Result<(), Error> {
    let kind = meta
        .l3_kind(level)
        .ok_or(Error::MissingHeader(Slot::ip(level)))?;
    let l3 = ip_header(frame, meta, level, kind)?;
    // The 16-bit word holding the field: (TTL, protocol) in IPv4, (next header, hop limit) in IPv6.
    let (at, new) = match kind {
        L3Kind::Ipv4 => (l3 + 8, [ttl, byte(frame, l3 + 9)?]),
        L3Kind::Ipv6 => (l3 + 6, [byte(frame, l3 + 6)?, ttl]),
    };
    rewrite(frame, meta, level, meta.ttl_rewritten(level), at, &new)
}

/// Sets the DSCP (0–63) of `level`, keeping the ECN bits.
pub fn set_dscp(frame: &mut [u8], meta: &OffloadMeta, level: Level, dscp: u8) -> Result<(), Error> {
    if dscp > 63 {
        return Err(Error::InvalidArgument("DSCP is a 6-bit value"));
    }
    let kind = meta
        .l3_kind(level)
        .ok_or(Error::MissingHeader(Slot::ip(level)))?;
    let l3 = ip_header(frame, meta, level, kind)?;
    let (b0, b1) = (byte(frame, l3)?, byte(frame, l3 + 1)?);
    let new = match kind {
        L3Kind::Ipv4 => [b0, (dscp << 2) | (b1 & 0x03)],
        L3Kind::Ipv6 => {
            // Traffic class = low nibble of byte 0, high nibble of byte 1.
            let ecn = (b1 >> 4) & 0x03;
            let tc = (dscp << 2) | ecn;
            [(b0 & 0xf0) | (tc >> 4), ((tc & 0x0f) << 4) | (b1 & 0x0f)]
        }
    };
    rewrite(frame, meta, level, meta.dscp_rewritten(level), l3, &new)
}

/// Writes the pseudo-header sum (folded, uncomplemented, with the real L4 length) into the
/// checksum field of the partial L4 slot ([`OffloadMeta::partial_slot`]), as a device filling
/// from `csum_start` expects. Protocols without a pseudo-header (SCTP, ICMP, GRE) get a zero
/// field. An outer tunnel checksum is not touched: it already describes the filled packet.
pub fn seed_partial(frame: &mut [u8], meta: &OffloadMeta) -> Result<(), Error> {
    let slot = meta
        .partial_slot()
        .ok_or(Error::InvalidArgument("no partial L4 checksum"))?;
    let level = slot.level();
    let region = l4_region(frame, meta, level)?;
    if region.proto == ip_proto::SCTP {
        let have = frame.len();
        let f = frame
            .get_mut(region.field..region.field + 4)
            .ok_or(Error::Truncated {
                need: region.field + 4,
                have,
            })?;
        f.fill(0);
        return Ok(());
    }
    let value = region.pseudo.unwrap_or(0);
    write_u16(frame, region.field, value).map_err(|_| trunc(region.field + 2, frame))
}

/// A merged GSO packet's innermost L4 checksum left partial, as Linux's `tcp_gro_complete`
/// leaves `CHECKSUM_PARTIAL` (the field then holds the pseudo-header sum), so a segmenting
/// egress takes the packet as it is instead of copying it to seed the field. Only a GSO packet
/// whose innermost L4 checksum is `Good`; returns whether it changed (on error nothing does).
pub fn defer_gso_l4_checksum(frame: &mut [u8], meta: &mut OffloadMeta) -> bool {
    if meta.gso_type() == crate::GsoType::None {
        return false;
    }
    let level = if meta.tunnel().is_some() {
        Level::Inner
    } else {
        Level::Outer
    };
    meta.status(Slot::l4(level)) == CsumStatus::Good
        && defer_l4_checksum(frame, meta, level).is_ok()
}

/// [`OffloadMeta::l4_checksum_deferred`] and, when it asks for it, [`seed_partial`]. On error
/// neither the metadata nor the frame changes.
pub fn defer_l4_checksum(
    frame: &mut [u8],
    meta: &mut OffloadMeta,
    level: Level,
) -> Result<(), Error> {
    // Resolve the region first so that a frame that does not fit changes nothing.
    l4_region(frame, meta, level)?;
    let mut next = *meta;
    if next.l4_checksum_deferred(level)? == Fixup::Seed {
        seed_partial(frame, &next)?;
    }
    *meta = next;
    Ok(())
}

/// Recomputes the checksum of `slot` in full, in software, writes it and marks the slot `Good`
/// ([`OffloadMeta::checksum_recomputed`]). This is the only way out of `Bad`: call it only for a
/// packet you built yourself, or one you have explicitly decided to repair. An inner recompute
/// also moves the outer tunnel checksum (unless the slot was `Partial`, whose fill the outer
/// checksum already assumes). IPv6 headers have no checksum (`Unsupported`).
///
/// ```
/// use sluice_packet::{rewrite, verify::verify_frame, CsumStatus, OffloadMeta, Slot, Verdict};
/// let mut frame = vec![
///     0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, // Ethernet, IPv4
///     0x45, 0, 0, 32, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4, UDP
///     0x04, 0xd2, 0, 53, 0, 12, 0, 0, b'p', b'i', b'n', b'g', // UDP 1234 -> 53, "ping"
/// ];
/// let layout = sluice_wire::parse(&frame).unwrap();
/// let mut meta = OffloadMeta::from_layout(&layout);
/// rewrite::recompute_checksum(&mut frame, &mut meta, Slot::OuterL4).unwrap();
/// assert_eq!(meta.status(Slot::OuterL4), CsumStatus::Good);
/// assert_ne!(frame[40..42], [0, 0]);
/// assert_eq!(verify_frame(&frame, &layout).l4, Verdict::Good);
/// ```
pub fn recompute_checksum(
    frame: &mut [u8],
    meta: &mut OffloadMeta,
    slot: Slot,
) -> Result<(), Error> {
    let level = slot.level();
    if level == Level::Inner && meta.tunnel().is_none() {
        return Err(Error::NotTunnelled);
    }
    let mut changes = Changes::default();
    if slot.is_l4() {
        let region = l4_region(frame, meta, level)?;
        match region.proto {
            ip_proto::SCTP => {
                let crc = region
                    .sctp_crc(frame)
                    .ok_or_else(|| trunc(region.end, frame))?;
                let [a, b, c, d] = crc.to_be_bytes();
                write_words(frame, region.field, &[a, b, c, d], &mut changes)?;
            }
            ip_proto::GRE if byte(frame, region.start)? & 0x80 == 0 => {
                return Err(Error::Unsupported("GRE header without checksum"));
            }
            _ => {
                let c = region
                    .compute(frame)
                    .ok_or_else(|| trunc(region.end, frame))?;
                write_words(frame, region.field, &c.to_be_bytes(), &mut changes)?;
            }
        }
    } else {
        let l3 = ip_header(frame, meta, level, L3Kind::Ipv4)
            .map_err(|_| Error::Unsupported("only IPv4 headers have a checksum"))?;
        let c = calc::ipv4_header_compute(frame, l3).ok_or_else(|| trunc(l3 + 20, frame))?;
        write_words(frame, l3 + 10, &c.to_be_bytes(), &mut changes)?;
    }
    if meta.status(slot) != CsumStatus::Partial {
        let plan = meta.l4_field_rewritten(level);
        update_tunnel(frame, meta, level, plan.tunnel, &changes, None)?;
    }
    meta.checksum_recomputed(slot);
    Ok(())
}

// ---- the core ----

const MAX_CHANGES: usize = 16;

/// A 16-bit word of the frame that changed (offset, old value, new value).
#[derive(Debug, Clone, Copy, Default)]
struct Change {
    off: usize,
    old: u16,
    new: u16,
}

#[derive(Debug, Default)]
struct Changes {
    items: [Change; MAX_CHANGES],
    len: usize,
}

impl Changes {
    fn push(&mut self, c: Change) -> Result<(), Error> {
        let slot = self
            .items
            .get_mut(self.len)
            .ok_or(Error::InvalidArgument("too many changes"))?;
        *slot = c;
        self.len += 1;
        Ok(())
    }

    fn as_slice(&self) -> &[Change] {
        self.items.get(..self.len).unwrap_or(&[])
    }
}

fn trunc(need: usize, frame: &[u8]) -> Error {
    Error::Truncated {
        need,
        have: frame.len(),
    }
}

fn byte(frame: &[u8], off: usize) -> Result<u8, Error> {
    frame.get(off).copied().ok_or_else(|| trunc(off + 1, frame))
}

/// The IP header offset of `level`, checked to be of `kind` in the frame.
fn ip_header(frame: &[u8], meta: &OffloadMeta, level: Level, kind: L3Kind) -> Result<usize, Error> {
    if level == Level::Inner && meta.tunnel().is_none() {
        return Err(Error::NotTunnelled);
    }
    let l3 = usize::from(
        meta.offsets()
            .l3(level)
            .ok_or(Error::MissingHeader(Slot::ip(level)))?,
    );
    if meta.l3_kind(level) != Some(kind) {
        return Err(Error::Unsupported("IP version does not match the metadata"));
    }
    let ok = match kind {
        L3Kind::Ipv4 => calc::ipv4_hdr_len(frame, l3).is_some(),
        L3Kind::Ipv6 => frame
            .get(l3..l3 + 40)
            .is_some_and(|h| h.first().is_some_and(|b| b >> 4 == 6)),
    };
    if !ok {
        return Err(Error::InvalidArgument(
            "no IP header of that version at the metadata's offset",
        ));
    }
    Ok(l3)
}

/// The L4 header offset of `level`.
fn l4_header(frame: &[u8], meta: &OffloadMeta, level: Level) -> Result<usize, Error> {
    if level == Level::Inner && meta.tunnel().is_none() {
        return Err(Error::NotTunnelled);
    }
    let l4 = usize::from(
        meta.offsets()
            .l4(level)
            .ok_or(Error::MissingHeader(Slot::l4(level)))?,
    );
    if frame.len() < l4 + 8 {
        return Err(trunc(l4 + 8, frame));
    }
    Ok(l4)
}

/// The checksummed L4 region of `level`, resolved against the frame.
fn l4_region(frame: &[u8], meta: &OffloadMeta, level: Level) -> Result<L4Region, Error> {
    let kind = meta
        .l3_kind(level)
        .ok_or(Error::MissingHeader(Slot::ip(level)))?;
    let l3 = ip_header(frame, meta, level, kind)?;
    let l4 = l4_header(frame, meta, level)?;
    let proto = meta
        .l4_proto(level)
        .ok_or(Error::MissingHeader(Slot::l4(level)))?;
    let end = calc::l3_end(frame, l3, kind)
        .ok_or(Error::InvalidArgument("IP length does not fit the frame"))?;
    L4Region::new(frame, l3, kind, l4, proto, end).ok_or(Error::Unsupported(
        "L4 header without a checksum, or one that does not fit",
    ))
}

/// Writes `new` (an even number of bytes at a word-aligned offset) and records each changed word.
fn write_words(
    frame: &mut [u8],
    at: usize,
    new: &[u8],
    changes: &mut Changes,
) -> Result<(), Error> {
    let end = at + new.len();
    let have = frame.len();
    let dst = frame
        .get_mut(at..end)
        .ok_or(Error::Truncated { need: end, have })?;
    let mut old = [0u8; 2];
    for (i, (d, n)) in dst.chunks_exact_mut(2).zip(new.chunks_exact(2)).enumerate() {
        old.copy_from_slice(d);
        d.copy_from_slice(n);
        let mut w = [0u8; 2];
        w.copy_from_slice(n);
        let (o, w) = (u16::from_be_bytes(old), u16::from_be_bytes(w));
        if o != w {
            changes.push(Change {
                off: at + 2 * i,
                old: o,
                new: w,
            })?;
        }
    }
    Ok(())
}

/// Where the L4 checksum of a level gets its update, resolved before anything is written.
enum L4Target {
    None,
    Ones {
        field: usize,
        udp: bool,
        partial: bool,
    },
    Sctp {
        region: L4Region,
        error: u32,
    },
}

/// Changes `new.len()` bytes at `at` (word-aligned within its header) and moves the checksums
/// as `plan` says.
fn rewrite(
    frame: &mut [u8],
    meta: &OffloadMeta,
    level: Level,
    plan: RewritePlan,
    at: usize,
    new: &[u8],
) -> Result<(), Error> {
    if new.len() & 1 != 0 || frame.get(at..at + new.len()).is_none() {
        return Err(trunc(at + new.len(), frame));
    }
    // Resolve every target before writing, so an error leaves the frame untouched.
    let ip_field = match plan.ip {
        Fixup::Incremental => {
            let l3 = ip_header(frame, meta, level, L3Kind::Ipv4)?;
            Some(l3 + 10)
        }
        _ => None,
    };
    let l4 = match plan.l4 {
        Fixup::Incremental | Fixup::PseudoSum => l4_target(frame, meta, level, plan.l4)?,
        Fixup::Nothing | Fixup::Seed => L4Target::None,
    };
    tunnel_field(frame, meta, plan.tunnel)?;

    let mut changes = Changes::default();
    write_words(frame, at, new, &mut changes)?;
    let originals = changes.len;

    if let Some(field) = ip_field {
        let old = read_u16(frame, field).ok_or_else(|| trunc(field + 2, frame))?;
        let mut c = old;
        for ch in changes.as_slice() {
            c = update16(c, ch.old, ch.new);
        }
        write_words(frame, field, &c.to_be_bytes(), &mut changes)?;
    }

    // The virtual change of a partial inner L4 region's final sum (see update_tunnel).
    let mut virtual_change = None;
    match l4 {
        L4Target::None => {}
        L4Target::Ones {
            field,
            udp,
            partial,
        } => {
            let old = read_u16(frame, field).ok_or_else(|| trunc(field + 2, frame))?;
            let mut c = old;
            for ch in changes.as_slice().get(..originals).unwrap_or(&[]) {
                c = if partial {
                    !update16(!c, ch.old, ch.new)
                } else {
                    update16(c, ch.old, ch.new)
                };
            }
            if udp && !partial && c == 0 {
                c = 0xffff;
            }
            if partial {
                virtual_change = Some(Change {
                    off: field,
                    old: !old,
                    new: !c,
                });
            }
            write_words(frame, field, &c.to_be_bytes(), &mut changes)?;
        }
        L4Target::Sctp { region, error } => {
            let crc = region
                .sctp_crc(frame)
                .ok_or_else(|| trunc(region.end, frame))?
                ^ error;
            let [a, b, c, d] = crc.to_be_bytes();
            write_words(frame, region.field, &[a, b, c, d], &mut changes)?;
        }
    }
    update_tunnel(frame, meta, level, plan.tunnel, &changes, virtual_change)
}

fn l4_target(
    frame: &[u8],
    meta: &OffloadMeta,
    level: Level,
    fixup: Fixup,
) -> Result<L4Target, Error> {
    let l4 = l4_header(frame, meta, level)?;
    let proto = meta
        .l4_proto(level)
        .ok_or(Error::MissingHeader(Slot::l4(level)))?;
    let partial = fixup == Fixup::PseudoSum;
    match proto {
        ip_proto::SCTP if partial => Ok(L4Target::None),
        ip_proto::SCTP => {
            let region = l4_region(frame, meta, level)?;
            let stored = region
                .sctp_stored(frame)
                .ok_or_else(|| trunc(region.field + 4, frame))?;
            let correct = region
                .sctp_crc(frame)
                .ok_or_else(|| trunc(region.end, frame))?;
            Ok(L4Target::Sctp {
                region,
                error: stored ^ correct,
            })
        }
        _ => {
            let off =
                meta::l4_csum_field(proto).ok_or(Error::Unsupported("L4 without checksum"))?;
            let field = l4 + usize::from(off);
            let value = read_u16(frame, field).ok_or_else(|| trunc(field + 2, frame))?;
            let udp = proto == ip_proto::UDP;
            if udp && value == 0 && !partial {
                return Ok(L4Target::None); // no checksum (RFC 768): stays absent
            }
            Ok(L4Target::Ones {
                field,
                udp,
                partial,
            })
        }
    }
}

/// The outer tunnel checksum field to update: `(field offset, region start, is UDP)`, or `None`
/// when there is nothing to update (no plan, absent in the frame).
fn tunnel_field(
    frame: &[u8],
    meta: &OffloadMeta,
    fixup: Fixup,
) -> Result<Option<(usize, usize, bool)>, Error> {
    if fixup != Fixup::Incremental {
        return Ok(None);
    }
    let start = usize::from(
        meta.offsets()
            .outer_l4
            .ok_or(Error::MissingHeader(Slot::OuterL4))?,
    );
    match meta.l4_proto(Level::Outer) {
        Some(ip_proto::UDP) => {
            let v = read_u16(frame, start + 6).ok_or_else(|| trunc(start + 8, frame))?;
            Ok((v != 0).then_some((start + 6, start, true)))
        }
        Some(ip_proto::GRE) => {
            if byte(frame, start)? & 0x80 == 0 {
                return Ok(None);
            }
            read_u16(frame, start + 4).ok_or_else(|| trunc(start + 6, frame))?;
            Ok(Some((start + 4, start, false)))
        }
        _ => Ok(None),
    }
}

/// Moves the outer tunnel checksum by the inner changes. Changes inside a `Partial` inner region
/// (the inner L4 from its start, or a partial inner IPv4 header) are compensated by the fill and
/// skipped; `virtual_change` is the change of the partial L4 region's final sum (the complement
/// of its pseudo-header sum). Words at an odd offset from the tunnel checksum's start are
/// byte-swapped (RFC 1071 byte-order independence).
fn update_tunnel(
    frame: &mut [u8],
    meta: &OffloadMeta,
    level: Level,
    fixup: Fixup,
    changes: &Changes,
    virtual_change: Option<Change>,
) -> Result<(), Error> {
    if level != Level::Inner {
        return Ok(());
    }
    let Some((field, start, udp)) = tunnel_field(frame, meta, fixup)? else {
        return Ok(());
    };
    let o = meta.offsets();
    let l4_partial = meta.status(Slot::InnerL4) == CsumStatus::Partial;
    let ip_partial = meta.status(Slot::InnerIp) == CsumStatus::Partial;
    let in_partial = |off: usize| {
        let il4 = o.inner_l4.map(usize::from);
        let il3 = o.inner_l3.map(usize::from);
        let in_l4 = il4.is_some_and(|s| off >= s);
        let in_ip = il3.is_some_and(|s| off >= s) && il4.is_none_or(|e| off < e);
        (l4_partial && in_l4) || (ip_partial && in_ip)
    };
    let mut c = read_u16(frame, field).ok_or_else(|| trunc(field + 2, frame))?;
    let applied = changes.as_slice().iter().filter(|ch| !in_partial(ch.off));
    for ch in applied.chain(virtual_change.iter()) {
        let odd = ch.off.wrapping_sub(start) & 1 == 1;
        let (old, new) = if odd {
            (ch.old.swap_bytes(), ch.new.swap_bytes())
        } else {
            (ch.old, ch.new)
        };
        c = update16(c, old, new);
    }
    if udp && c == 0 {
        c = 0xffff;
    }
    write_u16(frame, field, c).map_err(|_| trunc(field + 2, frame))
}
