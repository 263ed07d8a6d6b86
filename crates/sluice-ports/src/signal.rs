//! Stopping on `SIGINT` / `SIGTERM`: the handler only sets a flag (async-signal-safe), which the
//! switch's loop checks between batches.
//!
//! The handlers are installed without `SA_RESTART`, so a [`crate::poll::wait_readable`] in
//! progress returns early when a signal arrives.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

static STOP: AtomicBool = AtomicBool::new(false);
static INSTALLED: Mutex<bool> = Mutex::new(false);

extern "C" fn on_signal(_signo: libc::c_int) {
    // An atomic store is async-signal-safe; nothing else happens here.
    STOP.store(true, Ordering::SeqCst);
}

/// Installs (once; later calls only return the flag) handlers for `SIGINT` and `SIGTERM` that
/// set the returned flag. Fails if `sigaction` does (nothing is then installed for the signal
/// that failed, and a later call retries).
pub fn stop_on_signals() -> io::Result<&'static AtomicBool> {
    let mut installed = INSTALLED.lock().unwrap_or_else(|p| p.into_inner());
    if *installed {
        return Ok(&STOP);
    }
    for signo in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: sigaction is plain old data; all-zero is a valid (empty) value.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        sa.sa_flags = 0;
        // SAFETY: `sa.sa_mask` is a valid sigset_t owned by this frame.
        unsafe { libc::sigemptyset(&mut sa.sa_mask) };
        // SAFETY: `sa` is a fully initialised sigaction whose handler only performs an atomic
        // store (async-signal-safe); the old action is not requested.
        let rc = unsafe { libc::sigaction(signo, &sa, std::ptr::null_mut()) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("sigaction({signo}): {e}")));
        }
    }
    *installed = true;
    Ok(&STOP)
}

/// Whether `SIGINT` or `SIGTERM` arrived since [`stop_on_signals`] installed the handlers.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigterm_sets_the_flag_and_install_is_idempotent() {
        let flag = stop_on_signals().unwrap();
        let again = stop_on_signals().unwrap();
        assert!(std::ptr::eq(flag, again));
        assert!(!stop_requested());
        // SAFETY: raise sends SIGTERM to this thread, whose handler (installed above) only sets
        // the flag.
        let rc = unsafe { libc::raise(libc::SIGTERM) };
        assert_eq!(rc, 0);
        assert!(stop_requested());
        assert!(flag.load(Ordering::SeqCst));
    }
}
