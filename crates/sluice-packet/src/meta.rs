//! [`OffloadMeta`]: what Sluice knows about a packet's checksums, headers and segmentation, and the
//! state machine that keeps that knowledge true while the packet is rewritten, tunnelled and
//! untunnelled.
//!
//! # Checksum statuses
//!
//! Each packet has four checksum slots ([`Slot`]): the outer (or only) IP header, the outer L4
//! checksum, and, inside a tunnel, the inner IP header and the inner L4 checksum. Each holds a
//! [`CsumStatus`]:
//!
//! - `Unknown`: nobody checked. The bytes are forwarded as they are.
//! - `Good`: the checksum field is correct for the bytes it covers (verified, or computed by us).
//!   A UDP header with a zero checksum (no checksum, RFC 768), where that is allowed, is `Good` and
//!   additionally flagged *absent* ([`OffloadMeta::csum_absent`]): there is nothing to verify or to
//!   fill, and every rewrite leaves the zero in place.
//! - `Bad`: the checksum was verified and is wrong. The packet must reach the wire (or the
//!   guest) still wrong: nothing Sluice does may turn corruption into a valid-looking packet.
//! - `Partial`: the header was built or verified correctly but the checksum field is *not final*:
//!   for an L4 checksum it holds the (uncomplemented) pseudo-header sum as a device expects, and
//!   [`OffloadMeta::csum_start`]/[`OffloadMeta::csum_offset`] locate it; for an IPv4 header it
//!   means the device fills the header checksum. `Partial` is never reported as `Good`.
//!
//! # The state table
//!
//! Rows are the current status of one slot, columns the event; a cell gives the next status and,
//! for rewrites, the [`Fixup`] the checksum field needs (what [`crate::rewrite`] does to the
//! bytes).
//!
//! | status \ event | rx `Good` | rx `Bad` | rx `None` | rx NEEDS_CSUM | covered field rewritten | address rewritten (L4, pseudo-header) | defer L4 | software recompute | encap / decap / VLAN |
//! |---|---|---|---|---|---|---|---|---|---|
//! | `Unknown` | `Good` | `Bad` | `Unknown` | `Partial` | `Unknown`, incremental | `Unknown`, incremental | `Unknown`, refused | `Good` | `Unknown` (moves) |
//! | `Bad` | `Bad` | `Bad` | `Bad` | `Bad` | `Bad`, incremental | `Bad`, incremental | `Bad`, refused | `Good` | `Bad` (moves) |
//! | `Good` | `Good` | `Bad` | `Good` | `Partial` | `Good`, incremental | `Good`, incremental | `Partial`, seed | `Good` | `Good` (moves) |
//! | `Partial` | `Partial` | `Partial` | `Partial` | `Partial` | `Partial`, nothing | `Partial`, pseudo-sum update | `Partial`, nothing | `Good` | `Partial` (moves) |
//!
//! Why:
//!
//! - **rx verdicts** ([`OffloadMeta::rx_verdict`], [`OffloadMeta::apply_verdicts`],
//!   [`OffloadMeta::rx_checksum_unnecessary`]) only ever add knowledge. `Bad` is sticky: a later
//!   `Good` (say, a device that checked something else) does not clear it, while a later `Bad`
//!   overrides a `Good` because a single failed check proves corruption. A `Partial` field holds
//!   a pseudo-header sum, which any checker reports as wrong, so verdicts on it are ignored.
//! - **rx NEEDS_CSUM** (virtio `VIRTIO_NET_HDR_F_NEEDS_CSUM`, [`OffloadMeta::rx_needs_csum`]): the
//!   sender says the field is not final, so `Partial` is the truth — except for `Bad`, which
//!   stays `Bad` so that a device recompute cannot launder it.
//! - **rewrites** ([`OffloadMeta::l4_field_rewritten`], [`OffloadMeta::l3_addr_rewritten`],
//!   [`OffloadMeta::ttl_rewritten`], [`OffloadMeta::dscp_rewritten`]) never change a status.
//!   An RFC 1624 incremental update is exact: it moves the field by exactly the change in the
//!   covered bytes, so a correct checksum stays correct (`Good` stays `Good` at O(1) cost, with no
//!   need to make it `Partial` and pay for a full pass on devices without checksum offload), and a
//!   wrong one stays wrong by the same amount (`Unknown` and `Bad` keep their meaning). For a
//!   `Partial` L4 field only the pseudo-header part is ours to maintain: a port change is summed
//!   by the device later, an address change moves the stored pseudo-header sum. A `Partial` IPv4
//!   header checksum is the device's to fill. Inner rewrites also move an outer tunnel checksum
//!   (UDP or GRE), which covers the inner headers. SCTP's CRC32c is not incremental: Sluice
//!   recomputes it and XORs back the old error, which is just as exact.
//! - **defer L4** ([`OffloadMeta::l4_checksum_deferred`]): turn a `Good` L4 checksum into
//!   `Partial` (e.g. before segmentation) and seed the pseudo-header sum. Refused for `Unknown`
//!   and `Bad`: a device fill would make unverified or corrupt data look valid.
//! - **software recompute** ([`OffloadMeta::checksum_recomputed`],
//!   [`crate::rewrite::recompute_checksum`]): the only way out of `Bad`. The caller asks for it
//!   explicitly, for a packet it built itself (or one it has decided to repair); it is never done
//!   implicitly.
//! - **encapsulation** ([`OffloadMeta::encapsulate`]) moves the outer statuses to the inner slots
//!   unchanged and gives the new outer headers the statuses the caller built them with;
//!   **decapsulation** ([`OffloadMeta::decapsulate`]) moves the inner statuses back out and clears
//!   the inner slots; **VLAN** push/pop ([`OffloadMeta::vlan_pushed`],
//!   [`OffloadMeta::vlan_popped`]) only shift offsets: a tag lies outside every checksum.
//!
//! # The partial checksum location
//!
//! Like `virtio_net_hdr` and the kernel's `csum_start`/`csum_offset`, there is one location. It
//! refers to the *innermost* `Partial` L4 checksum. When both the inner and the outer L4 are
//! `Partial`, the inner is filled first by the device (or by software), and the outer tunnel
//! checksum is then cheap to complete in software without touching the payload (local checksum
//! offload: a completed inner L4 region sums to the complement of its pseudo-header), which is
//! what Linux does; the filling order could not be the other way round, because the outer sum
//! covers the inner checksum field.

