//! A connected UDP socket with the kernel's UDP segmentation offloads: `UDP_SEGMENT` (one
//! `sendmsg` carries many datagrams of one size, split by the kernel or the NIC) and `UDP_GRO`
//! (one `recvmsg` returns many datagrams of one flow, with their size). This is how userspace
//! tunnels (wireguard-go, Tailscale) move their wire packets; `examples/sluice-vpn` uses it with
//! Sluice's L3 GSO and GRO on the TUN side.
//!
//! Limits of one [`UdpGsoSocket::send_segments`] call (the kernel's): at most
//! [`UDP_MAX_SEGMENTS`] datagrams, all but the last exactly `segment` bytes long, the whole
//! under 64 KiB with the IP and UDP headers ([`UDP_GSO_MAX_PAYLOAD`]).

use crate::sockopt::{set_socket_buffer, setsockopt, SocketBuffer};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

/// Most datagrams one `UDP_SEGMENT` send may carry (the kernel's `UDP_MAX_SEGMENTS`).
pub const UDP_MAX_SEGMENTS: usize = 64;

/// Most payload bytes one `UDP_SEGMENT` send may carry over IPv6 (65,535 less the IPv6 and UDP
/// headers; over IPv4 the kernel allows 20 bytes more).
pub const UDP_GSO_MAX_PAYLOAD: usize = 65_535 - 40 - 8;

/// A connected, non-blocking UDP socket that sends with `UDP_SEGMENT` and receives with
/// `UDP_GRO`. See the [module documentation](self).
#[derive(Debug)]
pub struct UdpGsoSocket {
    sock: UdpSocket,
    gro: bool,
}

/// Space for one control message holding a `T`.
const fn cmsg_space<T>() -> usize {
    let align = std::mem::size_of::<usize>();
    let hdr = (std::mem::size_of::<libc::cmsghdr>() + align - 1) & !(align - 1);
    let data = (std::mem::size_of::<T>() + align - 1) & !(align - 1);
    hdr + data
}

/// A control-message buffer aligned for `cmsghdr`.
#[repr(C, align(8))]
struct CmsgBuf([u8; 64]);

impl UdpGsoSocket {
    /// Binds to `local` and makes the socket non-blocking. `gro`: ask for coalesced receives
    /// (`UDP_GRO`); without it every receive is one datagram. Connect it
    /// ([`UdpGsoSocket::connect`]) before sending.
    pub fn bind(local: SocketAddr, gro: bool) -> io::Result<UdpGsoSocket> {
        let ctx = |what: &str, e: io::Error| io::Error::new(e.kind(), format!("{what}: {e}"));
        let sock = UdpSocket::bind(local).map_err(|e| ctx(&format!("bind {local}"), e))?;
        sock.set_nonblocking(true)
            .map_err(|e| ctx("O_NONBLOCK", e))?;
        if gro {
            setsockopt(&sock, libc::SOL_UDP, libc::UDP_GRO, &1 as &libc::c_int)
                .map_err(|e| ctx("setsockopt UDP_GRO", e))?;
        }
        Ok(UdpGsoSocket { sock, gro })
    }

