//! `AF_PACKET` raw sockets bound to one interface.
//!
//! [`PacketSocket::bind`] opens a `SOCK_RAW` packet socket for every protocol (`ETH_P_ALL`) bound
//! to one interface of the calling thread's network namespace, with optional `PACKET_VNET_HDR`
//! (a 10-byte `virtio_net_hdr` with every frame), `PACKET_AUXDATA` and promiscuous mode.
//!
//! On receive the kernel has usually moved the outermost VLAN tag out of the data into
//! `skb->vlan_tci`; with `auxdata` it is reported in the control message and [`PacketSocket::recv`]
//! puts it back after the MAC addresses, with its real TPID (0x8100 or 0x88a8), as libpcap does. A
//! `NEEDS_CSUM` vnet header then has its `csum_start` (and a non-zero `hdr_len`) moved by the 4
//! inserted bytes, so the header describes the frame as returned.
//!
//! [`PacketSocket::try_recv_batch`] receives up to [`RECV_BATCH`] frames per system call
//! (`recvmmsg`); [`PacketSocket::send_queued`] sends the frames of a [`SendQueue`], up to
//! [`SEND_BATCH`], per system call (`sendmmsg`); [`PacketSocket::send`] sends one.

use crate::sockopt::{getsockopt, set_socket_buffer, setsockopt, SocketBuffer};
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Size of the `virtio_net_hdr` that `PACKET_VNET_HDR` adds to every frame.
pub const PACKET_VNET_HDR_LEN: usize = 10;
/// Bytes a receive buffer needs in front of the frame for a reinserted VLAN tag.
pub const VLAN_HEADROOM: usize = 4;
/// Most frames [`PacketSocket::try_recv_batch`] receives in one system call.
pub const RECV_BATCH: usize = 32;
/// Most frames a [`SendQueue`] holds (and [`PacketSocket::send_queued`] sends per call).
pub const SEND_BATCH: usize = 64;
/// Bytes of frame data a [`SendQueue`] holds before it is full (a frame larger than this is
/// still queued, alone).
pub const SEND_ARENA: usize = 256 * 1024;
/// `sll_pkttype` of frames this host sent on the interface (`PACKET_OUTGOING`).
pub const PACKET_OUTGOING: u8 = 4;

const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;
const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;

/// `PACKET_FANOUT` socket option.
const PACKET_FANOUT: libc::c_int = 18;
/// `PACKET_FANOUT_HASH`: the group member is chosen by the frame's symmetric flow hash
/// (`__skb_get_hash_symmetric`).
const PACKET_FANOUT_HASH: u32 = 0;
/// `PACKET_FANOUT_FLAG_UNIQUEID`: the kernel picks an unused group id (Linux 4.5+).
const PACKET_FANOUT_FLAG_UNIQUEID: u32 = 0x2000;
/// `PACKET_FANOUT_FLAG_IGNORE_OUTGOING`: the group does not see frames this host sends (Linux
/// 4.20+); a member's own `PACKET_IGNORE_OUTGOING` does not apply inside a group.
const PACKET_FANOUT_FLAG_IGNORE_OUTGOING: u32 = 0x4000;

/// How to open a [`PacketSocket`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AfPacketConfig {
    /// `PACKET_VNET_HDR`: receive a 10-byte `virtio_net_hdr` with every frame (GSO type and size,
    /// checksum state) and send one with every frame.
    pub vnet_hdr: bool,
    /// `PACKET_AUXDATA`: receive the VLAN tag the kernel took out of the frame (and reinsert it).
    pub auxdata: bool,
    /// Put the interface in promiscuous mode (`PACKET_MR_PROMISC`) for the socket's lifetime.
    pub promisc: bool,
}

/// Counts the kernel keeps for an `AF_PACKET` socket ([`PacketSocket::statistics`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SocketStats {
    /// Frames offered to the socket (queued or dropped).
    pub packets: u64,
    /// Frames dropped because the socket's receive queue was full.
    pub drops: u64,
}

/// A VLAN tag as the aux data reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanTag {
    /// Tag protocol identifier: 0x8100 (802.1Q) or 0x88a8 (802.1ad).
    pub tpid: u16,
    /// Tag control information (PCP, DEI, VID).
    pub tci: u16,
}