use crate::error::Error;
use crate::verify::{Verdict, Verdicts};
use sluice_wire::{ip_proto, Headers, L3Kind, Layout, TunnelKind};

/// The status of one checksum. See the [module documentation](self) for the state table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CsumStatus {
    /// Nobody has checked it; it is forwarded as it is.
    #[default]
    Unknown,
    /// Checked and wrong. Never made `Good` except by an explicit software recompute.
    Bad,
    /// Correct for the bytes it covers (or absent where absence is allowed).
    Good,
    /// Not final: a device (or `tx_prepare`) must fill it before the wire. For an L4 checksum the
    /// field holds the pseudo-header sum. Never reported as `Good`.
    Partial,
}

/// One of the two header stacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Level {
    /// The outer (or only) stack.
    Outer,
    /// The stack inside the tunnel.
    Inner,
}

/// One of the four checksum slots of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Slot {
    /// The outer (or only) IP header checksum (IPv4 only; IPv6 has none).
    OuterIp,
    /// The outer (or only) L4 checksum (TCP, UDP, SCTP, ICMP, ICMPv6, or the GRE checksum).
    OuterL4,
    /// The inner IP header checksum.
    InnerIp,
    /// The inner L4 checksum.
    InnerL4,
}

impl Slot {
    /// All slots, outermost first.
    pub const ALL: [Slot; 4] = [Slot::OuterIp, Slot::OuterL4, Slot::InnerIp, Slot::InnerL4];

    /// The IP slot of a level.
    pub const fn ip(level: Level) -> Slot {
        match level {
            Level::Outer => Slot::OuterIp,
            Level::Inner => Slot::InnerIp,
        }
    }

    /// The L4 slot of a level.
    pub const fn l4(level: Level) -> Slot {
        match level {
            Level::Outer => Slot::OuterL4,
            Level::Inner => Slot::InnerL4,
        }
    }

    /// The level this slot belongs to.
    pub const fn level(self) -> Level {
        match self {
            Slot::OuterIp | Slot::OuterL4 => Level::Outer,
            Slot::InnerIp | Slot::InnerL4 => Level::Inner,
        }
    }

    /// Whether this is an L4 slot.
    pub const fn is_l4(self) -> bool {
        matches!(self, Slot::OuterL4 | Slot::InnerL4)
    }

    const fn index(self) -> usize {
        match self {
            Slot::OuterIp => 0,
            Slot::OuterL4 => 1,
            Slot::InnerIp => 2,
            Slot::InnerL4 => 3,
        }
    }
}

/// The kind of segmentation offload requested for a packet (`virtio_net_hdr` `gso_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GsoType {
    /// Not a GSO packet.
    #[default]
    None,
    /// TCP over IPv4 (TSO).
    TcpV4,
    /// TCP over IPv6 (TSO6).
    TcpV6,
    /// UDP L4 segmentation (`GSO_UDP_L4`): every segment is a UDP datagram.
    UdpL4,
    /// UDP fragmentation offload (UFO): one datagram split into IP fragments.
    Udp,
}

/// Header offsets of a packet, as byte offsets from the start of the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Offsets {
    /// Outer Ethernet header.
    pub outer_l2: Option<u16>,
    /// Outer IP header.
    pub outer_l3: Option<u16>,
    /// Outer L4 header (for GRE tunnels: the GRE header).
    pub outer_l4: Option<u16>,
    /// Inner Ethernet header (`None` for GRE carrying IP).
    pub inner_l2: Option<u16>,
    /// Inner IP header.
    pub inner_l3: Option<u16>,
    /// Inner L4 header.
    pub inner_l4: Option<u16>,
}

impl Offsets {
    /// The L3 offset of a level.
    pub const fn l3(&self, level: Level) -> Option<u16> {
        match level {
            Level::Outer => self.outer_l3,
            Level::Inner => self.inner_l3,
        }
    }

    /// The L4 offset of a level.
    pub const fn l4(&self, level: Level) -> Option<u16> {
        match level {
            Level::Outer => self.outer_l4,
            Level::Inner => self.inner_l4,
        }
    }

