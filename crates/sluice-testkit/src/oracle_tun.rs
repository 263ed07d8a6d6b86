//! The kernel's software GSO of L3 packets as an oracle: a super-packet written to a TUN
//! (`IFF_TUN | IFF_NO_PI | IFF_VNET_HDR`, offloads negotiated with `TUNSETOFFLOAD`) is redirected
//! by tc (`clsact` + `u32 match u32 0 0 action mirred egress redirect`) to a second TUN in the
//! same namespace whose offloads are all off, so `validate_xmit_skb` segments and checksums it in
//! software; the segments are read from the second TUN's file descriptor, as IP packets.
//!
//! As with [`GsoOracle`](crate::oracle::GsoOracle) a sentinel (here an IPv4 packet of protocol
//! [`SENTINEL_IP_PROTO`](crate::oracle::SENTINEL_IP_PROTO) with a per-call nonce) follows the
//! input, and the outputs are read up to it. The namespace has IPv6 off (`Netns::create`), so the
//! kernel sends nothing of its own through the second TUN.

use std::io;
use std::sync::Mutex;
use std::time::Instant;

use crate::netns::disable_all_offloads;
use crate::oracle::{
    next_nonce, sentinel, sentinel_nonce, write_or_refused, GsoOracleConfig, OracleError, TIMEOUT,
};
use sluice_ports::netns::Netns;
use sluice_ports::poll::wait_readable;
use sluice_ports::tap::{Tap, TapConfig};

const RECV_BUF_LEN: usize = 65536 + 64;
const INPUT_TUN: &str = "sgtun";
const CAPTURE_TUN: &str = "sgtcap";

/// The kernel's software GSO of L3 packets (TUN) as an oracle.
#[derive(Debug)]
pub struct TunGsoOracle {
    tun: Tap,
    capture: Tap,
    state: Mutex<Vec<u8>>,
    capture_features_on: Vec<String>,
    // Dropped last: deleting the namespace removes whatever is left in it.
    _ns: Netns,
}

impl TunGsoOracle {
    /// Builds the namespace, the input TUN (vnet header and offloads from `config`), the
    /// capturing TUN (no vnet header, MTU 65535, every offload off) and the tc redirect.
    pub fn new(config: &GsoOracleConfig) -> io::Result<TunGsoOracle> {
        sluice_ports::require_root()?;
        let ns = Netns::create("sltgso")?;
        let tun_config = TapConfig {
            vnet_hdr_len: config.vnet_hdr_len,
            offloads: config.offloads,
            tun: true,
            ..TapConfig::default()
        };
        let tun = ns.enter(|| Tap::open(INPUT_TUN, &tun_config))??;
        let capture_config = TapConfig {
            tun: true,
            ..TapConfig::default()
        };
        let capture = ns.enter(|| Tap::open(CAPTURE_TUN, &capture_config))??;
        ns.run(&["ip", "link", "set", "dev", CAPTURE_TUN, "mtu", "65535"])?;
        let capture_features_on = disable_all_offloads(&ns, CAPTURE_TUN)?;
        ns.run(&["tc", "qdisc", "add", "dev", INPUT_TUN, "clsact"])?;
        ns.run(&[
            "tc",
            "filter",
            "add",
            "dev",
            INPUT_TUN,
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
            CAPTURE_TUN,
        ])?;
        ns.link_up(INPUT_TUN)?;
        ns.link_up(CAPTURE_TUN)?;
        capture.set_nonblocking(true)?;
        let oracle = TunGsoOracle {
            tun,
            capture,
            state: Mutex::new(vec![0; RECV_BUF_LEN]),
            capture_features_on,
            _ns: ns,
        };
        let mut buf = vec![0; RECV_BUF_LEN];
        oracle.drain(&mut buf)?;
        Ok(oracle)
    }

    /// The `TUN_F_*` offloads the input TUN accepted.
    pub fn offloads(&self) -> u32 {
        self.tun.offloads()
    }

    /// The `virtio_net_hdr` size every [`TunGsoOracle::segment`] call must pass.
    pub fn vnet_hdr_len(&self) -> usize {
        self.tun.vnet_hdr_len()
    }

    /// The capturing TUN's features still on after turning everything off (fixed ones).
    pub fn capture_features_on(&self) -> &[String] {
        &self.capture_features_on
    }

    /// Hands the IP packet `packet` with `vnet_hdr` (exactly [`TunGsoOracle::vnet_hdr_len`]
    /// bytes; `csum_start` and `hdr_len` count from the IP header) to the kernel and returns what
    /// came out, in order: the segments, the packet itself when it needed no segmentation, or
    /// nothing when the kernel dropped it after accepting it.
    ///
    /// `Refused(errno)` when the TUN write fails (the kernel rejected the header or packet).
    pub fn segment(&self, vnet_hdr: &[u8], packet: &[u8]) -> Result<Vec<Vec<u8>>, OracleError> {
        if vnet_hdr.len() != self.tun.vnet_hdr_len() {
            return Err(OracleError::Invalid(format!(
                "vnet header of {} bytes, the oracle's TUN uses {}",
                vnet_hdr.len(),
                self.tun.vnet_hdr_len()
            )));
        }
        let mut buf = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.drain(&mut buf)?;
        write_or_refused(&self.tun, vnet_hdr, packet)?;
        let nonce = next_nonce();
        let zero = [0u8; 24];
        let zero = zero.get(..self.tun.vnet_hdr_len()).unwrap_or_default();
        self.tun.write(zero, &sentinel(true, nonce))?;
        let deadline = Instant::now() + TIMEOUT;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(OracleError::Timeout);
            }
            if !wait_readable(&[std::os::fd::AsRawFd::as_raw_fd(&self.capture)], left)? {
                continue;
            }
            let n = match self.capture.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e.into()),
            };
            if n >= buf.len() {
                return Err(OracleError::Io(io::Error::other(format!(
                    "a packet filled the whole {n}-byte read buffer (truncated)"
                ))));
            }
            let packet = buf.get(..n).unwrap_or_default();
            match sentinel_nonce(true, packet) {
                Some(got) if got == nonce => return Ok(out),
                Some(_) => continue,
                None => out.push(packet.to_vec()),
            }
        }
    }

    /// Reads and discards whatever the capturing TUN holds.
    fn drain(&self, buf: &mut [u8]) -> io::Result<()> {
        loop {
            match self.capture.read(buf) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }
}
