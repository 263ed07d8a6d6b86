//! The running kernel as the reference GSO and GRO implementation (method in
//! `docs/kernel-oracle.md`).
//!
//! - [`GsoOracle`]: a super-packet written to a TAP (`IFF_VNET_HDR`) is redirected by tc
//!   (`clsact` + `u32 match u32 0 0 action mirred egress redirect`) to a veth whose offloads are
//!   all off, so `validate_xmit_skb` segments and checksums it in software; the segments are
//!   captured on the veth peer, in a second namespace, with `AF_PACKET` + `PACKET_AUXDATA`.
//! - [`GroOracle`]: a burst of frames written to a TAP with `IFF_NAPI` whose NAPI runs threaded,
//!   pinned to the CPU of a `SCHED_FIFO` writer thread (the NAPI thread is `SCHED_FIFO` too, at a
//!   lower priority, so it waits for the writer but is never starved by normal tasks), so the
//!   whole burst is queued before the single poll and GRO sees it at once; the result is captured on the TAP itself with
//!   `AF_PACKET` + `PACKET_VNET_HDR` (GSO type and size, checksum state).
//!
//! - [`TunGsoOracle`](crate::oracle_tun::TunGsoOracle) and [`GroOracle`] with [`GroOracleConfig::l3`]: the
//!   same for L3 packets, through TUN devices (`IFF_TUN | IFF_NO_PI | IFF_VNET_HDR`).
//!
//! Both write a sentinel frame (ethertype [`SENTINEL_ETHERTYPE`], carrying a per-call nonce; on a
//! TUN an IPv4 packet of protocol [`SENTINEL_IP_PROTO`]) after
//! the input and read the capture up to it: every output is attributed to its input, and a frame
//! the kernel accepted but dropped shows up as missing output rather than as a hang. Stray frames
//! are drained before each call; each call waits at most [`TIMEOUT`].
//!
//! Each oracle owns its namespaces (unique names) and removes them on drop; calls on one oracle
//! are serialized, and several oracles (in one or several processes) can run at once.

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::netns::{disable_all_offloads, set_feature};
use sluice_ports::afpacket::{AfPacketConfig, PacketSocket, VLAN_HEADROOM};
use sluice_ports::netns::{unique_suffix, Netns, VethPair};
use sluice_ports::sched::{last_allowed_cpu, pin_to_cpu, set_fifo};
use sluice_ports::tap::{Tap, TapConfig, TUN_F_ALL};

/// Ethertype of the sentinel frame (IEEE 802 local experimental ethertype 1).
pub const SENTINEL_ETHERTYPE: u16 = 0x88b6;
/// IP protocol of the sentinel packet on a TUN (RFC 3692 experimental protocol 253).
pub const SENTINEL_IP_PROTO: u8 = 253;
/// How long a call waits for its sentinel (and, for GRO, for the NAPI poll).
pub const TIMEOUT: Duration = Duration::from_secs(1);
/// The NAPI poll budget: the most frames one [`GroOracle::coalesce`] burst may hold.
pub const GRO_MAX_BURST: usize = 64;
/// The `virtio_net_hdr` size the GRO oracle's TAP uses (v1).
pub const GRO_VNET_HDR_LEN: usize = 12;

/// Marks a sentinel's payload, before the nonce.
const SENTINEL_MAGIC: &[u8; 8] = b"SLUICE-S";
const RECV_BUF_LEN: usize = VLAN_HEADROOM + 65536 + 64;
/// `VIRTIO_NET_HDR_F_DATA_VALID`.
const F_DATA_VALID: u8 = 2;

/// Why an oracle call produced no answer.
#[derive(Debug)]
#[non_exhaustive]
pub enum OracleError {
    /// The kernel refused the input: `write()` to the TAP failed with this errno (`EINVAL` for a
    /// `virtio_net_hdr` it rejects).
    Refused(i32),
    /// The sentinel did not come back within [`TIMEOUT`] (or the GRO poll did not happen).
    Timeout,
    /// A system call or command failed.
    Io(io::Error),
    /// The request itself is invalid (wrong header size, too many frames, empty frame …).
    Invalid(String),
}