    /// The offset of a slot's header (its IP or its L4 header).
    pub const fn of(&self, slot: Slot) -> Option<u16> {
        match slot {
            Slot::OuterIp => self.outer_l3,
            Slot::OuterL4 => self.outer_l4,
            Slot::InnerIp => self.inner_l3,
            Slot::InnerL4 => self.inner_l4,
        }
    }
}

/// How the new outer L4 checksum of a tunnel (outer UDP for VXLAN/Geneve, the GRE checksum for
/// GRE) is built by [`OffloadMeta::encapsulate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TunnelCsum {
    /// No checksum: UDP checksum zero, or GRE without the C bit. Recorded as `Good` and absent.
    None,
    /// Computed by the caller: `Good`.
    Good,
    /// Left to the device: `Partial`, with the pseudo-header sum in the field.
    Partial,
}

/// The new outer headers of an encapsulation ([`OffloadMeta::encapsulate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OuterHeaders {
    /// The tunnel kind.
    pub kind: TunnelKind,
    /// The outer IP version.
    pub outer_l3_kind: L3Kind,
    /// Offset of the new outer Ethernet header (normally 0).
    pub outer_l2: Option<u16>,
    /// Offset of the new outer IP header.
    pub outer_l3: u16,
    /// Offset of the new outer UDP header (VXLAN/Geneve) or GRE header.
    pub outer_l4: u16,
    /// Bytes pushed in front of the old frame: every outer header up to the end of the tunnel
    /// header. The old frame's (kept) first byte lands at this offset.
    pub pushed: u16,
    /// Whether the old L2 header (everything before the old IP header) is removed first: GRE
    /// carrying IP. VXLAN and Geneve always carry Ethernet.
    pub strip_l2: bool,
    /// The new outer IP header checksum: `Good` (computed) or `Partial` (the device fills it;
    /// IPv4 only).
    pub ip_csum: CsumStatus,
    /// The new outer L4 checksum.
    pub l4_csum: TunnelCsum,
}

/// What a checksum field needs after a header rewrite (see [`RewritePlan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fixup {
    /// Leave the field alone: it does not cover the change, is absent, or is the device's to fill.
    Nothing,
    /// Move the field by exactly the change in the covered bytes (RFC 1624; for SCTP a recompute
    /// that keeps the old error), so its correctness (or wrongness) is preserved.
    Incremental,
    /// The field holds a partial pseudo-header sum: move it by the change in the pseudo-header.
    PseudoSum,
    /// Write the pseudo-header sum into the field ([`crate::rewrite::seed_partial`]).
    Seed,
}

/// The checksum fixups one header rewrite needs. Returned by the rewrite events of
/// [`OffloadMeta`]; [`crate::rewrite`] applies them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RewritePlan {
    /// The IPv4 header checksum of the rewritten level.
    pub ip: Fixup,
    /// The L4 checksum of the rewritten level.
    pub l4: Fixup,
    /// The outer tunnel checksum (outer UDP or GRE), which covers the inner headers; `Nothing`
    /// unless the rewrite is in the inner stack.
    pub tunnel: Fixup,
}

/// Per-packet offload metadata: checksum statuses, header offsets, protocols, GSO request and
/// the partial checksum location. `Copy`, fixed size, no allocation.
///
/// Fields are private so that statuses move only through the documented transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct OffloadMeta {
    status: [CsumStatus; 4],
    absent: [bool; 2],
    offsets: Offsets,
    l3_kind: [Option<L3Kind>; 2],
    l4_proto: [Option<u8>; 2],
    tunnel: Option<TunnelKind>,
    segment_size: u16,
    gso_type: GsoType,
    gso_ecn: bool,
    csum_start: u16,
    csum_offset: u16,
}

const fn level_index(level: Level) -> usize {
    match level {
        Level::Outer => 0,
        Level::Inner => 1,
    }
}

fn off(v: Option<usize>) -> Option<u16> {
    v.and_then(|x| u16::try_from(x).ok())
}

/// Offset of the checksum field within an L4 header of protocol `proto`.
pub(crate) const fn l4_csum_field(proto: u8) -> Option<u16> {
    match proto {
        ip_proto::TCP => Some(16),
        ip_proto::UDP => Some(6),
        ip_proto::SCTP => Some(8),
        ip_proto::ICMP | ip_proto::ICMPV6 => Some(2),
        ip_proto::GRE => Some(4),
        _ => None,
    }
}

/// Whether the L4 checksum of `proto` covers a pseudo-header (the IP addresses).
pub(crate) const fn has_pseudo_header(proto: u8) -> bool {
    matches!(proto, ip_proto::TCP | ip_proto::UDP | ip_proto::ICMPV6)
}

const fn fixup_covered(status: CsumStatus, absent: bool) -> Fixup {
    match status {
        _ if absent => Fixup::Nothing,
        CsumStatus::Partial => Fixup::Nothing,
        CsumStatus::Unknown | CsumStatus::Bad | CsumStatus::Good => Fixup::Incremental,
    }
}

const fn fixup_pseudo(status: CsumStatus, absent: bool) -> Fixup {
    match status {
        _ if absent => Fixup::Nothing,
        CsumStatus::Partial => Fixup::PseudoSum,
        CsumStatus::Unknown | CsumStatus::Bad | CsumStatus::Good => Fixup::Incremental,
    }
}