    /// Connects to `peer`: sends go there, and only its datagrams are received.
    pub fn connect(&self, peer: SocketAddr) -> io::Result<()> {
        self.sock
            .connect(peer)
            .map_err(|e| io::Error::new(e.kind(), format!("connect {peer}: {e}")))
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// Sets the send and receive buffer sizes (`SO_SNDBUFFORCE` / `SO_RCVBUFFORCE` as root, else
    /// up to the system's limits).
    pub fn set_buffers(&self, bytes: usize) -> io::Result<()> {
        set_socket_buffer(&self.sock, SocketBuffer::Send, bytes)?;
        set_socket_buffer(&self.sock, SocketBuffer::Receive, bytes)
    }

    /// Sends the concatenation of `parts` to the peer in one `sendmsg`: with `segment`
    /// (`UDP_SEGMENT`), as datagrams of that many bytes (the last may be shorter); without, as
    /// one datagram. At most [`UDP_MAX_SEGMENTS`] parts. Returns the bytes sent; `WouldBlock`
    /// when the send buffer is full.
    pub fn send_segments(&self, parts: &[&[u8]], segment: Option<u16>) -> io::Result<usize> {
        if parts.len() > UDP_MAX_SEGMENTS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} parts in one send (at most {UDP_MAX_SEGMENTS})",
                    parts.len()
                ),
            ));
        }
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let mut iov = [empty; UDP_MAX_SEGMENTS];
        for (v, p) in iov.iter_mut().zip(parts) {
            v.iov_base = p.as_ptr().cast_mut().cast();
            v.iov_len = p.len();
        }
        self.sendmsg(iov.get(..parts.len()).unwrap_or(&[]), segment)
    }

    fn sendmsg(&self, iov: &[libc::iovec], segment: Option<u16>) -> io::Result<usize> {
        let mut cbuf = CmsgBuf([0; 64]);
        // SAFETY: msghdr is plain old data; all-zero is a valid empty message.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_ptr().cast_mut();
        msg.msg_iovlen = iov.len();
        if let Some(size) = segment {
            msg.msg_control = cbuf.0.as_mut_ptr().cast();
            msg.msg_controllen = cmsg_space::<u16>();
            // SAFETY: msg_control points at `cbuf`, 64 bytes aligned for cmsghdr, and
            // msg_controllen (cmsg_space of a u16) fits in it, so CMSG_FIRSTHDR is non-null
            // and its header and 2 data bytes lie inside `cbuf`.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = libc::UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as usize;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), size);
            }
        }
        // SAFETY: `msg` points at `iov` (whose entries point at live caller slices) and at
        // `cbuf`, all alive for the call; the kernel only reads them.
        let n = unsafe { libc::sendmsg(self.sock.as_raw_fd(), &msg, 0) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Receives into `buf` without blocking: `Some((len, segment))`, where `segment` is the size
    /// of each coalesced datagram (all but the last; 0 when the receive is one datagram), or
    /// `None` when nothing waits. `buf` should hold 64 KiB: a shorter coalesced receive is cut
    /// (and reported as an error).
    pub fn recv_gro(&self, buf: &mut [u8]) -> io::Result<Option<(usize, u16)>> {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut cbuf = CmsgBuf([0; 64]);
        // SAFETY: msghdr is plain old data; all-zero is a valid empty message.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.0.as_mut_ptr().cast();
        msg.msg_controllen = cbuf.0.len();
        // SAFETY: `msg` points at `iov` (over `buf`) and `cbuf`, both alive and writable for
        // the call, with their lengths.
        let n = unsafe { libc::recvmsg(self.sock.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(None),
                _ => Err(e),
            };
        }
        if msg.msg_flags & libc::MSG_TRUNC != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("UDP receive cut at the {}-byte buffer", buf.len()),
            ));
        }
        let mut segment = 0u16;
        if self.gro {
            // SAFETY: the kernel filled msg_control / msg_controllen; CMSG_FIRSTHDR and
            // CMSG_NXTHDR stay inside that range and return null at its end.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&msg);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                        let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                        segment = u16::try_from(v).unwrap_or(0);
                    }
                    c = libc::CMSG_NXTHDR(&msg, c);
                }
            }
        }
        Ok(Some((n as usize, segment)))
    }

    /// Waits until the send buffer has room, at most `timeout`. Returns `false` on timeout (or
    /// when a signal interrupted the wait).
    pub fn wait_writable(&self, timeout: std::time::Duration) -> io::Result<bool> {
        let mut p = libc::pollfd {
            fd: self.sock.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
        // SAFETY: `p` is one valid, writable pollfd for the whole call.
        let rc = unsafe { libc::poll(&mut p, 1, ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(e);
        }
        Ok(rc > 0)
    }

    /// The socket's descriptor (for `poll`).
    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn pair(gro: bool) -> (UdpGsoSocket, UdpGsoSocket) {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let tx = UdpGsoSocket::bind(any, false).unwrap();
        let rx = UdpGsoSocket::bind(any, gro).unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        rx.connect(tx.local_addr().unwrap()).unwrap();
        (tx, rx)
    }

    /// Everything `rx` receives within 5 s or until `want` bytes: the bytes and each receive's
    /// `(len, segment)`.
    fn drain(rx: &UdpGsoSocket, want: usize) -> (Vec<u8>, Vec<(usize, u16)>) {
        let mut buf = vec![0u8; 65_536];
        let (mut all, mut sizes) = (Vec::new(), Vec::new());
        let deadline = Instant::now() + Duration::from_secs(5);
        while all.len() < want && Instant::now() < deadline {
            match rx.recv_gro(&mut buf).unwrap() {
                Some((n, seg)) => {
                    all.extend_from_slice(&buf[..n]);
                    sizes.push((n, seg));
                }
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        (all, sizes)
    }

    /// One `UDP_SEGMENT` send from two parts arrives as datagrams of the segment size (the last
    /// shorter) at a plain receiver.
    #[test]
    fn a_segmented_send_arrives_as_datagrams() {
        let (tx, rx) = pair(false);
        let data: Vec<u8> = (0..2500u32).map(|i| i as u8).collect();
        let sent = tx
            .send_segments(&[&data[..700], &data[700..]], Some(1000))
            .unwrap();
        assert_eq!(sent, 2500);
        let (all, sizes) = drain(&rx, data.len());
        assert_eq!(all, data);
        assert_eq!(sizes, [(1000, 0), (1000, 0), (500, 0)]);
    }

    /// A `UDP_GRO` receiver gets the same bytes in order, each receive either one datagram or
    /// coalesced ones with the segment size reported.
    #[test]
    fn a_gro_receiver_reports_the_segment_size() {
        let (tx, rx) = pair(true);
        let data: Vec<u8> = (0..5500u32).map(|i| (i * 7) as u8).collect();
        tx.send_segments(&[&data], Some(1000)).unwrap();
        let (all, sizes) = drain(&rx, data.len());
        assert_eq!(all, data);
        assert!(
            sizes
                .iter()
                .all(|&(n, seg)| (seg == 0 && n <= 1000) || seg == 1000),
            "{sizes:?}"
        );
        // The kernel hands a GRO socket a segmented send whole: at least one receive carried
        // several datagrams (without UDP_GRO every receive would be one).
        assert!(
            sizes.iter().any(|&(n, seg)| seg == 1000 && n > 1000),
            "{sizes:?}"
        );
    }
}