/// One received frame; its bytes are `buf[frame.range()]` of the buffer given to
/// [`PacketSocket::recv`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvFrame {
    /// Where the frame starts in the buffer (0 when a VLAN tag was reinserted, else
    /// [`VLAN_HEADROOM`]).
    pub offset: usize,
    /// Length of the frame in the buffer (reinserted tag included; at most the buffer's room).
    pub len: usize,
    /// Length of the frame on the wire (reinserted tag included); larger than `len` when the
    /// buffer was too small and the frame was truncated.
    pub wire_len: usize,
    /// The raw `virtio_net_hdr` (only with `vnet_hdr`), `csum_start` adjusted for a reinserted
    /// tag.
    pub vnet_hdr: Option<[u8; PACKET_VNET_HDR_LEN]>,
    /// The VLAN tag that was reinserted into the frame, if any.
    pub vlan: Option<VlanTag>,
    /// `sll_pkttype`: 0 host, 1 broadcast, 2 multicast, 3 other host, 4 outgoing.
    pub pkt_type: u8,
}

impl RecvFrame {
    /// The frame's byte range in the receive buffer.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.len
    }

    /// The frame's bytes in the receive buffer.
    pub fn frame<'b>(&self, buf: &'b [u8]) -> &'b [u8] {
        buf.get(self.range()).unwrap_or_default()
    }

    /// Whether the frame was truncated to fit the buffer.
    pub fn truncated(&self) -> bool {
        self.wire_len > self.len
    }

    /// Whether this host sent the frame (rather than received it).
    pub fn outgoing(&self) -> bool {
        self.pkt_type == PACKET_OUTGOING
    }
}

/// An `AF_PACKET` raw socket bound to one interface.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    ifindex: u32,
    config: AfPacketConfig,
    /// Sends the kernel answered with `ENOBUFS` (every attempt): frames it dropped and said so,
    /// which the interface's `tx_dropped` counts too.
    enobufs: AtomicU64,
}

impl PacketSocket {
    /// Binds to the interface `ifname` of the calling thread's namespace (call it inside
    /// [`crate::Netns::enter`] for a namespace).
    pub fn bind(ifname: &str, config: &AfPacketConfig) -> io::Result<PacketSocket> {
        let ifindex = crate::netns::if_nametoindex(ifname)?;
        Self::bind_index(ifindex, config)
    }