const fn after_verdict(status: CsumStatus, verdict: Verdict) -> CsumStatus {
    match (status, verdict) {
        (s, Verdict::None) => s,
        (CsumStatus::Partial, _) => CsumStatus::Partial,
        (CsumStatus::Bad, _) => CsumStatus::Bad,
        (_, Verdict::Bad) => CsumStatus::Bad,
        (CsumStatus::Unknown | CsumStatus::Good, Verdict::Good) => CsumStatus::Good,
    }
}

fn shift(v: Option<u16>, add: u16, sub: u16) -> Result<Option<u16>, Error> {
    match v {
        None => Ok(None),
        Some(x) => x
            .checked_add(add)
            .and_then(|y| y.checked_sub(sub))
            .map(Some)
            .ok_or(Error::OffsetOutOfRange),
    }
}

impl OffloadMeta {
    /// Metadata for a freshly parsed frame: offsets, protocols and tunnel from the layout, every
    /// status `Unknown`, no GSO, no partial checksum. Offsets beyond `u16::MAX` are dropped, and
    /// a tunnel whose inner stack was not parsed is not recorded.
    ///
    /// ```
    /// use sluice_packet::{verify, CsumStatus, Level, OffloadMeta, Slot};
    /// let mut frame = vec![
    ///     0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, // Ethernet, IPv4
    ///     0x45, 0, 0, 32, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4, UDP
    ///     0x04, 0xd2, 0, 53, 0, 12, 0, 0, b'p', b'i', b'n', b'g', // UDP 1234 -> 53, "ping"
    /// ];
    /// let layout = sluice_wire::parse(&frame).unwrap();
    /// let mut meta = OffloadMeta::from_layout(&layout);
    /// let offsets = meta.offsets();
    /// assert_eq!((offsets.l3(Level::Outer), offsets.l4(Level::Outer)), (Some(14), Some(34)));
    /// assert_eq!(meta.l4_proto(Level::Outer), Some(17));
    /// assert_eq!(meta.status(Slot::OuterIp), CsumStatus::Unknown);
    ///
    /// // Software verification turns knowledge into statuses.
    /// meta.apply_verdicts(&verify::verify_frame(&frame, &layout));
    /// assert_eq!(meta.status(Slot::OuterIp), CsumStatus::Bad); // the field is zero
    /// assert_eq!(meta.status(Slot::OuterL4), CsumStatus::Good); // UDP without checksum:
    /// assert!(meta.csum_absent(Level::Outer)); // nothing to verify or fill
    /// ```
    pub fn from_layout(layout: &Layout) -> Self {
        let o = &layout.outer;
        let i = layout.inner.as_ref();
        let tunnel = layout.tunnel.map(|t| t.kind).filter(|_| i.is_some());
        let i = i.filter(|_| tunnel.is_some());
        let pick = |f: fn(&Headers) -> Option<usize>| i.and_then(|h| off(f(h)));
        OffloadMeta {
            offsets: Offsets {
                outer_l2: off(o.l2),
                outer_l3: off(o.l3),
                outer_l4: off(o.l4),
                inner_l2: pick(|h| h.l2),
                inner_l3: pick(|h| h.l3),
                inner_l4: pick(|h| h.l4),
            },
            l3_kind: [o.l3_kind, i.and_then(|h| h.l3_kind)],
            l4_proto: [o.l4_proto, i.and_then(|h| h.l4_proto)],
            tunnel,
            ..OffloadMeta::default()
        }
    }

    // ---- accessors ----

    /// The status of one checksum slot.
    pub const fn status(&self, slot: Slot) -> CsumStatus {
        let [oip, ol4, iip, il4] = self.status;
        match slot {
            Slot::OuterIp => oip,
            Slot::OuterL4 => ol4,
            Slot::InnerIp => iip,
            Slot::InnerL4 => il4,
        }
    }

    /// Whether the L4 checksum of `level` is absent by design (UDP checksum zero where allowed,
    /// GRE without checksum). Its status is then `Good` and rewrites leave the field alone.
    pub const fn csum_absent(&self, level: Level) -> bool {
        let [outer, inner] = self.absent;
        match level {
            Level::Outer => outer,
            Level::Inner => inner,
        }
    }

    /// Header offsets.
    pub const fn offsets(&self) -> Offsets {
        self.offsets
    }

    /// The IP version of a level.
    pub const fn l3_kind(&self, level: Level) -> Option<L3Kind> {
        let [outer, inner] = self.l3_kind;
        match level {
            Level::Outer => outer,
            Level::Inner => inner,
        }
    }

    /// The L4 protocol of a level (`l4_proto(Level::Outer)` is 17 or 47 in a tunnel).
    pub const fn l4_proto(&self, level: Level) -> Option<u8> {
        let [outer, inner] = self.l4_proto;
        match level {
            Level::Outer => outer,
            Level::Inner => inner,
        }
    }

    /// The tunnel kind, when the packet is tunnelled.
    pub const fn tunnel(&self) -> Option<TunnelKind> {
        self.tunnel
    }

    /// GSO segment size (payload bytes per segment); 0 when the packet is not a GSO packet.
    pub const fn segment_size(&self) -> u16 {
        self.segment_size
    }

    /// GSO type.
    pub const fn gso_type(&self) -> GsoType {
        self.gso_type
    }