impl fmt::Display for OracleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OracleError::Refused(errno) => write!(
                f,
                "the kernel refused the frame: {}",
                io::Error::from_raw_os_error(*errno)
            ),
            OracleError::Timeout => write!(f, "the sentinel did not come back within {TIMEOUT:?}"),
            OracleError::Io(e) => write!(f, "oracle I/O: {e}"),
            OracleError::Invalid(why) => write!(f, "invalid oracle request: {why}"),
        }
    }
}

impl std::error::Error for OracleError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OracleError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for OracleError {
    fn from(e: io::Error) -> Self {
        OracleError::Io(e)
    }
}

/// How to build a [`GsoOracle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GsoOracleConfig {
    /// The TAP's `virtio_net_hdr` size: 12 (v1), or 24 for UDP-tunnel GSO (the kernel reads
    /// `outer_th_offset` / `inner_nh_offset` only at this size). 10 is accepted too.
    pub vnet_hdr_len: usize,
    /// `TUN_F_*` offloads to request on the TAP; the kernel's accepted subset is kept
    /// ([`GsoOracle::offloads`]). They do not limit what may be written.
    pub offloads: u32,
}

impl Default for GsoOracleConfig {
    fn default() -> Self {
        GsoOracleConfig {
            vnet_hdr_len: 12,
            offloads: TUN_F_ALL,
        }
    }
}

/// The kernel's software GSO as an oracle.
#[derive(Debug)]
pub struct GsoOracle {
    tap: Tap,
    capture: PacketSocket,
    state: Mutex<Vec<u8>>,
    veth_features_on: Vec<String>,
    _veth: VethPair,
    // Dropped last: deleting the namespaces removes whatever is left in them.
    _ns_capture: Netns,
    _ns_tap: Netns,
}

impl GsoOracle {
    /// Builds the two namespaces, the TAP, the tc redirect, the veth pair (MTU 65535, every
    /// offload off, GRO/LRO off on the capturing end) and the capture socket.
    pub fn new(config: &GsoOracleConfig) -> io::Result<GsoOracle> {
        sluice_ports::require_root()?;
        let ns_tap = Netns::create("slgso")?;
        let ns_capture = Netns::create("slgsocap")?;
        let tap_name = "sgtap";
        let tap_config = TapConfig {
            vnet_hdr_len: config.vnet_hdr_len,
            offloads: config.offloads,
            ..TapConfig::default()
        };
        let tap = ns_tap.enter(|| Tap::open(tap_name, &tap_config))??;
        let veth = VethPair::create(&ns_tap, "sgv0", &ns_capture, "sgv1", 65535)?;
        let veth_features_on = disable_all_offloads(&ns_tap, veth.a())?;
        // The capturing end must not re-merge what the kernel segmented.
        disable_all_offloads(&ns_capture, veth.b())?;
        ns_tap.run(&["tc", "qdisc", "add", "dev", tap_name, "clsact"])?;
        ns_tap.run(&[
            "tc",
            "filter",
            "add",
            "dev",
            tap_name,
            "ingress",
            "protocol",
            "all",
            "prio",
            "1",
            "u32",
            "match",
            "u32",
            "0",
            "0",
            "action",
            "mirred",
            "egress",
            "redirect",
            "dev",
            veth.a(),
        ])?;
        ns_tap.link_up(tap_name)?;
        let capture_if = veth.b().to_owned();
        let capture = ns_capture.enter(move || {
            PacketSocket::bind(
                &capture_if,
                &AfPacketConfig {
                    vnet_hdr: false,
                    auxdata: true,
                    promisc: true,
                },
            )
        })??;
        capture.drain()?;
        Ok(GsoOracle {
            tap,
            capture,
            state: Mutex::new(vec![0; RECV_BUF_LEN]),
            veth_features_on,
            _veth: veth,
            _ns_capture: ns_capture,
            _ns_tap: ns_tap,
        })
    }

    /// The `TUN_F_*` offloads the TAP accepted.
    pub fn offloads(&self) -> u32 {
        self.tap.offloads()
    }

    /// The `virtio_net_hdr` size every [`GsoOracle::segment`] call must pass.
    pub fn vnet_hdr_len(&self) -> usize {
        self.tap.vnet_hdr_len()
    }

    /// The veth features still on after turning everything off (fixed ones).
    pub fn veth_features_on(&self) -> &[String] {
        &self.veth_features_on
    }

