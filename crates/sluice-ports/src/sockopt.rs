//! Socket options, the one place the `setsockopt` / `getsockopt` calls are made for the ports
//! crate's sockets (packet sockets, UDP-GSO sockets) and the control client's buffer size.

use std::io;
use std::mem::size_of;
use std::os::fd::AsRawFd;

/// Sets option `name` at `level` to `value` (passed by address and size, as the kernel takes
/// it).
pub(crate) fn setsockopt<T>(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points at a live T and the length passed is its size; the kernel only
    // reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast::<libc::c_void>(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Reads option `name` at `level` as a `T` (plain old data: an integer or a C struct).
pub(crate) fn getsockopt<T: Copy>(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<T> {
    let mut value = std::mem::MaybeUninit::<T>::zeroed();
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is writable for `len` bytes, and `len` is a live socklen_t the kernel
    // updates. The options read here (c_int, tpacket_stats) are plain old data, so the zeroed
    // or kernel-written bytes are a valid T.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            value.as_mut_ptr().cast::<libc::c_void>(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: zero-initialised, then (partly) written by the kernel: plain old data either way.
    Ok(unsafe { value.assume_init() })
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
pub fn set_socket_buffer(fd: &impl AsRawFd, which: SocketBuffer, bytes: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    let (force, plain) = match which {
        SocketBuffer::Send => (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        SocketBuffer::Receive => (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
    };
    if setsockopt(fd, libc::SOL_SOCKET, force, &v).is_err() {
        setsockopt(fd, libc::SOL_SOCKET, plain, &v)?;
    }
    Ok(())
}