    /// Whether the GSO packet uses ECN (CWR must appear on the first segment only: `TSO_ECN`).
    pub const fn gso_ecn(&self) -> bool {
        self.gso_ecn
    }

    /// Offset from the frame start where the device starts summing for the partial L4
    /// checksum; meaningful only when [`OffloadMeta::partial_slot`] is `Some`.
    pub const fn csum_start(&self) -> u16 {
        self.csum_start
    }

    /// Offset of the partial checksum field from [`OffloadMeta::csum_start`].
    pub const fn csum_offset(&self) -> u16 {
        self.csum_offset
    }

    /// The L4 slot that `csum_start`/`csum_offset` describe: the innermost `Partial` L4 slot.
    pub fn partial_slot(&self) -> Option<Slot> {
        [Slot::InnerL4, Slot::OuterL4]
            .into_iter()
            .find(|&s| self.status(s) == CsumStatus::Partial && self.offsets.of(s).is_some())
    }

    /// Sets the GSO request. `GsoType::None` requires `segment_size == 0`, any other type a
    /// non-zero size; `ecn` is refused with USO, as Linux 6.18's `tun` refuses it (`EINVAL`), and
    /// accepted with UFO, where the kernel accepts it and fragments as without it.
    ///
    /// ```
    /// use sluice_packet::{GsoType, OffloadMeta};
    /// let mut meta = OffloadMeta::default();
    /// meta.set_gso(GsoType::TcpV4, 1448, true).unwrap();
    /// assert_eq!((meta.gso_type(), meta.segment_size()), (GsoType::TcpV4, 1448));
    /// assert!(meta.gso_ecn());
    /// assert!(meta.set_gso(GsoType::UdpL4, 1400, true).is_err()); // USO + ECN: refused, as tun does
    /// assert!(meta.set_gso(GsoType::None, 1400, false).is_err());
    /// ```
    #[inline]
    pub fn set_gso(
        &mut self,
        gso_type: GsoType,
        segment_size: u16,
        ecn: bool,
    ) -> Result<(), Error> {
        if (gso_type == GsoType::None) != (segment_size == 0) {
            return Err(Error::InvalidArgument(
                "segment_size must be 0 exactly when gso_type is None",
            ));
        }
        if ecn && gso_type == GsoType::UdpL4 {
            // As Linux refuses VIRTIO_NET_HDR_GSO_ECN on USO: ECN is TCP's (CWR on the first
            // segment). UFO with the bit is accepted by the kernel and fragmented as without.
            return Err(Error::InvalidArgument("ECN does not apply to USO"));
        }
        self.gso_type = gso_type;
        self.segment_size = segment_size;
        self.gso_ecn = ecn && gso_type != GsoType::None;
        Ok(())
    }

    fn has_slot(&self, slot: Slot) -> bool {
        match slot.level() {
            Level::Outer => true,
            Level::Inner => self.tunnel.is_some(),
        }
    }

    fn set(&mut self, slot: Slot, status: CsumStatus) {
        if let Some(s) = self.status.get_mut(slot.index()) {
            *s = status;
        }
        if slot.is_l4() && status != CsumStatus::Good {
            self.set_absent(slot.level(), false);
        }
    }

    fn set_absent(&mut self, level: Level, absent: bool) {
        if let Some(a) = self.absent.get_mut(level_index(level)) {
            *a = absent;
        }
    }

    /// Recomputes `csum_start`/`csum_offset` from the innermost `Partial` L4 slot.
    fn sync_partial(&mut self) {
        let loc = self.partial_slot().and_then(|s| {
            let start = self.offsets.of(s)?;
            let field = l4_csum_field(self.l4_proto(s.level())?)?;
            Some((start, field))
        });
        (self.csum_start, self.csum_offset) = loc.unwrap_or((0, 0));
    }

    // ---- rx ----

    /// Applies a receive-side verdict (software verification, or a device's rx checksum result)
    /// to one slot: `Good` makes `Unknown` `Good`; `Bad` makes `Unknown` or `Good` `Bad`; `None`
    /// changes nothing; `Bad` stays `Bad` and `Partial` stays `Partial` whatever the verdict.
    /// Inner slots of an untunnelled packet are left alone.
    /// An absent L4 checksum stays absent under a `Good` verdict (a device may well report a
    /// zero UDP checksum as verified) and loses the flag with `Bad`.
    pub fn rx_verdict(&mut self, slot: Slot, verdict: Verdict) {
        if self.has_slot(slot) {
            self.set(slot, after_verdict(self.status(slot), verdict));
        }
    }

    /// Applies the result of [`crate::verify::verify_frame`] to all four slots. An L4 header that
    /// carries no checksum by design (`Verdicts::l4_absent`) becomes `Good` and absent, unless
    /// it is already `Bad` or `Partial`.
    pub fn apply_verdicts(&mut self, v: &Verdicts) {
        let items = [
            (Slot::OuterIp, v.ip, false),
            (Slot::OuterL4, v.l4, v.l4_absent),
            (Slot::InnerIp, v.inner_ip, false),
            (Slot::InnerL4, v.inner_l4, v.inner_l4_absent),
        ];
        for (slot, verdict, absent) in items {
            if absent && verdict == Verdict::None && self.has_slot(slot) {
                let before = self.status(slot);
                self.rx_verdict(slot, Verdict::Good);
                if before != CsumStatus::Bad && before != CsumStatus::Partial {
                    self.set_absent(slot.level(), true);
                }
            } else {
                self.rx_verdict(slot, verdict);
            }
        }
    }