    /// Hands `frame` with `vnet_hdr` (exactly [`GsoOracle::vnet_hdr_len`] bytes) to the kernel and
    /// returns what came out, in order: the segments (VLAN tags reinserted), the frame itself when
    /// it needed no segmentation, or nothing when the kernel dropped it after accepting it.
    ///
    /// `Refused(errno)` when the TAP write fails (the kernel rejected the header or frame).
    pub fn segment(&self, vnet_hdr: &[u8], frame: &[u8]) -> Result<Vec<Vec<u8>>, OracleError> {
        if vnet_hdr.len() != self.tap.vnet_hdr_len() {
            return Err(OracleError::Invalid(format!(
                "vnet header of {} bytes, the oracle's TAP uses {}",
                vnet_hdr.len(),
                self.tap.vnet_hdr_len()
            )));
        }
        let mut buf = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.capture.drain()?;
        write_or_refused(&self.tap, vnet_hdr, frame)?;
        let nonce = next_nonce();
        let zero = [0u8; 24];
        let zero = zero.get(..self.tap.vnet_hdr_len()).unwrap_or_default();
        self.tap.write(zero, &sentinel(false, nonce))?;
        let outputs = collect_until_sentinel(&self.capture, &mut buf, false, nonce)?;
        Ok(outputs.into_iter().map(|o| o.frame).collect())
    }
}

/// How to build a [`GroOracle`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroOracleConfig {
    /// `ethtool -K TAP rx-udp-gro-forwarding on`: plain UDP GRO (`UDP_L4`) without a local
    /// socket asking for it.
    pub udp_gro_forwarding: bool,
    /// Create a VXLAN device on UDP port 4789 in the namespace, so VXLAN GRO engages.
    pub vxlan: bool,
    /// Write input frames with `VIRTIO_NET_HDR_F_DATA_VALID` (the receiving NIC validated the
    /// checksums: `CHECKSUM_UNNECESSARY`) instead of an all-zero header (`CHECKSUM_NONE`: GRO
    /// verifies every L4 checksum itself and does not merge a frame whose checksum is wrong).
    /// Default: all-zero, the stricter and more informative one.
    pub data_valid: bool,
    /// A TUN (`IFF_TUN`) instead of the TAP: the frames are IP packets with no Ethernet header,
    /// and so are the outputs.
    pub l3: bool,
}

/// One packet that came out of GRO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroOutput {
    /// The 10-byte `virtio_net_hdr` the kernel reported (`PACKET_VNET_HDR`): `gso_type`,
    /// `gso_size` and, for a merged packet, `NEEDS_CSUM` with `csum_start`/`csum_offset` (the
    /// checksum field then holds the pseudo-header sum, not a final checksum).
    pub vnet_hdr: Vec<u8>,
    /// The packet as GRO built it.
    pub frame: Vec<u8>,
}

/// The kernel's GRO as an oracle.
#[derive(Debug)]
pub struct GroOracle {
    tap: Tap,
    capture: PacketSocket,
    napi_pid: i32,
    cpu: usize,
    config: GroOracleConfig,
    state: Mutex<Vec<u8>>,
    _ns: Netns,
}

impl GroOracle {
    /// Builds the namespace, the NAPI TAP with threaded NAPI pinned to one CPU, the optional
    /// UDP-GRO forwarding and VXLAN device, and the capture socket on the TAP.
    pub fn new(config: &GroOracleConfig) -> io::Result<GroOracle> {
        sluice_ports::require_root()?;
        let ns = Netns::create("slgro")?;
        let name = gro_tap_name();
        let tap_config = TapConfig {
            vnet_hdr_len: GRO_VNET_HDR_LEN,
            napi: true,
            tun: config.l3,
            ..TapConfig::default()
        };
        let tap = ns.enter(|| Tap::open(&name, &tap_config))??;
        ns.link_up(&name)?;
        ns.run(&[
            "sh",
            "-c",
            &format!("echo 1 > /sys/class/net/{name}/threaded"),
        ])?;
        let napi_pid = find_napi_thread(&name)?;
        let cpu = last_allowed_cpu()?;
        pin_to_cpu(napi_pid, cpu)?;
        set_fifo(napi_pid, NAPI_PRIORITY)?;
        if config.udp_gro_forwarding {
            set_feature(&ns, &name, "rx-udp-gro-forwarding", true)?;
        }
        if config.vxlan {
            ns.run(&[
                "ip", "link", "add", "sgvx", "type", "vxlan", "external", "dstport", "4789",
            ])?;
            ns.link_up("sgvx")?;
        }
        let ifname = name.clone();
        let capture = ns.enter(move || {
            PacketSocket::bind(
                &ifname,
                &AfPacketConfig {
                    vnet_hdr: true,
                    auxdata: true,
                    promisc: false,
                },
            )
        })??;
        capture.drain()?;
        Ok(GroOracle {
            tap,
            capture,
            napi_pid,
            cpu,
            config: *config,
            state: Mutex::new(vec![0; RECV_BUF_LEN]),
            _ns: ns,
        })
    }

