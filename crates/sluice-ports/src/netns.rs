//! Throw-away network namespaces and veth pairs.
//!
//! A [`Netns`] is created with `ip netns add` under a unique name (`PREFIX-PID-COUNTER`), so that
//! several test binaries can run at once, and deleted with `ip netns del` when dropped (also while
//! a test unwinds from a panic). Namespaces left behind by a process that was killed are swept by
//! the next [`Netns::create`] with the same prefix (their pid no longer exists).
//!
//! Commands run inside a namespace through `ip netns exec` ([`Netns::run`]); sockets and TAP
//! devices are created inside it by running a closure on a thread that joined the namespace with
//! `setns(CLONE_NEWNET)` ([`Netns::enter`]). A socket keeps the namespace it was created in, so
//! the returned file descriptors can be used from any thread afterwards.
//!
//! Every namespace is made quiet on creation: IPv6 is disabled, so router solicitations, MLD
//! reports and DAD probes never show up in captures.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Where `ip netns` keeps its namespace handles.
const NETNS_RUN_DIR: &str = "/run/netns";

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A short string unique to this process and call: the pid as 5 base-36 digits (pids are below
/// 2^22 < 36^5) followed by a per-process counter in base 36, so no two processes can produce the
/// same string. 6 characters for the first 36 calls, 7 up to 1296.
///
/// Use it to build interface names, which the kernel limits to 15 bytes.
pub fn unique_suffix() -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{:0>5}{}", base36(std::process::id()), base36(n))
}

fn base36(mut v: u32) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(v % 36) as usize]);
        v /= 36;
        if v == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// Runs `program args…` and returns its standard output; a failure (spawn error or non-zero exit)
/// becomes an error that names the command and carries its standard error.
pub fn run_command(program: &str, args: &[&str]) -> io::Result<String> {
    let output = Command::new(program).args(args).output().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot run `{program}` (is it installed?): {e}"),
        )
    })?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(io::Error::other(format!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

/// A network namespace created for the lifetime of this value.
///
/// Needs root and `ip`, so not run here:
///
/// ```no_run
/// use sluice_ports::{Netns, VethPair};
/// let (left, right) = (Netns::create("doc-l")?, Netns::create("doc-r")?);
/// let veth = VethPair::create(&left, "v0", &right, "v1", 1500)?; // both ends up
/// left.run(&["ip", "addr", "add", "10.0.0.1/24", "dev", veth.a()])?;
/// right.run(&["ip", "addr", "add", "10.0.0.2/24", "dev", veth.b()])?;
/// left.run(&["ping", "-c", "1", "10.0.0.2"])?;
/// let index = right.ifindex(veth.b())?;
/// assert!(index > 0);
/// // Dropping `veth`, `left` and `right` deletes them, also when a test panics.
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates a namespace named `PREFIX-PID-COUNTER` and makes it quiet (IPv6 disabled, so no
    /// RS/MLD/DAD frames). `prefix` must be non-empty ASCII letters, digits, `-` or `_`.
    ///
    /// Namespaces `PREFIX-PID-*` whose process no longer exists are deleted first.
    pub fn create(prefix: &str) -> io::Result<Netns> {
        if prefix.is_empty()
            || !prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("namespace prefix {prefix:?} must be non-empty [A-Za-z0-9_-]"),
            ));
        }
        sweep_stale(prefix);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{prefix}-{}-{n}", std::process::id());
        run_command("ip", &["netns", "add", &name])?;
        let ns = Netns { name };
        ns.disable_ipv6()?;
        Ok(ns)
    }

    /// The namespace's name (as `ip netns` knows it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `args[0] args[1..]` inside the namespace (`ip netns exec NAME …`, which also mounts the
    /// namespace's `/sys`) and returns its standard output; fails with the standard error when the
    /// command fails.
    pub fn run(&self, args: &[&str]) -> io::Result<String> {
        let mut full = vec!["netns", "exec", self.name.as_str()];
        full.extend_from_slice(args);
        run_command("ip", &full)
    }

    /// Sets a sysctl inside the namespace (`sysctl -q -w KEY=VALUE`).
    pub fn sysctl(&self, key: &str, value: &str) -> io::Result<()> {
        self.run(&["sysctl", "-q", "-w", &format!("{key}={value}")])
            .map(drop)
    }

    /// Brings `ifname` up (`ip link set dev IFNAME up`).
    pub fn link_up(&self, ifname: &str) -> io::Result<()> {
        self.run(&["ip", "link", "set", "dev", ifname, "up"])
            .map(drop)
    }

    /// Waits until `ifname` can transmit: up with a carrier (`LOWER_UP`) and its real qdisc
    /// attached (`ip link` no longer shows `qdisc noop`). The kernel's link watcher attaches
    /// the qdisc some time after the carrier comes on; until then every frame sent through
    /// the device is dropped. Polls every 10 ms for at most `timeout`.
    pub fn wait_link_ready(&self, ifname: &str, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let out = self.run(&["ip", "-o", "link", "show", "dev", ifname])?;
            if link_ready(&out) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{ifname} in netns {} not ready to transmit after {timeout:?}: {}",
                        self.name,
                        out.trim()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Disables IPv6 on every current and future interface of the namespace. Done by
    /// [`Netns::create`]; the kernel's IPv6 GRO/GSO code (offload layer) and AF_PACKET are not
    /// affected, only the IPv6 stack (no link-local address, RS, MLD or DAD).
    pub fn disable_ipv6(&self) -> io::Result<()> {
        for key in [
            "net.ipv6.conf.default.disable_ipv6",
            "net.ipv6.conf.all.disable_ipv6",
        ] {
            self.sysctl(key, "1")?;
        }
        for key in [
            "net.ipv6.conf.default.accept_ra",
            "net.ipv6.conf.all.accept_ra",
        ] {
            self.sysctl(key, "0")?;
        }
        Ok(())
    }

    /// Runs `f` on a fresh thread that has joined this namespace (`setns(CLONE_NEWNET)`), and
    /// returns its result. Sockets, TAP devices and interface-index lookups made in `f` belong to
    /// the namespace; the file descriptors stay usable from any thread afterwards.
    ///
    /// A panic in `f` is propagated to the caller.
    pub fn enter<F, R>(&self, f: F) -> io::Result<R>
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        enter_named(&self.name, f)
    }

    /// The interface index of `ifname` inside the namespace.
    pub fn ifindex(&self, ifname: &str) -> io::Result<u32> {
        let name = ifname.to_owned();
        self.enter(move || if_nametoindex(&name))?
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run_command("ip", &["netns", "del", &self.name]);
    }
}