    /// Binds to the interface with index `ifindex` of the calling thread's namespace.
    ///
    /// The socket is opened for no protocol and bound for `ETH_P_ALL`, so it never sees frames of
    /// other interfaces; still, [`PacketSocket::drain`] before relying on an empty queue.
    pub fn bind_index(ifindex: u32, config: &AfPacketConfig) -> io::Result<PacketSocket> {
        // SAFETY: socket has no memory preconditions.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(context("socket(AF_PACKET)"));
        }
        // SAFETY: `raw` is a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let one: libc::c_int = 1;
        if config.vnet_hdr {
            setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &one)
                .map_err(|e| with_context(e, "PACKET_VNET_HDR"))?;
        }
        if config.auxdata {
            setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_AUXDATA, &one)
                .map_err(|e| with_context(e, "PACKET_AUXDATA"))?;
        }
        // SAFETY: sockaddr_ll is plain old data; all-zero is valid.
        let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: `sll` is a valid sockaddr_ll and the length passed is its size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(context(&format!("bind AF_PACKET to ifindex {ifindex}")));
        }
        if config.promisc {
            // SAFETY: packet_mreq is plain old data; all-zero is valid.
            let mut mreq: libc::packet_mreq = unsafe { zeroed() };
            mreq.mr_ifindex = ifindex as i32;
            mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
            setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq)
                .map_err(|e| with_context(e, "PACKET_MR_PROMISC"))?;
        }
        Ok(PacketSocket {
            fd,
            ifindex,
            config: *config,
            enobufs: AtomicU64::new(0),
        })
    }

    /// Sets the receive buffer to `bytes` (`SO_RCVBUFFORCE`, which may exceed
    /// `net.core.rmem_max` for root; `SO_RCVBUF`, capped by it, otherwise). Returns the size the
    /// kernel reports afterwards (it doubles the value asked for, for its bookkeeping).
    pub fn set_rcvbuf(&self, bytes: usize) -> io::Result<usize> {
        set_socket_buffer(&self.fd, SocketBuffer::Receive, bytes / 2)
            .map_err(|e| with_context(e, "SO_RCVBUF"))?;
        let got: libc::c_int = getsockopt(&self.fd, libc::SOL_SOCKET, libc::SO_RCVBUF)
            .map_err(|e| with_context(e, "getsockopt SO_RCVBUF"))?;
        Ok(usize::try_from(got).unwrap_or(0))
    }

    /// Switches `O_NONBLOCK` on or off (as [`crate::AfPacketPort`] opens its socket: a full send
    /// buffer then makes [`PacketSocket::send`] back off and retry for a bounded time instead of
    /// blocking).
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        crate::tap::set_nonblocking(self.fd.as_raw_fd(), nonblocking)
            .map_err(|e| with_context(e, "O_NONBLOCK"))
    }

    /// The kernel's counts since the last call (`PACKET_STATISTICS`, which resets them): frames
    /// the socket was offered and frames it dropped because its receive queue was full.
    pub fn statistics(&self) -> io::Result<SocketStats> {
        let st: libc::tpacket_stats =
            getsockopt(&self.fd, libc::SOL_PACKET, libc::PACKET_STATISTICS)
                .map_err(|e| with_context(e, "PACKET_STATISTICS"))?;
        Ok(SocketStats {
            packets: u64::from(st.tp_packets),
            drops: u64::from(st.tp_drops),
        })
    }

    /// How many sends the kernel refused with `ENOBUFS` so far (each attempt, retries included):
    /// drops the socket was told about.
    pub fn enobufs(&self) -> u64 {
        self.enobufs.load(Ordering::Relaxed)
    }

    /// The interface index the socket is bound to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The configuration the socket was opened with.
    pub fn config(&self) -> &AfPacketConfig {
        &self.config
    }

    /// Receives one frame, waiting up to `timeout` (zero: only what is already queued). Returns
    /// `None` on timeout.
    ///
    /// The frame is written to `buf[VLAN_HEADROOM..]`, or to `buf[0..]` when a VLAN tag from the
    /// aux data is reinserted; use [`RecvFrame::range`]. `buf` must be longer than
    /// [`VLAN_HEADROOM`] + 14.
    pub fn recv(&self, buf: &mut [u8], timeout: Duration) -> io::Result<Option<RecvFrame>> {
        if buf.len() <= VLAN_HEADROOM + 14 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "receive buffer too small",
            ));
        }
        if !self.wait_readable(timeout)? {
            return Ok(None);
        }
        self.recv_now(buf, 0)
    }

    /// Receives one frame if one is queued, without waiting and without a `poll` (one
    /// `recvmsg` with `MSG_DONTWAIT`); `None` when nothing is queued. Otherwise as
    /// [`PacketSocket::recv`].
    pub fn try_recv(&self, buf: &mut [u8]) -> io::Result<Option<RecvFrame>> {
        if buf.len() <= VLAN_HEADROOM + 14 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "receive buffer too small",
            ));
        }
        self.recv_now(buf, libc::MSG_DONTWAIT)
    }

    fn recv_now(&self, buf: &mut [u8], flags: libc::c_int) -> io::Result<Option<RecvFrame>> {
        let mut vnet = [0u8; PACKET_VNET_HDR_LEN];
        let (_, data) = buf.split_at_mut(VLAN_HEADROOM);
        let mut iov = [
            libc::iovec {
                iov_base: vnet.as_mut_ptr() as *mut libc::c_void,
                iov_len: vnet.len(),
            },
            libc::iovec {
                iov_base: data.as_mut_ptr() as *mut libc::c_void,
                iov_len: data.len(),
            },
        ];
        let iov_skip = usize::from(!self.config.vnet_hdr);
        // Room for one tpacket_auxdata control message (u64 for alignment).
        let mut control = [0u64; 16];
        // SAFETY: sockaddr_ll is plain old data; all-zero is valid.
        let mut from: libc::sockaddr_ll = unsafe { zeroed() };
        // SAFETY: msghdr is plain old data; all-zero is valid.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_name = &mut from as *mut libc::sockaddr_ll as *mut libc::c_void;
        msg.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        msg.msg_iov = iov[iov_skip..].as_mut_ptr();
        msg.msg_iovlen = iov.len() - iov_skip;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = size_of::<[u64; 16]>();
        // SAFETY: every pointer in `msg` (name, iovecs into `vnet` and `buf`, control) is valid
        // for writes of the stated lengths for the duration of the call.
        let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_TRUNC | flags) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted {
                return Ok(None);
            }
            return Err(with_context(e, "recvmsg(AF_PACKET)"));
        }
        let vlan = self.vlan_from_control(&msg);
        Ok(Some(self.finish_frame(
            buf,
            n as usize,
            vnet,
            vlan,
            from.sll_pkttype,
        )))
    }

    /// Receives up to [`RECV_BATCH`] queued frames in one `recvmmsg` (`MSG_DONTWAIT`): frame `i`
    /// goes into `room(&mut bufs[i])` (laid out as with [`PacketSocket::recv`]) and is described
    /// by `out[i]` (`out` is cleared first). Returns how many were received (0: nothing queued).
    /// Every room must be longer than [`VLAN_HEADROOM`] + 14; only as many buffers as fit
    /// [`RECV_BATCH`] are used.
    pub fn try_recv_batch<T>(
        &self,
        bufs: &mut [T],
        room: impl for<'a> Fn(&'a mut T) -> &'a mut [u8],
        out: &mut Vec<RecvFrame>,
    ) -> io::Result<usize> {
        out.clear();
        let n = bufs.len().min(RECV_BATCH);
        if n == 0 {
            return Ok(0);
        }
        let empty_iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let mut vnets = [[0u8; PACKET_VNET_HDR_LEN]; RECV_BATCH];
        let mut iovs = [[empty_iov; 2]; RECV_BATCH];
        let mut controls = [[0u64; 16]; RECV_BATCH];
        // SAFETY: sockaddr_ll and mmsghdr are plain old data; all-zero is valid.
        let mut froms: [libc::sockaddr_ll; RECV_BATCH] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; RECV_BATCH] = unsafe { zeroed() };
        let iov_skip = usize::from(!self.config.vnet_hdr);
        for (i, b) in bufs.iter_mut().take(n).enumerate() {
            let r = room(b);
            if r.len() <= VLAN_HEADROOM + 14 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "receive buffer too small",
                ));
            }
            let data = &mut r[VLAN_HEADROOM..];
            iovs[i] = [
                libc::iovec {
                    iov_base: vnets[i].as_mut_ptr() as *mut libc::c_void,
                    iov_len: PACKET_VNET_HDR_LEN,
                },
                libc::iovec {
                    iov_base: data.as_mut_ptr() as *mut libc::c_void,
                    iov_len: data.len(),
                },
            ];
        }
        for i in 0..n {
            let m = &mut msgs[i].msg_hdr;
            m.msg_name = &mut froms[i] as *mut libc::sockaddr_ll as *mut libc::c_void;
            m.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            m.msg_iov = iovs[i][iov_skip..].as_mut_ptr();
            m.msg_iovlen = 2 - iov_skip;
            m.msg_control = controls[i].as_mut_ptr() as *mut libc::c_void;
            m.msg_controllen = size_of::<[u64; 16]>();
        }
        // SAFETY: each of the first `n` mmsghdrs points at its own name, control and iovecs
        // (into `vnets` and the callers' buffers, which are not touched or moved during the
        // call), all valid for writes of the stated lengths; no timeout is passed.
        let got = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_TRUNC | libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if got < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted {
                return Ok(0);
            }
            return Err(with_context(e, "recvmmsg(AF_PACKET)"));
        }
        let got = (got as usize).min(n);
        for (i, b) in bufs.iter_mut().take(got).enumerate() {
            let vlan = self.vlan_from_control(&msgs[i].msg_hdr);
            let total = msgs[i].msg_len as usize;
            out.push(self.finish_frame(room(b), total, vnets[i], vlan, froms[i].sll_pkttype));
        }
        Ok(got)
    }

    /// Describes a frame of `total` bytes (vnet header included) received into
    /// `buf[VLAN_HEADROOM..]`, reinserting `vlan`.
    fn finish_frame(
        &self,
        buf: &mut [u8],
        total: usize,
        vnet: [u8; PACKET_VNET_HDR_LEN],
        vlan: Option<VlanTag>,
        pkt_type: u8,
    ) -> RecvFrame {
        let hdr_len = if self.config.vnet_hdr {
            PACKET_VNET_HDR_LEN
        } else {
            0
        };
        let wire_len = total.saturating_sub(hdr_len);
        let len = wire_len.min(buf.len().saturating_sub(VLAN_HEADROOM));
        let mut frame = RecvFrame {
            offset: VLAN_HEADROOM,
            len,
            wire_len,
            vnet_hdr: self.config.vnet_hdr.then_some(vnet),
            vlan,
            pkt_type,
        };
        if let Some(tag) = vlan {
            if len >= 12 {
                buf.copy_within(VLAN_HEADROOM..VLAN_HEADROOM + 12, 0);
                buf[12..14].copy_from_slice(&tag.tpid.to_be_bytes());
                buf[14..16].copy_from_slice(&tag.tci.to_be_bytes());
                frame.offset = 0;
                frame.len += VLAN_HEADROOM;
                frame.wire_len += VLAN_HEADROOM;
                if let Some(h) = frame.vnet_hdr.as_mut() {
                    shift_vnet_hdr(h, VLAN_HEADROOM as u16);
                }
            }
        }
        frame
    }

    /// Makes this socket the first member of a new `PACKET_FANOUT` group in hash mode
    /// (`PACKET_FANOUT_HASH`, with an id the kernel picks, not seeing outgoing frames), and
    /// returns the group id for [`PacketSocket::join_fanout`].
    ///
    /// In a hash group the kernel hands each received frame to one member, chosen by the
    /// frame's symmetric flow hash (`__skb_get_hash_symmetric`: addresses, protocol and ports of
    /// the outer headers, each pair in a fixed order) over the current number of members, so the
    /// frames of one flow, both directions, go to one socket while the group does not change.
    /// Fragments are not reassembled (no `PACKET_FANOUT_FLAG_DEFRAG`): the switch forwards what
    /// arrives.
    pub fn create_fanout(&self) -> io::Result<u16> {
        let arg =
            (PACKET_FANOUT_HASH | PACKET_FANOUT_FLAG_UNIQUEID | PACKET_FANOUT_FLAG_IGNORE_OUTGOING)
                << 16;
        setsockopt(&self.fd, libc::SOL_PACKET, PACKET_FANOUT, &arg)
            .map_err(|e| with_context(e, "PACKET_FANOUT (new hash group)"))?;
        let mut value: u32 = 0;
        let mut len = size_of::<u32>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes (the size of `value`) through the
        // pointer and the new length through `&mut len`; both live for the call.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_FANOUT,
                &mut value as *mut u32 as *mut libc::c_void,
                &mut len,
            )
        };
        if rc < 0 {
            return Err(context("getsockopt PACKET_FANOUT"));
        }
        // The low 16 bits are the id; type and flags follow.
        Ok((value & 0xffff) as u16)
    }

    /// Joins the `PACKET_FANOUT` hash group `id` made by [`PacketSocket::create_fanout`] on a
    /// socket bound to the same interface (in the same namespace). Fails (`EINVAL`) when no such
    /// group exists there or its socket is bound elsewhere.
    pub fn join_fanout(&self, id: u16) -> io::Result<()> {
        let arg = u32::from(id) | (PACKET_FANOUT_HASH | PACKET_FANOUT_FLAG_IGNORE_OUTGOING) << 16;
        setsockopt(&self.fd, libc::SOL_PACKET, PACKET_FANOUT, &arg)
            .map_err(|e| with_context(e, &format!("PACKET_FANOUT (join hash group {id})")))
    }

    /// Discards every queued frame; returns how many.
    pub fn drain(&self) -> io::Result<usize> {
        // Frames are truncated into this small buffer: only their count matters.
        let mut buf = [0u8; 128];
        let mut n = 0;
        while self.recv(&mut buf, Duration::ZERO)?.is_some() {
            n += 1;
        }
        Ok(n)
    }

    /// Sends one frame on the bound interface. With `vnet_hdr` configured, `vnet_hdr` must be the
    /// 10-byte header (`None` sends an all-zero one); without, it must be `None`. Returns the
    /// frame bytes sent.
    pub fn send(&self, vnet_hdr: Option<&[u8]>, frame: &[u8]) -> io::Result<usize> {
        let zero = [0u8; PACKET_VNET_HDR_LEN];
        let hdr: &[u8] =
            match (self.config.vnet_hdr, vnet_hdr) {
                (true, Some(h)) if h.len() == PACKET_VNET_HDR_LEN => h,
                (true, None) => &zero,
                (false, None) => &[],
                _ => return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "vnet header does not match the socket's PACKET_VNET_HDR setting (10 bytes)",
                )),
            };
        let iov = [
            libc::iovec {
                iov_base: hdr.as_ptr() as *mut libc::c_void,
                iov_len: hdr.len(),
            },
            libc::iovec {
                iov_base: frame.as_ptr() as *mut libc::c_void,
                iov_len: frame.len(),
            },
        ];
        // SAFETY: msghdr is plain old data; all-zero is valid.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = 2;
        let mut backoff = Backoff::new();
        loop {
            // SAFETY: the iovecs point into live slices; sendmsg only reads through them. No
            // name: the bound interface and protocol are used.
            let n = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &msg, 0) };
            if n >= 0 {
                return Ok((n as usize).saturating_sub(hdr.len()));
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted && !backoff.wait(&e, self) {
                return Err(with_context(e, "sendmsg(AF_PACKET)"));
            }
        }
    }

    /// Sends every frame of `q` (with its vnet header when the socket has `PACKET_VNET_HDR`),
    /// up to [`SEND_BATCH`] per `sendmmsg`, and empties `q`. A frame the kernel refuses is
    /// skipped and the rest still go. Returns how many frames were sent and the first error
    /// (with the number of frames that failed).
    pub fn send_queued(&self, q: &mut SendQueue) -> (usize, Option<(usize, io::Error)>) {
        let n = q.spans.len();
        let empty_iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let mut iovs = [[empty_iov; 2]; SEND_BATCH];
        // SAFETY: mmsghdr is plain old data; all-zero is valid.
        let mut msgs: [libc::mmsghdr; SEND_BATCH] = unsafe { zeroed() };
        let iov_skip = usize::from(!self.config.vnet_hdr);
        for (i, &(start, len)) in q.spans.iter().enumerate() {
            iovs[i] = [
                libc::iovec {
                    iov_base: q.hdrs[i].as_ptr() as *mut libc::c_void,
                    iov_len: PACKET_VNET_HDR_LEN,
                },
                libc::iovec {
                    iov_base: q.arena[start..start + len].as_ptr() as *mut libc::c_void,
                    iov_len: len,
                },
            ];
        }
        for (msg, iov) in msgs.iter_mut().zip(iovs.iter_mut()).take(n) {
            msg.msg_hdr.msg_iov = iov[iov_skip..].as_mut_ptr();
            msg.msg_hdr.msg_iovlen = 2 - iov_skip;
        }
        let (mut at, mut sent, mut failed) = (0usize, 0usize, 0usize);
        let mut first_err = None;
        let mut backoff = Backoff::new();
        while at < n {
            // SAFETY: messages `at..n` point at their own iovecs, which point into `q.hdrs`
            // and `q.arena` (not touched during the call); sendmmsg only reads through them.
            // No names: the bound interface and protocol are used.
            let r = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    msgs[at..].as_mut_ptr(),
                    (n - at) as libc::c_uint,
                    0,
                )
            };
            if r > 0 {
                at += r as usize;
                sent += r as usize;
                continue;
            }
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted || backoff.wait(&e, self) {
                continue;
            }
            // The message at `at` failed: count it, keep the first error, go on with the rest.
            failed += 1;
            at += 1;
            first_err.get_or_insert(with_context(e, "sendmmsg(AF_PACKET)"));
        }
        q.clear();
        (sent, first_err.map(|e| (failed, e)))
    }

    fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        self.wait_for(libc::POLLIN, timeout)
    }

    /// Waits up to `timeout` for `events` (`POLLIN`, `POLLOUT`) on the socket.
    fn wait_for(&self, events: libc::c_short, timeout: Duration) -> io::Result<bool> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ms = left.as_millis().min(i32::MAX as u128) as i32;
            let ms = if ms == 0 && !left.is_zero() { 1 } else { ms };
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events,
                revents: 0,
            };
            // SAFETY: `pfd` is one valid pollfd for the duration of the call.
            let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            return Ok(rc > 0);
        }
    }

    fn vlan_from_control(&self, msg: &libc::msghdr) -> Option<VlanTag> {
        if !self.config.auxdata {
            return None;
        }
        // SAFETY: `msg` was filled by recvmsg; CMSG_FIRSTHDR/NXTHDR stay within msg_control.
        let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(msg) };
        while !cmsg.is_null() {
            // SAFETY: `cmsg` is non-null and points at a control header inside `msg_control`.
            let hdr = unsafe { &*cmsg };
            if hdr.cmsg_level == libc::SOL_PACKET
                && hdr.cmsg_type == libc::PACKET_AUXDATA
                && hdr.cmsg_len as usize >= (unsafe_cmsg_len(size_of::<libc::tpacket_auxdata>()))
            {
                // SAFETY: the message is a PACKET_AUXDATA one of sufficient length, so its data
                // holds a tpacket_auxdata; read_unaligned copes with any alignment.
                let aux: libc::tpacket_auxdata = unsafe {
                    std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const libc::tpacket_auxdata)
                };
                let valid = aux.tp_status & TP_STATUS_VLAN_VALID != 0 || aux.tp_vlan_tci != 0;
                if !valid {
                    return None;
                }
                let tpid = if aux.tp_status & TP_STATUS_VLAN_TPID_VALID != 0 {
                    aux.tp_vlan_tpid
                } else {
                    0x8100
                };
                return Some(VlanTag {
                    tpid,
                    tci: aux.tp_vlan_tci,
                });
            }
            // SAFETY: as above; NXTHDR returns null past the end.
            cmsg = unsafe { libc::CMSG_NXTHDR(msg, cmsg) };
        }
        None
    }
}

