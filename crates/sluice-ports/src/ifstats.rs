//! The kernel's per-interface drop counters, read from `/proc/net/dev` of the network namespace
//! a port was opened in.
//!
//! A frame can be lost after a port handed it to the kernel (a veth whose peer's queue is full
//! counts it in its `tx_dropped`) or before the port could read it (a TAP whose queue towards
//! Sluice is full counts it in the TAP's `tx_dropped`). No socket option reports those; the
//! interface's statistics do. The file is opened once, in the port's namespace (a `/proc/net`
//! file keeps the namespace it was opened in), and read again on every call, so the counters can
//! be read from any thread. Counts are relative to the moment of opening: drops before the port
//! existed are not the switch's.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};

/// Drops the kernel counted on one interface (`/proc/net/dev` columns).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IfDrops {
    /// Frames the interface received but dropped (`rx drop`).
    pub rx_dropped: u64,
    /// Frames the interface was to transmit but dropped (`tx drop`).
    pub tx_dropped: u64,
}

/// The drop counters of one interface, from its namespace's `/proc/net/dev`.
#[derive(Debug)]
pub struct IfStats {
    file: File,
    ifname: String,
    base: IfDrops,
}

impl IfStats {
    /// Opens the statistics of `ifname` in the calling thread's network namespace (call it
    /// inside [`crate::Netns::enter`] for a namespace); counts start from now.
    pub fn open(ifname: &str) -> io::Result<IfStats> {
        let file = File::open("/proc/thread-self/net/dev")?;
        let mut s = IfStats {
            file,
            ifname: ifname.to_string(),
            base: IfDrops::default(),
        };
        s.base = s.absolute()?.unwrap_or_default();
        Ok(s)
    }

    /// Drops since [`IfStats::open`]; `None` when the interface is no longer in that namespace
    /// (deleted or moved away).
    pub fn read(&mut self) -> io::Result<Option<IfDrops>> {
        Ok(self.absolute()?.map(|now| IfDrops {
            rx_dropped: now.rx_dropped.saturating_sub(self.base.rx_dropped),
            tx_dropped: now.tx_dropped.saturating_sub(self.base.tx_dropped),
        }))
    }

    fn absolute(&mut self) -> io::Result<Option<IfDrops>> {
        self.file.seek(SeekFrom::Start(0))?;
        let mut text = String::new();
        self.file.read_to_string(&mut text)?;
        Ok(parse_proc_net_dev(&text, &self.ifname))
    }
}

/// The drops of an optional, shared [`IfStats`] (zero without one, or when it cannot be read:
/// the kernel keeps counting, so the next read that works catches up).
pub fn if_drops(stats: Option<&std::cell::RefCell<IfStats>>) -> IfDrops {
    stats
        .and_then(|s| s.try_borrow_mut().ok())
        .and_then(|mut s| s.read().ok().flatten())
        .unwrap_or_default()
}

/// The drop columns of `ifname` in `/proc/net/dev` text: after `NAME:` come 8 receive columns
/// (bytes packets errs drop fifo frame compressed multicast) and 8 transmit columns (bytes
/// packets errs drop fifo colls carrier compressed).
pub fn parse_proc_net_dev(text: &str, ifname: &str) -> Option<IfDrops> {
    text.lines().find_map(|line| {
        let (name, rest) = line.split_once(':')?;
        if name.trim() != ifname {
            return None;
        }
        let cols: Vec<u64> = rest
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        Some(IfDrops {
            rx_dropped: *cols.get(3)?,
            tx_dropped: *cols.get(11)?,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEV: &str = "\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     100       2    0    0    0     0          0         0      100       2    0    0    0     0       0          0
vb0001:   51234     412    0    7    0     0          0         0  9876543    8001    0   33    0     0       0          0
";

    #[test]
    fn the_drop_columns_of_the_named_interface() {
        assert_eq!(
            parse_proc_net_dev(DEV, "vb0001"),
            Some(IfDrops {
                rx_dropped: 7,
                tx_dropped: 33
            })
        );
        assert_eq!(parse_proc_net_dev(DEV, "lo"), Some(IfDrops::default()));
        assert_eq!(parse_proc_net_dev(DEV, "vb000"), None);
        assert_eq!(parse_proc_net_dev("x: 1 2 3", "x"), None);
    }

    #[test]
    fn loopback_of_this_namespace_reads() {
        let mut s = IfStats::open("lo").expect("open");
        assert_eq!(s.read().expect("read"), Some(IfDrops::default()));
        let mut gone = IfStats::open("no-such-if0").expect("open");
        assert_eq!(gone.read().expect("read"), None);
    }
}
