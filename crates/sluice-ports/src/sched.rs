//! CPU affinity and real-time scheduling of threads: the system calls the kernel GSO/GRO oracle
//! (`sluice-testkit`) needs to pin its writer and the TAP's NAPI thread to one CPU. They live
//! here because this is the one crate allowed `unsafe`.

use std::io;

/// The CPUs the calling thread may run on (`sched_getaffinity`), in increasing order.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain old data; all-zero is valid.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size passed, written by the kernel.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE, so CPU_ISSET stays inside `set`.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// The highest-numbered CPU this process may run on (`sched_getaffinity`).
pub fn last_allowed_cpu() -> io::Result<usize> {
    allowed_cpus()?
        .last()
        .copied()
        .ok_or_else(|| io::Error::other("empty CPU affinity"))
}

/// Pins thread `tid` (0: the calling thread) to `cpu` (`sched_setaffinity`).
pub fn pin_to_cpu(tid: i32, cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain old data; all-zero is valid.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "CPU number too large",
        ));
    }
    // SAFETY: `cpu` is below CPU_SETSIZE, so CPU_SET stays inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; the kernel only reads it.
    let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("sched_setaffinity({tid}, cpu {cpu}): {e}"),
        ));
    }
    Ok(())
}

/// Makes thread `tid` (0: the calling thread) `SCHED_FIFO` with `priority`
/// (`sched_setscheduler`; needs `CAP_SYS_NICE`).
pub fn set_fifo(tid: i32, priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `param` is a valid sched_param for the duration of the call.
    let rc = unsafe { libc::sched_setscheduler(tid, libc::SCHED_FIFO, &param) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("SCHED_FIFO {priority} for thread {tid}: {e}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_allowed_cpu_is_one_this_thread_can_be_pinned_to() {
        let cpu = last_allowed_cpu().unwrap();
        std::thread::spawn(move || pin_to_cpu(0, cpu))
            .join()
            .unwrap()
            .unwrap();
        assert!(pin_to_cpu(0, libc::CPU_SETSIZE as usize).is_err());
    }

    #[test]
    fn a_thread_pinned_to_one_cpu_is_allowed_that_cpu_only() {
        let all = allowed_cpus().unwrap();
        assert!(!all.is_empty() && all.windows(2).all(|w| w[0] < w[1]));
        let cpu = all[0];
        let after = std::thread::spawn(move || {
            pin_to_cpu(0, cpu)?;
            allowed_cpus()
        })
        .join()
        .unwrap()
        .unwrap();
        assert_eq!(after, [cpu]);
    }
}