/// `CMSG_LEN(len)`.
fn unsafe_cmsg_len(len: usize) -> usize {
    // SAFETY: CMSG_LEN is pure arithmetic.
    unsafe { libc::CMSG_LEN(len as u32) as usize }
}

/// Moves a `NEEDS_CSUM` header's `csum_start`, and a non-zero `hdr_len`, by `by` bytes.
fn shift_vnet_hdr(h: &mut [u8; PACKET_VNET_HDR_LEN], by: u16) {
    if h[0] & VIRTIO_NET_HDR_F_NEEDS_CSUM != 0 {
        let csum_start = u16::from_le_bytes([h[6], h[7]]).wrapping_add(by);
        h[6..8].copy_from_slice(&csum_start.to_le_bytes());
    }
    let hdr_len = u16::from_le_bytes([h[2], h[3]]);
    if hdr_len != 0 {
        h[2..4].copy_from_slice(&hdr_len.wrapping_add(by).to_le_bytes());
    }
}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

sluice_coverage::counter!(pub AFPACKET_TX_BACKPRESSURE, "afpacket_tx_backpressure", "AF_PACKET sends the kernel refused for lack of room (EAGAIN, ENOBUFS) and that were retried");

/// How long a send waits, in all, for the kernel to take a frame it refused for lack of room
/// before the frame counts as failed: `EAGAIN` (the socket's send buffer is full; the wait is
/// for `POLLOUT`) or `ENOBUFS` (the device's or a veth peer's queue is full; short pauses).
/// Back-pressure instead of a drop: the datapath thread slows down to the rate the kernel takes.
pub const TX_BACKPRESSURE: Duration = Duration::from_millis(5);