    /// A device reported "checksum unnecessary" (verified): a `Good` verdict for the outer IP and
    /// L4 slots, and for the inner ones too when `inner_too` (the kernel's `csum_level` ≥ 1).
    pub fn rx_checksum_unnecessary(&mut self, inner_too: bool) {
        self.rx_verdict(Slot::OuterIp, Verdict::Good);
        self.rx_verdict(Slot::OuterL4, Verdict::Good);
        if inner_too {
            self.rx_verdict(Slot::InnerIp, Verdict::Good);
            self.rx_verdict(Slot::InnerL4, Verdict::Good);
        }
        self.sync_partial();
    }

    /// A sender handed over a packet whose L4 checksum is not final (virtio `NEEDS_CSUM`):
    /// `csum_start` must be a parsed L4 header (inner or outer) and `csum_offset` that
    /// protocol's checksum field. The slot becomes `Partial` (a `Bad` slot stays `Bad`).
    pub fn rx_needs_csum(&mut self, csum_start: u16, csum_offset: u16) -> Result<(), Error> {
        let slot = [Slot::InnerL4, Slot::OuterL4]
            .into_iter()
            .find(|&s| self.has_slot(s) && self.offsets.of(s) == Some(csum_start))
            .ok_or(Error::PartialNotAtL4 { csum_start })?;
        let field = self.l4_proto(slot.level()).and_then(l4_csum_field);
        if field != Some(csum_offset) {
            return Err(Error::InvalidArgument(
                "csum_offset is not the L4 checksum field",
            ));
        }
        if self.status(slot) != CsumStatus::Bad {
            self.set(slot, CsumStatus::Partial);
        }
        self.sync_partial();
        Ok(())
    }

    // ---- rewrites ----

    fn tunnel_fixup(&self, level: Level) -> Fixup {
        match (level, self.tunnel) {
            (Level::Inner, Some(_)) => {
                fixup_covered(self.status(Slot::OuterL4), self.csum_absent(Level::Outer))
            }
            _ => Fixup::Nothing,
        }
    }

    fn ip_fixup(&self, level: Level) -> Fixup {
        match self.l3_kind(level) {
            Some(L3Kind::Ipv4) => fixup_covered(self.status(Slot::ip(level)), false),
            _ => Fixup::Nothing,
        }
    }

    /// A field covered by the L4 checksum of `level` (a port) was rewritten. Statuses do not
    /// change; the plan says how to move the checksums (see the state table): incremental unless
    /// `Partial` or absent, and the outer tunnel checksum for an inner rewrite.
    pub fn l4_field_rewritten(&self, level: Level) -> RewritePlan {
        let l4 = match self.offsets.l4(level) {
            Some(_) => fixup_covered(self.status(Slot::l4(level)), self.csum_absent(level)),
            None => Fixup::Nothing,
        };
        RewritePlan {
            ip: Fixup::Nothing,
            l4,
            tunnel: self.tunnel_fixup(level),
        }
    }

    /// An IP address of `level` was rewritten. Statuses do not change. The IPv4 header checksum
    /// moves incrementally (unless the device fills it); an L4 checksum with a pseudo-header
    /// (TCP, UDP, ICMPv6) moves incrementally, or, when `Partial`, its stored pseudo-header sum
    /// moves; SCTP, ICMP and GRE checksums do not cover addresses.
    pub fn l3_addr_rewritten(&self, level: Level) -> RewritePlan {
        let l4 = match (self.offsets.l4(level), self.l4_proto(level)) {
            (Some(_), Some(p)) if has_pseudo_header(p) => {
                fixup_pseudo(self.status(Slot::l4(level)), self.csum_absent(level))
            }
            _ => Fixup::Nothing,
        };
        RewritePlan {
            ip: self.ip_fixup(level),
            l4,
            tunnel: self.tunnel_fixup(level),
        }
    }

    /// The IPv4 TTL (or IPv6 hop limit) of `level` was rewritten: only the IPv4 header checksum
    /// (and, for the inner stack, the outer tunnel checksum) covers it.
    pub fn ttl_rewritten(&self, level: Level) -> RewritePlan {
        RewritePlan {
            ip: self.ip_fixup(level),
            l4: Fixup::Nothing,
            tunnel: self.tunnel_fixup(level),
        }
    }

    /// The DSCP/ECN byte (IPv4 TOS, IPv6 traffic class) of `level` was rewritten: same rule as
    /// [`OffloadMeta::ttl_rewritten`].
    pub fn dscp_rewritten(&self, level: Level) -> RewritePlan {
        self.ttl_rewritten(level)
    }