    /// The CPU the NAPI thread and the writer are pinned to.
    pub fn cpu(&self) -> usize {
        self.cpu
    }

    /// The pid of the TAP's `napi/…` kernel thread.
    pub fn napi_pid(&self) -> i32 {
        self.napi_pid
    }

    /// The TAP's name (inside the oracle's namespace).
    pub fn tap_name(&self) -> &str {
        self.tap.name()
    }

    /// The vnet header [`GroOracle::coalesce`] writes with every frame (12 bytes: all zero, or
    /// `DATA_VALID` with [`GroOracleConfig::data_valid`]).
    pub fn input_vnet_hdr(&self) -> [u8; GRO_VNET_HDR_LEN] {
        let mut h = [0u8; GRO_VNET_HDR_LEN];
        if self.config.data_valid {
            h[0] = F_DATA_VALID;
        }
        h
    }

    /// Hands `frames` (at most [`GRO_MAX_BURST`]) to GRO in one NAPI poll and returns what came
    /// out, in order, each with the vnet header the kernel reported.
    ///
    /// `Refused(errno)` when the kernel rejects a frame's write (the frames before it were
    /// queued and are discarded with the next call's drain).
    pub fn coalesce(&self, frames: &[&[u8]]) -> Result<Vec<GroOutput>, OracleError> {
        let hdr = self.input_vnet_hdr();
        let inputs: Vec<(&[u8], &[u8])> = frames.iter().map(|f| (&hdr[..], *f)).collect();
        self.coalesce_with_headers(&inputs)
    }

