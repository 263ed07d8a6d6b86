//! A network device's state straight from the kernel, without running `ip` or `ethtool`.
//!
//! - **Link** ([`LinkState`]: MTU, `gso_max_size`, `gso_max_segs`, operational state): one
//!   `RTM_GETLINK` request by name on a `NETLINK_ROUTE` socket, its reply decoded with
//!   `netlink-packet-route` ([`parse_link_reply`]).
//! - **Features** (what `ethtool -k` shows, with `[fixed]`): the `SIOCETHTOOL` ioctl —
//!   `ETHTOOL_GSSET_INFO` for the number of `ETH_SS_FEATURES` strings, `ETHTOOL_GSTRINGS` for
//!   their names (the kernel's own, e.g. `tx-checksum-ip-generic`), `ETHTOOL_GFEATURES` for the
//!   available / requested / active / never-changed bit blocks ([`parse_feature_names`],
//!   [`features_from_blocks`]); changed with `ETHTOOL_SFEATURES` ([`NetDev::set_feature`]).
//!
//! A [`NetDev`] opens both sockets in the calling thread's network namespace and keeps them: a
//! socket stays in the namespace it was made in, so later calls from any thread reach the same
//! device. Every call is a few system calls (microseconds), but each takes the kernel's RTNL
//! lock, so none belongs on a datapath thread: the switch makes them on its control side.

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST,
};
use netlink_packet_route::link::{LinkAttribute, LinkMessage, State};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use sluice_datapath::port::EthtoolFeature;
use sluice_offload::features::Feature;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `SIOCETHTOOL` (`linux/sockios.h`).
const SIOCETHTOOL: libc::c_ulong = 0x8946;
/// `ETHTOOL_GSTRINGS`.
const ETHTOOL_GSTRINGS: u32 = 0x1b;
/// `ETHTOOL_GSSET_INFO`.
const ETHTOOL_GSSET_INFO: u32 = 0x37;
/// `ETHTOOL_GFEATURES`.
const ETHTOOL_GFEATURES: u32 = 0x3a;
/// `ETHTOOL_SFEATURES`.
const ETHTOOL_SFEATURES: u32 = 0x3b;
/// `ETH_SS_FEATURES`: the string set of feature names.
const ETH_SS_FEATURES: u32 = 4;
/// `ETH_GSTRING_LEN`: every string of a set is this long, NUL-padded.
const ETH_GSTRING_LEN: usize = 32;
/// At most this many feature names are accepted from the kernel (it has about 70).
const MAX_FEATURES: usize = 1024;

/// What `RTM_GETLINK` says about a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkState {
    /// Interface index.
    pub index: u32,
    /// `IFLA_MTU`.
    pub mtu: u32,
    /// `IFLA_GSO_MAX_SIZE`: the largest GSO packet the device takes (65536 when absent).
    pub gso_max_size: u32,
    /// `IFLA_GSO_MAX_SEGS` (65535 when absent).
    pub gso_max_segs: u32,
    /// `IFLA_OPERSTATE` is `UP` or `UNKNOWN` (a TAP or loopback that does not report one).
    pub oper_up: bool,
}

/// The `RTM_GETLINK` request for `ifname` with sequence number `seq`, as bytes.
pub fn link_request(ifname: &str, seq: u32) -> Vec<u8> {
    let mut link = LinkMessage::default();
    link.attributes
        .push(LinkAttribute::IfName(ifname.to_string()));
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_ACK;
    header.sequence_number = seq;
    let mut msg = NetlinkMessage::new(
        header,
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::GetLink(link)),
    );
    msg.finalize();
    let mut buf = vec![0u8; msg.buffer_len()];
    msg.serialize(&mut buf);
    buf
}

/// What one datagram of replies to a [`link_request`] held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkReply {
    /// The link.
    Link(LinkState),
    /// The kernel's error (a negative errno as an [`io::Error`], e.g. `ENODEV`).
    Error(i32),
    /// An acknowledgement or messages of another sequence number only: read on.
    Nothing,
}