    /// Hands the L4 checksum of `level` to the device: `Good` becomes `Partial` and the caller must
    /// seed the pseudo-header sum ([`crate::rewrite::seed_partial`]); `Partial` stays `Partial`
    /// (nothing to do). Refused for `Unknown` and `Bad` (a device fill would make unverified or
    /// corrupt data look valid) and for an absent checksum.
    pub fn l4_checksum_deferred(&mut self, level: Level) -> Result<Fixup, Error> {
        let slot = Slot::l4(level);
        let proto = self.l4_proto(level);
        if !self.has_slot(slot) || self.offsets.l4(level).is_none() {
            return Err(Error::MissingHeader(slot));
        }
        if proto.and_then(l4_csum_field).is_none() {
            return Err(Error::Unsupported("L4 protocol without a checksum"));
        }
        if self.csum_absent(level) {
            return Err(Error::InvalidArgument("the L4 checksum is absent"));
        }
        match self.status(slot) {
            CsumStatus::Good => {
                self.set(slot, CsumStatus::Partial);
                self.sync_partial();
                Ok(Fixup::Seed)
            }
            CsumStatus::Partial => Ok(Fixup::Nothing),
            CsumStatus::Unknown | CsumStatus::Bad => Err(Error::InvalidArgument(
                "only a Good checksum can be deferred",
            )),
        }
    }

    /// Hands the IPv4 header checksum of `level` to the device: `Good` becomes `Partial` (the
    /// device fills the field; its bytes no longer matter); `Partial` stays. Refused for
    /// `Unknown` and `Bad` (as for [`OffloadMeta::l4_checksum_deferred`]) and for a level
    /// without an IPv4 header.
    pub fn ip_checksum_deferred(&mut self, level: Level) -> Result<(), Error> {
        let slot = Slot::ip(level);
        if !self.has_slot(slot) || self.l3_kind(level) != Some(L3Kind::Ipv4) {
            return Err(Error::MissingHeader(slot));
        }
        match self.status(slot) {
            CsumStatus::Good | CsumStatus::Partial => {
                self.set(slot, CsumStatus::Partial);
                Ok(())
            }
            CsumStatus::Unknown | CsumStatus::Bad => Err(Error::InvalidArgument(
                "only a Good checksum can be deferred",
            )),
        }
    }

    /// The caller recomputed the checksum of `slot` in full, in software, and wrote it (see
    /// [`crate::rewrite::recompute_checksum`]): the slot becomes `Good` whatever it was. This is
    /// the only transition out of `Bad`; use it only for packets you built yourself or have
    /// explicitly decided to repair.
    #[inline]
    pub fn checksum_recomputed(&mut self, slot: Slot) {
        if self.has_slot(slot) {
            let was_partial = self.status(slot) == CsumStatus::Partial;
            self.set(slot, CsumStatus::Good);
            if slot.is_l4() {
                self.set_absent(slot.level(), false);
            }
            // Only a `Partial` slot can be the one `csum_start`/`csum_offset` point at: making
            // any other slot `Good` leaves them as they are.
            if was_partial {
                self.sync_partial();
            }
        }
    }

    // ---- structure ----

    /// The packet was put in a tunnel. The current outer stack (statuses, offsets, protocols)
    /// becomes the inner one, its offsets shifted by `pushed` (less the stripped L2 header); the
    /// new outer headers get the statuses the caller built them with. One level only: a
    /// tunnelled packet is refused. On error nothing changes.
    pub fn encapsulate(&mut self, enc: &OuterHeaders) -> Result<(), Error> {
        if self.tunnel.is_some() {
            return Err(Error::AlreadyTunnelled);
        }
        let outer_ip_ok = match enc.outer_l3_kind {
            L3Kind::Ipv4 => matches!(enc.ip_csum, CsumStatus::Good | CsumStatus::Partial),
            L3Kind::Ipv6 => enc.ip_csum == CsumStatus::Good,
        };
        if !outer_ip_ok {
            return Err(Error::InvalidArgument(
                "outer ip_csum must be Good, or Partial for IPv4",
            ));
        }
        if enc.strip_l2 && enc.kind != TunnelKind::Gre {
            return Err(Error::InvalidArgument("only GRE can carry IP without L2"));
        }
        let header_order_ok = enc.outer_l2.is_none_or(|l2| l2 < enc.outer_l3)
            && enc.outer_l3 < enc.outer_l4
            && enc.outer_l4 < enc.pushed;
        if !header_order_ok {
            return Err(Error::InvalidArgument(
                "outer offsets must increase and end before pushed",
            ));
        }
        let o = self.offsets;
        let (inner_l2, strip) = match (enc.strip_l2, o.outer_l3) {
            (false, _) => (shift(o.outer_l2, enc.pushed, 0)?, 0),
            (true, Some(l3)) => (None, l3),
            (true, None) => return Err(Error::MissingHeader(Slot::OuterIp)),
        };
        let inner_l3 = shift(o.outer_l3, enc.pushed, strip)?;
        let inner_l4 = shift(o.outer_l4, enc.pushed, strip)?;

        let [oip, ol4, _, _] = self.status;
        let [oabs, _] = self.absent;
        let l4_proto = match enc.kind {
            TunnelKind::Vxlan | TunnelKind::Geneve => ip_proto::UDP,
            TunnelKind::Gre => ip_proto::GRE,
        };
        let (new_l4, new_abs) = match enc.l4_csum {
            TunnelCsum::None => (CsumStatus::Good, true),
            TunnelCsum::Good => (CsumStatus::Good, false),
            TunnelCsum::Partial => (CsumStatus::Partial, false),
        };
        self.status = [enc.ip_csum, new_l4, oip, ol4];
        self.absent = [new_abs, oabs];
        self.offsets = Offsets {
            outer_l2: enc.outer_l2,
            outer_l3: Some(enc.outer_l3),
            outer_l4: Some(enc.outer_l4),
            inner_l2,
            inner_l3,
            inner_l4,
        };
        self.l3_kind = [Some(enc.outer_l3_kind), self.l3_kind(Level::Outer)];
        self.l4_proto = [Some(l4_proto), self.l4_proto(Level::Outer)];
        self.tunnel = Some(enc.kind);
        self.sync_partial();
        Ok(())
    }

