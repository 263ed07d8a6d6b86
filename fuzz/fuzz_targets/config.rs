//! Fuzzes the reader of `sluice run --config FILE`: `sluice_switch::config::Config::parse`, the
//! whole of what the daemon runs on the file's text before it starts anything, on arbitrary
//! UTF-8 (the daemon reads the file with `read_to_string`, so other bytes never reach it).
//!
//! Checked: no panic; an accepted configuration satisfies every range `parse` promises; a
//! refusal has a message.
//!
//! Seeds: `fuzz/seeds/config` (the embedded default, the examples of `docs/`, and each field
//! out of range).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_switch::config::{
    Config, MAX_BATCH_FRAMES, MAX_BUSY_POLL_US, MAX_THREADS, MAX_WRITE_TIMEOUT_MS,
};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::parse(text) {
        Ok(c) => {
            assert!(c.batch.is_none_or(|b| (1..=MAX_BATCH_FRAMES).contains(&b)));
            assert!(c.busy_poll_us.is_none_or(|t| t <= MAX_BUSY_POLL_US));
            assert!(c.threads.is_none_or(|n| (1..=MAX_THREADS).contains(&n)));
            assert_ne!(c.max_connections, Some(0));
            assert!(c
                .write_timeout_ms
                .is_none_or(|ms| (1..=MAX_WRITE_TIMEOUT_MS).contains(&ms)));
        }
        Err(e) => assert!(!e.is_empty()),
    }
});