/// Decodes one datagram of netlink messages read after [`link_request`] with sequence number
/// `seq`; messages of other sequence numbers are skipped. Malformed bytes are an error, never a
/// panic.
pub fn parse_link_reply(mut bytes: &[u8], seq: u32) -> io::Result<LinkReply> {
    let mut out = LinkReply::Nothing;
    while bytes.len() >= 16 {
        let len = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        if len < 16 || len > bytes.len() {
            return Err(bad(format!(
                "netlink message of {len} bytes in a datagram of {}",
                bytes.len()
            )));
        }
        let (one, rest) = bytes.split_at(len);
        // Messages are 4-byte aligned in the datagram.
        bytes = rest.get(len.next_multiple_of(4) - len..).unwrap_or(&[]);
        let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(one)
            .map_err(|e| bad(format!("RTM_GETLINK reply: {e}")))?;
        if msg.header.sequence_number != seq {
            continue;
        }
        match msg.payload {
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(link)) => {
                out = LinkReply::Link(link_state(&link));
            }
            NetlinkPayload::Error(e) => {
                if let Some(code) = e.code {
                    return Ok(LinkReply::Error(-code.get()));
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

fn link_state(link: &LinkMessage) -> LinkState {
    let mut st = LinkState {
        index: link.header.index,
        mtu: 0,
        gso_max_size: 65536,
        gso_max_segs: 65535,
        oper_up: false,
    };
    for a in &link.attributes {
        match a {
            LinkAttribute::Mtu(m) => st.mtu = *m,
            LinkAttribute::GsoMaxSize(s) => st.gso_max_size = *s,
            LinkAttribute::GsoMaxSegs(s) => st.gso_max_segs = *s,
            LinkAttribute::OperState(s) => st.oper_up = matches!(s, State::Up | State::Unknown),
            _ => {}
        }
    }
    st
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// The feature names of an `ETHTOOL_GSTRINGS` reply's data (`count` strings of
/// 32 bytes (`ETH_GSTRING_LEN`), NUL-padded), in bit order; a name that is not UTF-8 is kept
/// empty (and so never matches a [`Feature`]).
pub fn parse_feature_names(data: &[u8], count: usize) -> Vec<String> {
    data.chunks(ETH_GSTRING_LEN)
        .take(count)
        .map(|s| {
            let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
            std::str::from_utf8(s.get(..end).unwrap_or(&[]))
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

/// One `struct ethtool_get_features_block` of `ETHTOOL_GFEATURES`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeatureBlock {
    /// Features the device can change (`hw_features`).
    pub available: u32,
    /// Features asked for (`wanted_features`).
    pub requested: u32,
    /// Features on (`features`).
    pub active: u32,
    /// Features that can never change (`NETIF_F_NEVER_CHANGE`).
    pub never_changed: u32,
}

/// The features Sluice knows among `names` (bit `i` is `names[i]`), with their state in
/// `blocks` as `ethtool -k` shows it: on when active, `[fixed]` when not available or never
/// changed. Names Sluice does not know are skipped.
pub fn features_from_blocks(names: &[String], blocks: &[FeatureBlock]) -> Vec<EthtoolFeature> {
    names
        .iter()
        .enumerate()
        .filter_map(|(i, name)| {
            let feature = name.parse::<Feature>().ok()?;
            let b = blocks.get(i / 32)?;
            let bit = 1u32 << (i % 32);
            Some(EthtoolFeature {
                feature,
                on: b.active & bit != 0,
                fixed: b.available & bit == 0 || b.never_changed & bit != 0,
            })
        })
        .collect()
}

/// A device's kernel state: sockets opened in its network namespace. See the
/// [module documentation](self).
#[derive(Debug)]
pub struct NetDev {
    ifname: String,
    /// `AF_INET` datagram socket for `SIOCETHTOOL`.
    ioctl: OwnedFd,
    /// `NETLINK_ROUTE` socket, connected to the kernel.
    route: Socket,
    seq: u32,
    /// The feature names of the device (`ETH_SS_FEATURES`), read once.
    names: Vec<String>,
}

impl NetDev {
    /// Opens the sockets for `ifname` in the calling thread's network namespace and reads the
    /// device's feature names.
    pub fn open(ifname: &str) -> io::Result<NetDev> {
        if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("interface name {ifname:?}: 1 to 15 bytes"),
            ));
        }
        // SAFETY: plain socket(2) call; the descriptor is owned right after.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("ethtool socket: {e}")));
        }
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        let ioctl = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut route = Socket::new(NETLINK_ROUTE)
            .map_err(|e| io::Error::new(e.kind(), format!("NETLINK_ROUTE socket: {e}")))?;
        route
            .bind_auto()
            .map_err(|e| io::Error::new(e.kind(), format!("bind NETLINK_ROUTE socket: {e}")))?;
        route
            .connect(&SocketAddr::new(0, 0))
            .map_err(|e| io::Error::new(e.kind(), format!("connect NETLINK_ROUTE socket: {e}")))?;
        let mut dev = NetDev {
            ifname: ifname.to_string(),
            ioctl,
            route,
            seq: 0,
            names: Vec::new(),
        };
        dev.names = dev.read_names()?;
        Ok(dev)
    }

    /// The interface name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// The link's MTU, GSO limits and operational state (`RTM_GETLINK`).
    pub fn link(&mut self) -> io::Result<LinkState> {
        let ctx =
            |e: io::Error| io::Error::new(e.kind(), format!("RTM_GETLINK {}: {e}", self.ifname));
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let req = link_request(&self.ifname, seq);
        self.route.send(&req, 0).map_err(ctx)?;
        let mut link = None;
        let mut buf = vec![0u8; 32 * 1024];
        // The reply is the link, then the acknowledgement (or the error alone).
        loop {
            let n = self.route.recv(&mut &mut buf[..], 0).map_err(ctx)?;
            let got = buf.get(..n).unwrap_or(&[]);
            match parse_link_reply(got, seq).map_err(ctx)? {
                LinkReply::Link(st) => link = Some(st),
                LinkReply::Error(errno) => return Err(ctx(io::Error::from_raw_os_error(errno))),
                LinkReply::Nothing => {}
            }
            // The acknowledgement ends the exchange; it comes in the datagram after the link
            // (or with it).
            if is_ack(got, seq) {
                break;
            }
        }
        link.ok_or_else(|| ctx(bad("acknowledged without a link".into())))
    }

    /// The device's features that Sluice knows, as `ethtool -k` shows them.
    pub fn features(&self) -> io::Result<Vec<EthtoolFeature>> {
        let blocks = self.read_blocks()?;
        Ok(features_from_blocks(&self.names, &blocks))
    }

    /// Asks the kernel to turn `feature` on or off (`ETHTOOL_SFEATURES`) and returns the
    /// features afterwards (the kernel may change dependent ones). Fails when the device does
    /// not report the feature, or when the kernel refuses the request; whether the feature took
    /// is for the caller to check in the result (the kernel says "not all as wished" only in a
    /// flag).
    pub fn set_feature(&self, feature: Feature, on: bool) -> io::Result<Vec<EthtoolFeature>> {
        let Some(i) = self.names.iter().position(|n| n == feature.name()) else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{}: the kernel reports no feature {feature}", self.ifname),
            ));
        };
        let blocks = self.names.len().div_ceil(32);
        // struct ethtool_sfeatures { u32 cmd; u32 size; { u32 valid; u32 requested; }[size] }
        let mut req = vec![0u32; 2 + 2 * blocks];
        req[0] = ETHTOOL_SFEATURES;
        req[1] = blocks as u32;
        let bit = 1u32 << (i % 32);
        let at = 2 + 2 * (i / 32);
        req[at] = bit;
        if on {
            req[at + 1] = bit;
        }
        self.ethtool(req.as_mut_ptr().cast()).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "ETHTOOL_SFEATURES {} {feature} {}: {e}",
                    self.ifname,
                    if on { "on" } else { "off" }
                ),
            )
        })?;
        self.features()
    }

    fn read_names(&self) -> io::Result<Vec<String>> {
        // struct ethtool_sset_info { u32 cmd; u32 reserved; u64 sset_mask; u32 data[1]; }
        let mut info = [0u64; 3];
        let mut head = [0u8; 8];
        head[..4].copy_from_slice(&ETHTOOL_GSSET_INFO.to_ne_bytes());
        info[0] = u64::from_ne_bytes(head);
        info[1] = 1 << ETH_SS_FEATURES;
        self.ethtool(info.as_mut_ptr().cast())
            .map_err(|e| self.ctx("ETHTOOL_GSSET_INFO", e))?;
        if info[1] & (1 << ETH_SS_FEATURES) == 0 {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{}: no feature names (ETH_SS_FEATURES)", self.ifname),
            ));
        }
        let bytes = info[2].to_ne_bytes();
        let count = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        if count > MAX_FEATURES {
            return Err(bad(format!("{}: {count} feature names", self.ifname)));
        }
        // struct ethtool_gstrings { u32 cmd; u32 string_set; u32 len; u8 data[]; }
        let words = 3 + (count * ETH_GSTRING_LEN).div_ceil(4);
        let mut req = vec![0u32; words];
        req[0] = ETHTOOL_GSTRINGS;
        req[1] = ETH_SS_FEATURES;
        req[2] = count as u32;
        self.ethtool(req.as_mut_ptr().cast())
            .map_err(|e| self.ctx("ETHTOOL_GSTRINGS", e))?;
        let got = (req[2] as usize).min(count);
        let data: Vec<u8> = req[3..].iter().flat_map(|w| w.to_ne_bytes()).collect();
        Ok(parse_feature_names(&data, got))
    }

    fn read_blocks(&self) -> io::Result<Vec<FeatureBlock>> {
        let n = self.names.len().div_ceil(32);
        // struct ethtool_gfeatures { u32 cmd; u32 size; ethtool_get_features_block[size]; }
        let mut req = vec![0u32; 2 + 4 * n];
        req[0] = ETHTOOL_GFEATURES;
        req[1] = n as u32;
        self.ethtool(req.as_mut_ptr().cast())
            .map_err(|e| self.ctx("ETHTOOL_GFEATURES", e))?;
        Ok(req[2..]
            .chunks_exact(4)
            .map(|b| FeatureBlock {
                available: b[0],
                requested: b[1],
                active: b[2],
                never_changed: b[3],
            })
            .collect())
    }

    fn ctx(&self, what: &str, e: io::Error) -> io::Error {
        io::Error::new(e.kind(), format!("{what} {}: {e}", self.ifname))
    }

    /// `ioctl(SIOCETHTOOL)` on the device with `data` as `ifr_data`.
    fn ethtool(&self, data: *mut libc::c_void) -> io::Result<()> {
        // SAFETY: an all-zero ifreq is valid.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in ifr.ifr_name.iter_mut().zip(self.ifname.bytes()) {
            *d = s as libc::c_char;
        }
        ifr.ifr_ifru.ifru_data = data.cast();
        // SAFETY: `ifr` names the device (NUL-terminated: the name is shorter than IFNAMSIZ)
        // and points at a command buffer the caller sized for the command it holds, live for
        // the call.
        let rc = unsafe { libc::ioctl(self.ioctl.as_raw_fd(), SIOCETHTOOL, &mut ifr) };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