    /// Like [`GroOracle::coalesce`] with a caller-chosen vnet header per frame (10 or 12 bytes;
    /// a 10-byte one is padded with `num_buffers` = 0).
    pub fn coalesce_with_headers(
        &self,
        inputs: &[(&[u8], &[u8])],
    ) -> Result<Vec<GroOutput>, OracleError> {
        if inputs.len() > GRO_MAX_BURST {
            return Err(OracleError::Invalid(format!(
                "{} frames in one burst (at most {GRO_MAX_BURST}, the NAPI budget)",
                inputs.len()
            )));
        }
        let mut headers = Vec::with_capacity(inputs.len());
        for (hdr, frame) in inputs {
            let mut h = [0u8; GRO_VNET_HDR_LEN];
            match hdr.len() {
                10 | 12 => h[..hdr.len()].copy_from_slice(hdr),
                n => {
                    return Err(OracleError::Invalid(format!(
                        "vnet header of {n} bytes (10 or 12)"
                    )))
                }
            }
            if frame.len() < 14 && !self.config.l3 {
                return Err(OracleError::Invalid("frame shorter than Ethernet".into()));
            }
            if frame.is_empty() {
                return Err(OracleError::Invalid("empty packet".into()));
            }
            headers.push(h);
        }
        let mut buf = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.capture.drain()?;
        // The NAPI thread must be asleep before the burst: if it were still finishing the
        // previous poll, its next sleep would be mistaken for the end of the burst's poll.
        let deadline = Instant::now() + TIMEOUT;
        let before = loop {
            match napi_status(self.napi_pid)? {
                (true, switches) => break switches,
                _ if Instant::now() >= deadline => return Err(OracleError::Timeout),
                _ => std::thread::sleep(Duration::from_micros(100)),
            }
        };
        let cpu = self.cpu;
        let tap = &self.tap;
        // The writer reports how many frames it queued and how it ended.
        let (queued, written) = std::thread::scope(|scope| {
            let writer = scope.spawn(move || -> (usize, Result<(), OracleError>) {
                if let Err(e) = pin_to_cpu(0, cpu).and_then(|()| set_fifo(0, WRITER_PRIORITY)) {
                    return (0, Err(e.into()));
                }
                for (n, (h, (_, frame))) in headers.iter().zip(inputs).enumerate() {
                    if let Err(e) = write_or_refused(tap, h, frame) {
                        return (n, Err(e));
                    }
                }
                (inputs.len(), Ok(()))
            });
            match writer.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        });
        if queued > 0 {
            // The burst's poll must finish before the sentinel's starts. Even when a write was
            // refused, the frames before it are queued: wait for them too.
            let deadline = Instant::now() + TIMEOUT;
            while napi_status(self.napi_pid)?.1 == before {
                if Instant::now() >= deadline {
                    return Err(OracleError::Timeout);
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        written?;
        let nonce = next_nonce();
        self.tap
            .write(&[0u8; GRO_VNET_HDR_LEN], &sentinel(self.config.l3, nonce))?;
        collect_until_sentinel(&self.capture, &mut buf, self.config.l3, nonce)
    }
}

pub(crate) fn write_or_refused(
    tap: &Tap,
    vnet_hdr: &[u8],
    frame: &[u8],
) -> Result<(), OracleError> {
    match tap.write(vnet_hdr, frame) {
        Ok(_) => Ok(()),
        Err(e) => match e.raw_os_error() {
            Some(errno) => Err(OracleError::Refused(errno)),
            None => Err(OracleError::Invalid(e.to_string())),
        },
    }
}

static NONCE: AtomicU64 = AtomicU64::new(1);

pub(crate) fn next_nonce() -> u64 {
    NONCE.fetch_add(1, Ordering::Relaxed)
}

/// The sentinel: a 60-byte broadcast frame (ethertype [`SENTINEL_ETHERTYPE`], magic, nonce), or
/// with `l3` a 36-byte IPv4 packet (198.18.0.1 → 198.18.0.2, protocol [`SENTINEL_IP_PROTO`],
/// magic, nonce).
pub(crate) fn sentinel(l3: bool, nonce: u64) -> Vec<u8> {
    if l3 {
        let mut p = vec![0u8; 36];
        p[..12].copy_from_slice(&[0x45, 0, 0, 36, 0, 0, 0x40, 0, 64, SENTINEL_IP_PROTO, 0, 0]);
        p[12..20].copy_from_slice(&[198, 18, 0, 1, 198, 18, 0, 2]);
        let csum = sluice_checksum::checksum(&p[..20]);
        p[10..12].copy_from_slice(&csum.to_be_bytes());
        p[20..28].copy_from_slice(SENTINEL_MAGIC);
        p[28..36].copy_from_slice(&nonce.to_be_bytes());
        return p;
    }
    let mut f = vec![0u8; 60];
    f[..6].fill(0xff);
    f[6..12].copy_from_slice(&[0x02, 0x53, 0x4c, 0x00, 0x00, 0x01]);
    f[12..14].copy_from_slice(&SENTINEL_ETHERTYPE.to_be_bytes());
    f[14..22].copy_from_slice(SENTINEL_MAGIC);
    f[22..30].copy_from_slice(&nonce.to_be_bytes());
    f
}

/// The nonce of a sentinel frame (`l3`: packet), if `frame` is one.
pub(crate) fn sentinel_nonce(l3: bool, frame: &[u8]) -> Option<u64> {
    let magic = if l3 {
        if frame.first()? >> 4 != 4 || *frame.get(9)? != SENTINEL_IP_PROTO {
            return None;
        }
        20
    } else {
        if frame.get(12..14)? != SENTINEL_ETHERTYPE.to_be_bytes() {
            return None;
        }
        14
    };
    if frame.get(magic..magic + 8)? != SENTINEL_MAGIC {
        return None;
    }
    Some(u64::from_be_bytes(
        frame.get(magic + 8..magic + 16)?.try_into().ok()?,
    ))
}

/// Reads `capture` until the sentinel with `nonce`; returns the frames before it (with their
/// vnet headers, empty without `PACKET_VNET_HDR`). Outgoing frames and older sentinels are
/// skipped.
fn collect_until_sentinel(
    capture: &PacketSocket,
    buf: &mut [u8],
    l3: bool,
    nonce: u64,
) -> Result<Vec<GroOutput>, OracleError> {
    let deadline = Instant::now() + TIMEOUT;
    let mut out = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(OracleError::Timeout);
        }
        let Some(rx) = capture.recv(buf, left)? else {
            return Err(OracleError::Timeout);
        };
        if rx.outgoing() {
            continue;
        }
        let frame = rx.frame(buf);
        match sentinel_nonce(l3, frame) {
            Some(n) if n == nonce => return Ok(out),
            Some(_) => continue,
            None => {}
        }
        if rx.truncated() {
            return Err(OracleError::Io(io::Error::other(format!(
                "captured frame of {} bytes truncated to {}",
                rx.wire_len, rx.len
            ))));
        }
        let hdr = rx.vnet_hdr.map(|h| h.to_vec()).unwrap_or_default();
        out.push(GroOutput {
            vnet_hdr: hdr,
            frame: frame.to_vec(),
        });
    }
}

/// A TAP name whose `napi/NAME-ID` thread name is unique and fits the kernel's 15-byte `comm`.
fn gro_tap_name() -> String {
    format!("g{}", unique_suffix())
}

/// Finds the `napi/NAME-ID` kernel thread of the TAP `name` (it appears when NAPI is made
/// threaded; retried briefly).
fn find_napi_thread(name: &str) -> io::Result<i32> {
    let full = format!("napi/{name}-");
    let prefix = &full[..full.len().min(15)];
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc")?.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(comm) = std::fs::read_to_string(entry.path().join("comm")) else {
                continue;
            };
            if comm.trim_end().starts_with(prefix) {
                found.push(pid);
            }
        }
        match found.as_slice() {
            [pid] => return Ok(*pid),
            [] if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            [] => {
                return Err(io::Error::other(format!(
                    "no `{prefix}*` kernel thread after enabling threaded NAPI on {name}"
                )))
            }
            many => {
                return Err(io::Error::other(format!(
                    "several `{prefix}*` kernel threads: {many:?}"
                )))
            }
        }
    }
}