/// One send's back-pressure budget ([`TX_BACKPRESSURE`]).
struct Backoff {
    deadline: Option<Instant>,
}

impl Backoff {
    fn new() -> Backoff {
        Backoff { deadline: None }
    }

    /// After the send failed with `e`: `true` when it should be tried again (having waited),
    /// `false` when the error is not a lack of room or the budget is spent.
    fn wait(&mut self, e: &io::Error, sock: &PacketSocket) -> bool {
        if e.raw_os_error() == Some(libc::ENOBUFS) {
            sock.enobufs.fetch_add(1, Ordering::Relaxed);
        }
        self.wait_with(e, |left| {
            // A poll error leaves the decision to the next attempt's result.
            let _ = sock.wait_for(libc::POLLOUT, left);
        })
    }

    /// [`Backoff::wait`] with the wait for `POLLOUT` given as `poll_out`.
    fn wait_with(&mut self, e: &io::Error, poll_out: impl FnOnce(Duration)) -> bool {
        let room = matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ENOBUFS));
        if !room {
            return false;
        }
        let deadline = *self
            .deadline
            .get_or_insert_with(|| Instant::now() + TX_BACKPRESSURE);
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        AFPACKET_TX_BACKPRESSURE.inc();
        if e.raw_os_error() == Some(libc::EAGAIN) {
            poll_out(left);
        } else {
            std::thread::sleep(left.min(Duration::from_micros(50)));
        }
        true
    }
}

