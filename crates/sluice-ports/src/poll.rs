//! Waiting for any of several descriptors to become readable (`poll(2)`).
//!
//! The switch's main loop polls its ports without blocking and, when none had work, sleeps in
//! [`wait_readable`] on all their descriptors ([`sluice_datapath::port::Port::fd`]).

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// Descriptors handled without allocating; more fall back to a heap array.
const STACK_FDS: usize = 64;

/// Waits until one of `fds` is readable (or reports an error or hang-up, which a read then
/// surfaces), at most `timeout`. Returns `true` if one is, `false` on timeout or when a signal
/// interrupted the wait (so that a caller can check [`crate::signal::stop_requested`]).
///
/// No descriptors: sleeps for `timeout` (interruptible by a signal) and returns `false`.
/// A timeout longer than `i32::MAX` milliseconds is clamped; a non-zero timeout shorter than a
/// millisecond waits a millisecond.
pub fn wait_readable(fds: &[RawFd], timeout: Duration) -> io::Result<bool> {
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    let ms = if ms == 0 && !timeout.is_zero() { 1 } else { ms };
    let empty = libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    };
    let mut stack = [empty; STACK_FDS];
    let mut heap = Vec::new();
    let pfds: &mut [libc::pollfd] = if fds.len() <= STACK_FDS {
        &mut stack[..fds.len()]
    } else {
        heap.resize(fds.len(), empty);
        &mut heap
    };
    for (p, &fd) in pfds.iter_mut().zip(fds) {
        p.fd = fd;
        p.events = libc::POLLIN;
    }
    // SAFETY: `pfds` is a valid, writable array of `pfds.len()` pollfd structures for the whole
    // call; poll only reads `fd`/`events` and writes `revents` within it.
    let rc = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(io::Error::new(e.kind(), format!("poll: {e}")));
    }
    Ok(rc > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::time::Instant;

    #[test]
    fn times_out_then_sees_readable() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let (_c, d) = UnixStream::pair().unwrap();
        let fds = [d.as_raw_fd(), b.as_raw_fd()];
        let t = Instant::now();
        assert!(!wait_readable(&fds, Duration::from_millis(30)).unwrap());
        assert!(t.elapsed() >= Duration::from_millis(25));
        a.write_all(b"x").unwrap();
        assert!(wait_readable(&fds, Duration::from_secs(5)).unwrap());
        assert!(wait_readable(&fds, Duration::ZERO).unwrap());
    }

    #[test]
    fn many_descriptors_use_the_heap_path() {
        let pairs: Vec<_> = (0..STACK_FDS + 3)
            .map(|_| UnixStream::pair().unwrap())
            .collect();
        let fds: Vec<RawFd> = pairs.iter().map(|(_, b)| b.as_raw_fd()).collect();
        assert!(!wait_readable(&fds, Duration::ZERO).unwrap());
        (&pairs[STACK_FDS + 2].0).write_all(b"x").unwrap();
        assert!(wait_readable(&fds, Duration::from_secs(5)).unwrap());
    }
}
