//! Test-only interface helpers on top of [`sluice_ports::netns`]: the kernel oracle turns every
//! offload of its veth off so that the kernel segments in software.

use sluice_ports::Netns;
use std::io;

/// Turns off, with `ethtool -K`, every feature of `ifname` (inside `ns`) that is on and not
/// fixed, and returns the features still on afterwards (fixed ones, as `ethtool -k` reports).
pub fn disable_all_offloads(ns: &Netns, ifname: &str) -> io::Result<Vec<String>> {
    let on = features_on(ns, ifname)?;
    let changeable: Vec<&str> = on
        .iter()
        .filter(|(_, fixed)| !fixed)
        .map(|(name, _)| name.as_str())
        .collect();
    if !changeable.is_empty() {
        let mut args = vec!["ethtool", "-K", ifname];
        for name in &changeable {
            args.push(name);
            args.push("off");
        }
        if ns.run(&args).is_err() {
            // Some features refuse to change together with others: one at a time.
            for name in &changeable {
                let _ = ns.run(&["ethtool", "-K", ifname, name, "off"]);
            }
        }
    }
    Ok(features_on(ns, ifname)?
        .into_iter()
        .map(|(name, _)| name)
        .collect())
}

/// Sets one `ethtool -K` feature of `ifname` inside `ns`.
pub fn set_feature(ns: &Netns, ifname: &str, feature: &str, on: bool) -> io::Result<()> {
    ns.run(&[
        "ethtool",
        "-K",
        ifname,
        feature,
        if on { "on" } else { "off" },
    ])
    .map(drop)
}

/// The features of `ifname` that `ethtool -k` reports as on, with whether each is fixed.
pub fn features_on(ns: &Netns, ifname: &str) -> io::Result<Vec<(String, bool)>> {
    let out = ns.run(&["ethtool", "-k", ifname])?;
    Ok(out
        .lines()
        .filter_map(|line| {
            let (name, state) = line.trim().split_once(": ")?;
            let mut words = state.split_whitespace();
            (words.next() == Some("on")).then(|| (name.to_owned(), state.contains("[fixed]")))
        })
        .collect())
}
