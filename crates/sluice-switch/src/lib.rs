//! The Sluice switch: the datapath threads ([`workers`]) with their TAP and `AF_PACKET` ports ([`switch`]) and the
//! newline-delimited JSON control socket the daemon and CLI speak ([`control`]). The traffic
//! generator the demo and the end-to-end tests use is the `sluice-traffic` crate.

#![deny(unsafe_code)]

pub mod config;
pub mod control;
pub mod metrics;
pub mod spread;
pub mod switch;
pub mod trace;
pub mod workers;

pub use control::{Client, ControlServer, Request, ServerConfig};
pub use switch::{
    FeatureState, FlowResult, PortInfo, PortKind, PortRequest, PortSettingsInfo, PortStatsInfo,
    QuotaChange, QuotaInfo, StoreReport, Switch, SwitchConfig, SwitchError, MAX_ACTIONS, MAX_BATCH,
    MAX_PORT_NUMBER, PORT_SETTINGS,
};
pub use workers::ThreadStats;

/// Registers every counter the switch can move, so listings show them at zero.
pub fn register_counters() {
    sluice_datapath::datapath::register_counters();
    sluice_coverage::register(&control::COUNTERS);
    sluice_coverage::register(&switch::COUNTERS);
    sluice_coverage::register(&spread::COUNTERS);
    sluice_coverage::register(&metrics::COUNTERS);
}

/// The README's examples, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