/// Whether a datagram holds the acknowledgement (an error message with code 0) or an error for
/// `seq`.
fn is_ack(mut bytes: &[u8], seq: u32) -> bool {
    while bytes.len() >= 16 {
        let len = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        let kind = u16::from_ne_bytes([bytes[4], bytes[5]]);
        let s = u32::from_ne_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if s == seq && kind == libc::NLMSG_ERROR as u16 {
            return true;
        }
        if len < 16 || len > bytes.len() {
            return false;
        }
        bytes = bytes.get(len.next_multiple_of(4)..).unwrap_or(&[]);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nlmsg(kind: u16, flags: u16, seq: u32, body: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(&flags.to_ne_bytes());
        v.extend_from_slice(&seq.to_ne_bytes());
        v.extend_from_slice(&4242u32.to_ne_bytes());
        v.extend_from_slice(body);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    fn attr(kind: u16, data: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(data);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    /// An `RTM_NEWLINK` (16) for index 7, `vx0`, MTU 1400, GSO 32768 / 100 segments, oper
    /// state `oper`.
    fn new_link(seq: u32, oper: u8) -> Vec<u8> {
        // struct ifinfomsg: family, pad, type (ARPHRD_ETHER), index, flags, change.
        let mut body = vec![0u8, 0];
        body.extend_from_slice(&1u16.to_ne_bytes());
        body.extend_from_slice(&7i32.to_ne_bytes());
        body.extend_from_slice(&0x1043u32.to_ne_bytes());
        body.extend_from_slice(&0u32.to_ne_bytes());
        body.extend(attr(3, b"vx0\0")); // IFLA_IFNAME
        body.extend(attr(4, &1400u32.to_ne_bytes())); // IFLA_MTU
        body.extend(attr(16, &[oper])); // IFLA_OPERSTATE
        body.extend(attr(40, &100u32.to_ne_bytes())); // IFLA_GSO_MAX_SEGS
        body.extend(attr(41, &32768u32.to_ne_bytes())); // IFLA_GSO_MAX_SIZE
        nlmsg(16, 0, seq, &body)
    }

    /// An `NLMSG_ERROR` (2) with `code` for a request with `seq`.
    fn error(seq: u32, code: i32) -> Vec<u8> {
        let mut body = code.to_ne_bytes().to_vec();
        // The request's header, as the kernel echoes it (without the payload: NLM_F_CAPPED).
        body.extend_from_slice(&nlmsg(18, 5, seq, &[])[..16]);
        nlmsg(2, 0x100, seq, &body)
    }

    #[test]
    fn the_getlink_request_is_byte_exact() {
        let got = link_request("veth0", 7);
        let mut want = Vec::new();
        want.extend_from_slice(&44u32.to_ne_bytes()); // 16 + 16 + 12
        want.extend_from_slice(&18u16.to_ne_bytes()); // RTM_GETLINK
        want.extend_from_slice(&5u16.to_ne_bytes()); // NLM_F_REQUEST | NLM_F_ACK
        want.extend_from_slice(&7u32.to_ne_bytes());
        want.extend_from_slice(&0u32.to_ne_bytes());
        want.extend_from_slice(&[0u8; 16]); // ifinfomsg: any family, index 0
        want.extend_from_slice(&10u16.to_ne_bytes());
        want.extend_from_slice(&3u16.to_ne_bytes()); // IFLA_IFNAME
        want.extend_from_slice(b"veth0\0\0\0");
        assert_eq!(got, want);
    }

    #[test]
    fn a_newlink_reply_gives_mtu_gso_limits_and_oper_state() {
        let reply = new_link(9, 6); // IF_OPER_UP
        assert_eq!(
            parse_link_reply(&reply, 9).unwrap(),
            LinkReply::Link(LinkState {
                index: 7,
                mtu: 1400,
                gso_max_size: 32768,
                gso_max_segs: 100,
                oper_up: true,
            })
        );
        assert!(!is_ack(&reply, 9));
        // IF_OPER_DOWN.
        let LinkReply::Link(st) = parse_link_reply(&new_link(9, 2), 9).unwrap() else {
            panic!("no link");
        };
        assert!(!st.oper_up);
        // Another request's reply is skipped.
        assert_eq!(parse_link_reply(&reply, 10).unwrap(), LinkReply::Nothing);
        // The link and its acknowledgement in one datagram.
        let mut both = reply.clone();
        both.extend(error(9, 0));
        assert!(matches!(
            parse_link_reply(&both, 9).unwrap(),
            LinkReply::Link(_)
        ));
        assert!(is_ack(&both, 9));
    }

    #[test]
    fn gso_limits_default_when_the_kernel_omits_them() {
        let mut body = vec![0u8; 4];
        body.extend_from_slice(&3i32.to_ne_bytes());
        body.extend_from_slice(&[0u8; 8]);
        body.extend(attr(4, &9000u32.to_ne_bytes()));
        let LinkReply::Link(st) = parse_link_reply(&nlmsg(16, 0, 1, &body), 1).unwrap() else {
            panic!("no link");
        };
        assert_eq!(
            (
                st.index,
                st.mtu,
                st.gso_max_size,
                st.gso_max_segs,
                st.oper_up
            ),
            (3, 9000, 65536, 65535, false)
        );
    }

    #[test]
    fn an_error_reply_carries_the_errno() {
        let reply = error(4, -libc::ENODEV);
        assert_eq!(
            parse_link_reply(&reply, 4).unwrap(),
            LinkReply::Error(libc::ENODEV)
        );
        assert!(is_ack(&reply, 4));
        assert_eq!(
            parse_link_reply(&error(4, 0), 4).unwrap(),
            LinkReply::Nothing
        );
    }

    #[test]
    fn broken_replies_are_errors_not_panics() {
        let mut whole = new_link(3, 6);
        whole.extend(error(3, 0));
        for cut in 0..whole.len() {
            let _ = parse_link_reply(&whole[..cut], 3);
            let _ = is_ack(&whole[..cut], 3);
        }
        // A length beyond the datagram.
        let mut long = new_link(3, 6);
        long[0] = 0xff;
        assert!(parse_link_reply(&long, 3).is_err());
        // Every byte flipped in turn.
        for i in 0..whole.len() {
            let mut v = whole.clone();
            v[i] ^= 0xa5;
            let _ = parse_link_reply(&v, 3);
            let _ = is_ack(&v, 3);
        }
    }

    #[test]
    fn feature_names_and_blocks_give_ethtool_k_lines() {
        let mut data = Vec::new();
        for name in [
            "tx-scatter-gather",
            "tx-checksum-ipv4",
            "highdma",
            "tx-tcp-segmentation",
            "rx-gro",
            "rx-gro-hw",
        ] {
            let mut s = name.as_bytes().to_vec();
            s.resize(ETH_GSTRING_LEN, 0);
            data.extend(s);
        }
        let names = parse_feature_names(&data, 6);
        assert_eq!(names[2], "highdma");
        assert_eq!(names.len(), 6);
        // A count larger than the data: only the whole strings there are.
        assert_eq!(parse_feature_names(&data[..70], 6).len(), 3);
        let blocks = [FeatureBlock {
            // tx-gro-hw (bit 5) not changeable; tx-tcp-segmentation (bit 3) never changes.
            available: 0b01_1111,
            requested: 0b01_1001,
            active: 0b01_1001,
            never_changed: 0b00_1000,
        }];
        let f = features_from_blocks(&names, &blocks);
        let line = |feature| EthtoolFeature {
            feature,
            on: false,
            fixed: false,
        };
        assert_eq!(
            f,
            vec![
                EthtoolFeature {
                    on: true,
                    ..line(Feature::TxSg)
                },
                line(Feature::TxCsumIpv4),
                // highdma is not a Sluice feature: skipped.
                EthtoolFeature {
                    on: true,
                    fixed: true,
                    ..line(Feature::Tso)
                },
                EthtoolFeature {
                    on: true,
                    ..line(Feature::RxGro)
                },
                EthtoolFeature {
                    fixed: true,
                    ..line(Feature::RxGroHw)
                },
            ]
        );
        // Names beyond the blocks the kernel returned are left out.
        assert!(features_from_blocks(&names, &[]).is_empty());
    }
}
