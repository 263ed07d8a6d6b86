//! The daemon's own messages (`sluice run --log-level`, config `"log_level"`): `tracing`
//! events written to stderr by `tracing-subscriber`, one line each with a UTC timestamp and
//! the level. Startup, ports and stop are `info`; a port going down is `warn`; refused control
//! requests are `debug` (they are counted anyway).

use sluice_switch::PortStatsInfo;
use std::collections::BTreeMap;

pub use sluice_switch::config::LogLevel;

/// Sends the process's `tracing` events at `level` and above to stderr. A second call (a
/// subscriber already set) changes nothing.
pub fn init(level: LogLevel) {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level.level())
        .with_target(false)
        .try_init();
}

/// A port's state changed between two looks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The port name.
    pub name: String,
    /// The port number.
    pub number: u32,
    /// It is up now (it was down), or down now (it was up).
    pub up: bool,
}

/// Remembers each port's state to report when it goes down or comes back.
#[derive(Debug, Default)]
pub struct PortStates {
    up: BTreeMap<String, bool>,
}

impl PortStates {
    /// Compares `ports` with the last look and logs every change (`warn` when a port goes
    /// down, `info` when it comes back). Every port starts up, so a port seen for the first
    /// time down (it vanished before the first look) went down.
    pub fn observe(&mut self, ports: &[PortStatsInfo]) -> Vec<Transition> {
        let mut changes = Vec::new();
        let mut now = BTreeMap::new();
        for p in ports {
            let up = p.state == "up";
            if self.up.get(&p.name).copied().unwrap_or(true) != up {
                changes.push(Transition {
                    name: p.name.clone(),
                    number: p.number,
                    up,
                });
            }
            now.insert(p.name.clone(), up);
        }
        self.up = now;
        for c in &changes {
            if c.up {
                tracing::info!("port {} {} is up again", c.number, c.name);
            } else {
                tracing::warn!(
                    "port {} {} is down: its device vanished (port up brings it back)",
                    c.number,
                    c.name
                );
            }
        }
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(name: &str, up: bool) -> PortStatsInfo {
        PortStatsInfo {
            number: 3,
            name: name.into(),
            state: if up { "up" } else { "down" }.into(),
            rx_packets: 0,
            rx_bytes: 0,
            tx_packets: 0,
            tx_bytes: 0,
            rx_no_match: 0,
            rx_dropped_by_rule: 0,
            rx_action_errors: 0,
            rx_invalid: 0,
            rx_truncated: 0,
            rx_kernel_drops: 0,
            tx_kernel_drops: 0,
            rx_errors: 0,
            rx_uso_frames: 0,
            rx_uso_datagrams: 0,
            rx_uso_drops: 0,
            tx_prepare_drops: 0,
            tx_hw_gso: 0,
            tx_soft_gso: 0,
            tx_partial_gso: 0,
            tx_errors: 0,
            gro_merged_segments: 0,
            gro_merged_packets: 0,
        }
    }

    #[test]
    fn only_changes_are_reported() {
        let mut s = PortStates::default();
        let first = s.observe(&[port("a", true), port("b", false)]);
        assert_eq!(
            first.len(),
            1,
            "b went down before the first look: {first:?}"
        );
        assert!(!first[0].up && first[0].name == "b");
        assert!(s.observe(&[port("a", true), port("b", false)]).is_empty());
        let down = s.observe(&[port("a", false), port("b", false)]);
        assert_eq!(
            down,
            vec![Transition {
                name: "a".into(),
                number: 3,
                up: false
            }]
        );
        let up = s.observe(&[port("a", true)]);
        assert_eq!(up.len(), 1);
        assert!(up[0].up);
        // "b" was removed, then added again (up): not a change.
        assert!(s.observe(&[port("a", true), port("b", true)]).is_empty());
    }
}
