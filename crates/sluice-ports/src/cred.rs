//! Who is at the other end of a Unix socket (`SO_PEERCRED`), and the groups a process is in,
//! for the control socket's access check.

use std::io;
use std::os::fd::AsRawFd;

/// The credentials the kernel recorded for a Unix socket's peer when it connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCredentials {
    /// The peer's process id (0 when the kernel does not know it).
    pub pid: i32,
    /// Its effective user id.
    pub uid: u32,
    /// Its effective group id.
    pub gid: u32,
}

/// `getsockopt(SO_PEERCRED)` on a connected Unix socket.
pub fn peer_credentials(sock: &impl AsRawFd) -> io::Result<PeerCredentials> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes and `len` holds the size of `cred`; the
    // kernel writes at most `len` bytes. A bad descriptor is reported as an error.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PeerCredentials {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// The supplementary groups of process `pid` (the `Groups:` line of `/proc/PID/status`).
pub fn process_groups(pid: i32) -> io::Result<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    Ok(parse_groups(&status))
}

fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The id of group `name` (a number is taken as is), from `/etc/group`.
pub fn group_id(name: &str) -> io::Result<u32> {
    if let Ok(n) = name.parse::<u32>() {
        return Ok(n);
    }
    let text = std::fs::read_to_string("/etc/group")?;
    find_group(&text, name).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no group named {name:?} in /etc/group"),
        )
    })
}

fn find_group(etc_group: &str, name: &str) -> Option<u32> {
    etc_group.lines().find_map(|l| {
        let mut f = l.split(':');
        if f.next()? != name {
            return None;
        }
        f.nth(1)?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_line_and_group_file() {
        let status = "Name:\tsh\nUid:\t0\t0\t0\t0\nGroups:\t4 24 27 \nNSgid:\t0\n";
        assert_eq!(parse_groups(status), [4, 24, 27]);
        assert_eq!(parse_groups("Groups:\t\n"), Vec::<u32>::new());
        let etc = "root:x:0:\nsluice:x:991:alice,bob\nnogroup:x:65534:\n";
        assert_eq!(find_group(etc, "sluice"), Some(991));
        assert_eq!(find_group(etc, "nogroup"), Some(65534));
        assert_eq!(find_group(etc, "slu"), None);
    }

    #[test]
    fn own_credentials_through_a_socket_pair() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        let c = peer_credentials(&a).expect("SO_PEERCRED");
        assert_eq!(c.pid, std::process::id() as i32);
        // SAFETY: getuid / getgid have no preconditions and cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        assert_eq!((c.uid, c.gid), (uid, gid));
    }
}