    /// The tunnel was removed: `removed` bytes (every outer header and the tunnel header) were
    /// taken off the front, and, when the inner stack has no L2 header (GRE carrying IP), an L2
    /// header of `l2_len` bytes was put in front (`l2_len` must be 0 otherwise). The inner stack
    /// becomes the outer one with its statuses; the inner slots are cleared to `Unknown`. On
    /// error nothing changes.
    pub fn decapsulate(&mut self, removed: u16, l2_len: u16) -> Result<(), Error> {
        if self.tunnel.is_none() {
            return Err(Error::NotTunnelled);
        }
        let o = self.offsets;
        let first = o.inner_l2.or(o.inner_l3).or(o.inner_l4);
        if first.is_some_and(|f| f < removed) {
            return Err(Error::InvalidArgument(
                "removed runs into the inner headers",
            ));
        }
        let outer_l2 = match (o.inner_l2, l2_len) {
            (Some(_), 0) => shift(o.inner_l2, 0, removed)?,
            (Some(_), _) => {
                return Err(Error::InvalidArgument(
                    "l2_len must be 0 when the inner stack has L2",
                ))
            }
            (None, 0) => None,
            (None, _) => Some(0),
        };
        let outer_l3 = shift(o.inner_l3, l2_len, removed)?;
        let outer_l4 = shift(o.inner_l4, l2_len, removed)?;
        let [_, _, iip, il4] = self.status;
        let [_, iabs] = self.absent;
        self.status = [iip, il4, CsumStatus::Unknown, CsumStatus::Unknown];
        self.absent = [iabs, false];
        self.offsets = Offsets {
            outer_l2,
            outer_l3,
            outer_l4,
            ..Offsets::default()
        };
        self.l3_kind = [self.l3_kind(Level::Inner), None];
        self.l4_proto = [self.l4_proto(Level::Inner), None];
        self.tunnel = None;
        self.sync_partial();
        Ok(())
    }

    /// The outer L2 header (Ethernet and its VLAN tags: every byte before the outer IP header)
    /// was removed, leaving an L3 packet (as a TUN device takes it): every offset moves back by
    /// the outer IP header's offset, which is returned, and there is no outer L2 any more;
    /// statuses and the GSO request stay. On error (no outer L2 or IP header) nothing changes.
    pub fn l2_removed(&mut self) -> Result<u16, Error> {
        let o = self.offsets;
        let (Some(_), Some(l3)) = (o.outer_l2, o.outer_l3) else {
            return Err(Error::InvalidArgument("no outer L2 and IP header"));
        };
        self.offsets = Offsets {
            outer_l2: None,
            outer_l3: Some(0),
            outer_l4: shift(o.outer_l4, 0, l3)?,
            inner_l2: shift(o.inner_l2, 0, l3)?,
            inner_l3: shift(o.inner_l3, 0, l3)?,
            inner_l4: shift(o.inner_l4, 0, l3)?,
        };
        self.sync_partial();
        Ok(l3)
    }

    /// A VLAN tag of `len` bytes was pushed into the outer L2 header: every offset after the
    /// outer Ethernet header moves by `len`; no status changes (tags lie outside every checksum).
    pub fn vlan_pushed(&mut self, len: u16) -> Result<(), Error> {
        self.vlan_shift(len, 0)
    }

    /// A VLAN tag of `len` bytes was popped from the outer L2 header: every offset after the outer
    /// Ethernet header moves back by `len`; no status changes.
    pub fn vlan_popped(&mut self, len: u16) -> Result<(), Error> {
        let o = self.offsets;
        let l2 = o
            .outer_l2
            .ok_or(Error::InvalidArgument("no outer L2 header"))?;
        // The outer IP header must stay behind a 14-byte Ethernet header.
        let min = l2
            .checked_add(14)
            .and_then(|m| m.checked_add(len))
            .ok_or(Error::OffsetOutOfRange)?;
        if o.outer_l3.or(o.outer_l4).is_some_and(|x| x < min) {
            return Err(Error::InvalidArgument("no VLAN tag of that length to pop"));
        }
        self.vlan_shift(0, len)
    }

    fn vlan_shift(&mut self, add: u16, sub: u16) -> Result<(), Error> {
        let o = self.offsets;
        if o.outer_l2.is_none() {
            return Err(Error::InvalidArgument("no outer L2 header"));
        }
        let new = Offsets {
            outer_l2: o.outer_l2,
            outer_l3: shift(o.outer_l3, add, sub)?,
            outer_l4: shift(o.outer_l4, add, sub)?,
            inner_l2: shift(o.inner_l2, add, sub)?,
            inner_l3: shift(o.inner_l3, add, sub)?,
            inner_l4: shift(o.inner_l4, add, sub)?,
        };
        self.offsets = new;
        self.sync_partial();
        Ok(())
    }
}
