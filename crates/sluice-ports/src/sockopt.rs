//! Socket options that several kinds of socket share.

use std::io;
use std::os::fd::RawFd;

/// Sets an integer socket option.
pub(crate) fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `v` lives for the call and its size is passed; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Which of a socket's buffers to size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketBuffer {
    /// The send buffer (`SO_SNDBUF`).
    Send,
    /// The receive buffer (`SO_RCVBUF`).
    Receive,
}

/// Sets a socket buffer to `bytes`: `SO_SNDBUFFORCE` / `SO_RCVBUFFORCE` as root (beyond
/// `net.core.wmem_max` / `rmem_max`), else the plain option, which the kernel caps at them.
pub fn set_socket_buffer(fd: RawFd, which: SocketBuffer, bytes: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    let (force, plain) = match which {
        SocketBuffer::Send => (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        SocketBuffer::Receive => (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
    };
    if setsockopt_int(fd, libc::SOL_SOCKET, force, v).is_err() {
        setsockopt_int(fd, libc::SOL_SOCKET, plain, v)?;
    }
    Ok(())
}
