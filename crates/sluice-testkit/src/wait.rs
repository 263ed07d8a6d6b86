//! Waiting for a condition instead of sleeping a fixed time and then asserting.

use std::fmt;
use std::time::{Duration, Instant};

/// How often [`wait_until`] checks its condition.
const POLL: Duration = Duration::from_millis(5);

/// A condition that did not become true in time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitTimeout {
    /// What was waited for, as the caller described it.
    pub what: String,
    /// How long it was waited for.
    pub timeout: Duration,
}

impl fmt::Display for WaitTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "timed out after {:?} waiting for {}",
            self.timeout, self.what
        )
    }
}

impl std::error::Error for WaitTimeout {}

/// Calls `cond` every few milliseconds until it returns true or `timeout` has passed; the error
/// names `what` was waited for. `cond` is always called at least once, and once more after the
/// deadline, so a condition that became true during the last pause is not missed.
pub fn wait_until(
    what: &str,
    timeout: Duration,
    mut cond: impl FnMut() -> bool,
) -> Result<(), WaitTimeout> {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return if cond() {
                Ok(())
            } else {
                Err(WaitTimeout {
                    what: what.to_owned(),
                    timeout,
                })
            };
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_condition_that_becomes_true_ends_the_wait() {
        let flag = Arc::new(AtomicBool::new(false));
        let setter = {
            let flag = Arc::clone(&flag);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                flag.store(true, Ordering::SeqCst);
            })
        };
        let r = wait_until("the flag", Duration::from_secs(10), || {
            flag.load(Ordering::SeqCst)
        });
        setter.join().unwrap();
        assert_eq!(r, Ok(()));
    }

    #[test]
    fn a_condition_that_stays_false_names_what_was_awaited() {
        let mut calls = 0;
        let e = wait_until("the impossible", Duration::from_millis(30), || {
            calls += 1;
            false
        })
        .unwrap_err();
        assert_eq!(e.what, "the impossible");
        assert_eq!(e.timeout, Duration::from_millis(30));
        assert_eq!(
            e.to_string(),
            "timed out after 30ms waiting for the impossible"
        );
        assert!(calls >= 2, "checked more than once: {calls}");
    }
}