/// Deletes namespaces `PREFIX-PID-N` left by processes that no longer exist.
fn sweep_stale(prefix: &str) {
    let Ok(dir) = std::fs::read_dir(NETNS_RUN_DIR) else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(prefix).and_then(|r| r.strip_prefix('-')) else {
            continue;
        };
        let mut parts = rest.split('-');
        let (Some(pid), Some(n), None) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let (Ok(pid), Ok(_)) = (pid.parse::<u32>(), n.parse::<u32>()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = run_command("ip", &["netns", "del", &name]);
        }
    }
}

/// Runs `f` on a fresh thread joined to the named namespace `name` (as `ip netns` names it, in
/// `/run/netns`), which this process need not own (see [`Netns::enter`]).
pub fn enter_named<F, R>(name: &str, f: F) -> io::Result<R>
where
    F: FnOnce() -> R + Send,
    R: Send,
{
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad network namespace name {name:?}"),
        ));
    }
    let path = Path::new(NETNS_RUN_DIR).join(name);
    let handle = File::open(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot open {}: {e}", path.display())))?;
    std::thread::scope(|scope| {
        let joined = scope.spawn(move || {
            // SAFETY: `handle` is an open namespace file for the whole call; setns only changes
            // this (fresh, scoped) thread's network namespace.
            let rc = unsafe { libc::setns(handle.as_raw_fd(), libc::CLONE_NEWNET) };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(f())
        });
        match joined.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// `if_nametoindex(3)` in the calling thread's network namespace.
pub fn if_nametoindex(ifname: &str) -> io::Result<u32> {
    let c = CString::new(ifname)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name contains NUL"))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 {
        let e = io::Error::last_os_error();
        Err(io::Error::new(
            e.kind(),
            format!("no interface {ifname:?} here: {e}"),
        ))
    } else {
        Ok(index)
    }
}

/// Whether one line of `ip -o link show` says the device can transmit: flags `UP` and
/// `LOWER_UP`, and a qdisc other than `noop`.
fn link_ready(line: &str) -> bool {
    let Some(flags) = line
        .split_once('<')
        .and_then(|(_, rest)| rest.split_once('>'))
        .map(|(flags, _)| flags)
    else {
        return false;
    };
    let has = |flag: &str| flags.split(',').any(|f| f == flag);
    let words: Vec<&str> = line.split_whitespace().collect();
    let qdisc_attached = words
        .windows(2)
        .any(|w| w.first() == Some(&"qdisc") && w.get(1).is_some_and(|q| *q != "noop"));
    has("UP") && has("LOWER_UP") && qdisc_attached
}

/// How long [`VethPair::create`] waits for each end to become ready to transmit.
const LINK_READY_TIMEOUT: Duration = Duration::from_secs(5);

/// A veth pair whose two ends live in (possibly different) namespaces, both up.
#[derive(Debug)]
pub struct VethPair {
    ns_a: String,
    a: String,
    b: String,
}

impl VethPair {
    /// Creates `a` in `ns_a` and its peer `b` in `ns_b` (`ip link add … type veth peer name …
    /// netns …`), sets both MTUs to `mtu` and brings both up.
    pub fn create(ns_a: &Netns, a: &str, ns_b: &Netns, b: &str, mtu: u32) -> io::Result<VethPair> {
        let mtu = mtu.to_string();
        ns_a.run(&[
            "ip", "link", "add", a, "mtu", &mtu, "type", "veth", "peer", "name", b, "mtu", &mtu,
            "netns", &ns_b.name,
        ])?;
        let pair = VethPair {
            ns_a: ns_a.name.clone(),
            a: a.to_owned(),
            b: b.to_owned(),
        };
        ns_a.link_up(a)?;
        ns_b.link_up(b)?;
        // Until the kernel's link watcher sees the carrier, a device keeps its no-op qdisc,
        // which drops every frame sent (AF_PACKET goes through the qdisc): wait for both ends.
        ns_a.wait_link_ready(a, LINK_READY_TIMEOUT)?;
        ns_b.wait_link_ready(b, LINK_READY_TIMEOUT)?;
        Ok(pair)
    }

    /// The end in the first namespace.
    pub fn a(&self) -> &str {
        &self.a
    }

    /// The end in the second namespace.
    pub fn b(&self) -> &str {
        &self.b
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Deleting one end deletes both; the namespace may already be gone, which is fine.
        let _ = run_command("ip", &["-n", &self.ns_a, "link", "del", &self.a]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base36_digits() {
        assert_eq!(base36(0), "0");
        assert_eq!(base36(35), "z");
        assert_eq!(base36(36), "10");
        assert_eq!(base36(4_194_304), "2hwcg");
    }

    #[test]
    fn unique_suffixes_start_with_the_padded_pid_and_differ() {
        let a = unique_suffix();
        let b = unique_suffix();
        assert_ne!(a, b);
        let pid = format!("{:0>5}", base36(std::process::id()));
        assert!(a.starts_with(&pid) && b.starts_with(&pid));
        assert!(a.len() <= 8, "{a}");
    }

    #[test]
    fn a_link_is_ready_with_a_carrier_and_a_real_qdisc() {
        let tap = "2: vt0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc pfifo_fast state UNKNOWN mode DEFAULT";
        let veth = "5: pa@if4: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP mode DEFAULT";
        assert!(link_ready(tap));
        assert!(link_ready(veth));
        // Carrier on, link watcher not run yet: the no-op qdisc drops everything.
        assert!(!link_ready(
            "5: pa@if4: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noop state DOWN"
        ));
        // No carrier (peer down), or not up at all.
        assert!(!link_ready(
            "5: pa@if4: <NO-CARRIER,BROADCAST,MULTICAST,UP> mtu 1500 qdisc noqueue state LOWERLAYERDOWN"
        ));
        assert!(!link_ready(
            "5: pa@if4: <BROADCAST,MULTICAST> mtu 1500 qdisc noop state DOWN"
        ));
        assert!(!link_ready(""));
    }
}