/// `SCHED_FIFO` priority of the burst writer.
const WRITER_PRIORITY: i32 = 10;
/// `SCHED_FIFO` priority of the NAPI thread: below the writer, so it cannot poll before the burst
/// is written, but above every normal task, so a busy CPU cannot starve it (as a normal task it
/// was observed runnable yet not running for over 10 s on a loaded CPU).
const NAPI_PRIORITY: i32 = 5;

/// The napi thread's status: whether it is asleep (`S`) and its `voluntary_ctxt_switches`.
fn napi_status(pid: i32) -> io::Result<(bool, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let asleep = status
        .lines()
        .find_map(|l| l.strip_prefix("State:"))
        .is_some_and(|v| v.trim_start().starts_with('S'));
    let switches = status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::other(format!("no voluntary_ctxt_switches for pid {pid}")))?;
    Ok((asleep, switches))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_round_trip() {
        let s = sentinel(false, 0x0102_0304_0506_0708);
        assert_eq!(sentinel_nonce(false, &s), Some(0x0102_0304_0506_0708));
        assert_eq!(&s[12..14], &[0x88, 0xb6]);
        assert_eq!(sentinel_nonce(false, &s[..29]), None);
        assert_eq!(sentinel_nonce(true, &s), None);
        let mut other = s.clone();
        other[13] = 0xb5;
        assert_eq!(sentinel_nonce(false, &other), None);
        let mut other = s;
        other[14] ^= 1;
        assert_eq!(sentinel_nonce(false, &other), None);

        let p = sentinel(true, 7);
        assert_eq!(sentinel_nonce(true, &p), Some(7));
        assert_eq!(sentinel_nonce(false, &p), None);
        assert_eq!(
            sluice_checksum::checksum(&p[..20]),
            0,
            "valid IPv4 header checksum"
        );
        let layout = sluice_wire::parse_with(&p, &sluice_wire::ParseConfig::L3).unwrap();
        assert_eq!(layout.outer.l3_end, Some(36));
        let mut other = p;
        other[9] = 17;
        assert_eq!(sentinel_nonce(true, &other), None);
    }

    #[test]
    fn gro_tap_names_fit_the_napi_thread_comm() {
        let name = gro_tap_name();
        // "napi/" + name + "-" must fit the kernel's 15-byte comm to be matched exactly.
        assert!(5 + name.len() < 15, "{name}");
        assert_ne!(name, gro_tap_name());
    }

    #[test]
    fn errors_display_their_cause() {
        let e = OracleError::Refused(22); // EINVAL
        assert!(e.to_string().contains("refused"), "{e}");
        assert!(OracleError::Timeout.to_string().contains("sentinel"));
    }
}