fn context(what: &str) -> io::Error {
    with_context(io::Error::last_os_error(), what)
}

fn with_context(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Frames waiting for one [`PacketSocket::send_queued`]: copies of the frames in one reused
/// arena and their vnet headers. Allocates only when created.
#[derive(Debug)]
pub struct SendQueue {
    arena: Vec<u8>,
    spans: Vec<(usize, usize)>,
    hdrs: Vec<[u8; PACKET_VNET_HDR_LEN]>,
}

impl Default for SendQueue {
    fn default() -> Self {
        SendQueue::new()
    }
}

impl SendQueue {
    /// An empty queue with room for [`SEND_BATCH`] frames and [`SEND_ARENA`] bytes.
    pub fn new() -> SendQueue {
        SendQueue {
            arena: Vec::with_capacity(SEND_ARENA),
            spans: Vec::with_capacity(SEND_BATCH),
            hdrs: Vec::with_capacity(SEND_BATCH),
        }
    }

    /// Whether `frame_len` more bytes can be queued now: fewer than [`SEND_BATCH`] frames
    /// queued, and the frame fits the arena (or the queue is empty).
    pub fn has_room(&self, frame_len: usize) -> bool {
        self.spans.len() < SEND_BATCH
            && (self.spans.is_empty() || self.arena.len() + frame_len <= SEND_ARENA)
    }

    /// Queues a copy of `frame` with its vnet header (ignored by a socket without
    /// `PACKET_VNET_HDR`). Returns false, queuing nothing, when [`SendQueue::has_room`] says no.
    pub fn push(&mut self, hdr: [u8; PACKET_VNET_HDR_LEN], frame: &[u8]) -> bool {
        if !self.has_room(frame.len()) {
            return false;
        }
        let start = self.arena.len();
        self.arena.extend_from_slice(frame);
        self.spans.push((start, frame.len()));
        self.hdrs.push(hdr);
        true
    }

    /// Frames queued.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Forgets every queued frame (keeping the memory).
    pub fn clear(&mut self) {
        self.arena.clear();
        self.spans.clear();
        self.hdrs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_retries_only_a_lack_of_room_and_only_within_its_budget() {
        let err = |n| io::Error::from_raw_os_error(n);
        let mut b = Backoff::new();
        assert!(!b.wait_with(&err(libc::EINVAL), |_| panic!("no poll for EINVAL")));
        assert!(!b.wait_with(&err(libc::ENETDOWN), |_| panic!("no poll")));
        let mut polled = 0;
        assert!(b.wait_with(&err(libc::EAGAIN), |left| {
            assert!(left <= TX_BACKPRESSURE);
            polled += 1;
        }));
        assert_eq!(polled, 1);
        // ENOBUFS pauses without a poll; the budget runs out.
        let mut tries = 0;
        while b.wait_with(&err(libc::ENOBUFS), |_| panic!("no poll for ENOBUFS")) {
            tries += 1;
            assert!(tries < 100_000, "the budget must run out");
        }
        assert!(tries > 0);
    }

    #[test]
    fn shift_moves_csum_start_and_hdr_len_of_needs_csum_headers() {
        // flags NEEDS_CSUM, gso TCPV4, hdr_len 66, gso_size 1448, csum_start 34, csum_offset 16
        let mut h = [1, 1, 66, 0, 0xa8, 0x05, 34, 0, 16, 0];
        shift_vnet_hdr(&mut h, 4);
        assert_eq!(h, [1, 1, 70, 0, 0xa8, 0x05, 38, 0, 16, 0]);
        // Without NEEDS_CSUM csum_start means nothing and stays; hdr_len 0 stays 0.
        let mut h = [2, 0, 0, 0, 0, 0, 7, 0, 0, 0];
        shift_vnet_hdr(&mut h, 4);
        assert_eq!(h, [2, 0, 0, 0, 0, 0, 7, 0, 0, 0]);
    }

    #[test]
    fn recv_frame_ranges() {
        let f = RecvFrame {
            offset: 4,
            len: 3,
            wire_len: 5,
            vnet_hdr: None,
            vlan: None,
            pkt_type: PACKET_OUTGOING,
        };
        let buf = [9, 9, 9, 9, 1, 2, 3, 9];
        assert_eq!(f.frame(&buf), &[1, 2, 3]);
        assert!(f.truncated() && f.outgoing());
        assert_eq!(f.frame(&buf[..5]), &[] as &[u8]);
    }
}
