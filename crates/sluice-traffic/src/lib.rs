//! A built-in sender and receiver of real kernel TCP and UDP traffic between two network
//! namespaces, for `sluice demo` and the switch's end-to-end tests (no iperf needed). The tests
//! reach it through `sluice_testkit::traffic`; the demo, a product command, depends on it directly.
//!
//! Whatever connects the two namespaces (the switch, a veth pair, a bridge) carries a
//! deterministic pseudo-random byte stream: a fixed block of [`BLOCK_LEN`] bytes (a prime, so the
//! pattern never lines up with segment, buffer or page sizes) generated once from a fixed seed
//! with xorshift, repeated. The receiver compares every byte it reads with the block at that
//! stream offset ([`verify_chunk`], a `memcmp` per read). TCP repairs loss and reordering on the
//! wire, so for TCP the check catches bytes that reach the application wrong anyway (a payload
//! mangled by segmentation, merging or encapsulation under a checksum computed over the wrong
//! bytes, a bad checksum passed on as good). `verified: false` comes with the offset of the
//! first wrong byte. For UDP each datagram carries a sequence number: loss, duplication and
//! reordering are counted, and the content of what arrives is verified.
//!
//! Sockets are created inside the namespaces ([`Netns::enter`]); the transfer itself runs on
//! ordinary threads. Every blocking step has a time limit: a path that drops everything makes a
//! transfer fail with an [`io::Error`] naming the step (connect, accept, send, receive) instead
//! of hanging. An optional stop flag (e.g. the one `SIGINT` sets) interrupts a transfer with
//! [`io::ErrorKind::Interrupted`].

#![deny(unsafe_code)]

use serde::Serialize;
use sluice_ports::netns::Netns;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Length of the repeated pseudo-random block: the largest prime below 2^20.
pub const BLOCK_LEN: usize = 1_048_573;

/// Seed of the block's xorshift generator.
const SEED: u64 = 0x51ce_d47a_0b5e_ed01;

/// Size of one read (receiver) or write (sender) call.
const IO_CHUNK: usize = 256 * 1024;

/// How often blocked calls wake up to check the stop flag and the time limits.
const TICK: Duration = Duration::from_millis(100);

/// Smallest UDP datagram: the 8-byte sequence number and at least one payload byte.
pub const UDP_MIN_DATAGRAM: usize = 9;

/// Largest UDP payload over IPv4.
pub const UDP_MAX_DATAGRAM: usize = 65_507;

/// The repeated block of the stream (generated on first use).
pub fn block() -> &'static [u8] {
    static BLOCK: OnceLock<Box<[u8]>> = OnceLock::new();
    BLOCK.get_or_init(|| {
        let mut state = SEED;
        let mut out = Vec::with_capacity(BLOCK_LEN + 8);
        while out.len() < BLOCK_LEN {
            // xorshift64 (Marsaglia 13/7/17).
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            out.extend_from_slice(&state.to_le_bytes());
        }
        out.truncate(BLOCK_LEN);
        out.into_boxed_slice()
    })
}

/// Where stream offset `offset` falls in the block.
fn block_pos(offset: u64) -> usize {
    // The remainder is below BLOCK_LEN, which fits a usize.
    (offset % BLOCK_LEN as u64) as usize
}

/// The stream's bytes from `offset` up to the end of the block, at most `max` of them.
fn stream_slice(offset: u64, max: usize) -> &'static [u8] {
    let b = block();
    let pos = block_pos(offset);
    let end = pos.saturating_add(max).min(b.len());
    b.get(pos..end).unwrap_or_default()
}

/// Fills `out` with the stream's bytes from `offset` on.
///
/// ```
/// use sluice_traffic::{fill_stream, verify_chunk, BLOCK_LEN};
/// // Any window of the stream, even one across the block boundary, verifies.
/// let offset = BLOCK_LEN as u64 - 100;
/// let mut chunk = vec![0u8; 300];
/// fill_stream(offset, &mut chunk);
/// assert_eq!(verify_chunk(offset, &chunk), None);
/// chunk[150] ^= 1; // one flipped bit is found, at its stream offset
/// assert_eq!(verify_chunk(offset, &chunk), Some(offset + 150));
/// ```
pub fn fill_stream(offset: u64, out: &mut [u8]) {
    let mut done = 0;
    while done < out.len() {
        let src = stream_slice(offset + done as u64, out.len() - done);
        if src.is_empty() {
            return;
        }
        if let Some(dst) = out.get_mut(done..done + src.len()) {
            dst.copy_from_slice(src);
        }
        done += src.len();
    }
}

/// Compares `data` with the stream's bytes from `offset` on; returns the stream offset of the
/// first byte that differs, or `None` when all match.
pub fn verify_chunk(offset: u64, data: &[u8]) -> Option<u64> {
    let mut done = 0;
    while done < data.len() {
        let rest = data.get(done..).unwrap_or_default();
        let want = stream_slice(offset + done as u64, rest.len());
        let got = rest.get(..want.len()).unwrap_or_default();
        if want.is_empty() || got != want {
            let i = got
                .iter()
                .zip(want)
                .position(|(a, b)| a != b)
                .unwrap_or(got.len());
            return Some(offset + (done + i) as u64);
        }
        done += want.len();
    }
    None
}

/// Limits and controls of a transfer.
#[derive(Debug, Clone, Copy)]
pub struct TransferOptions<'a> {
    /// How long the sender sends.
    pub duration: Duration,
    /// How long the sender keeps trying to connect (the path, ARP or the listener may still be
    /// settling), and how long the receiver waits for it.
    pub connect_timeout: Duration,
    /// A transfer fails when no byte moves for this long.
    pub stall_timeout: Duration,
    /// When set (by a signal handler, say), the transfer stops with
    /// [`io::ErrorKind::Interrupted`].
    pub stop: Option<&'a AtomicBool>,
}

impl TransferOptions<'_> {
    /// Sends for `duration`; 5 s to connect, 5 s of no progress is a failure, no stop flag.
    pub fn new(duration: Duration) -> TransferOptions<'static> {
        TransferOptions {
            duration,
            connect_timeout: Duration::from_secs(5),
            stall_timeout: Duration::from_secs(5),
            stop: None,
        }
    }

    fn stopped(&self) -> bool {
        self.stop.is_some_and(|s| s.load(Ordering::Relaxed))
    }
}

/// The outcome of a TCP transfer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TransferReport {
    /// Bytes the receiver read.
    pub bytes: u64,
    /// Bytes the sender wrote.
    pub sent: u64,
    /// The receiver's time from the first byte to the end of the stream.
    pub seconds: f64,
    /// `bytes` in Gbit/s over `seconds`.
    pub gbps: f64,
    /// Every byte read was the expected one and every byte sent was read.
    pub verified: bool,
    /// The stream offset of the first wrong byte, if any.
    pub mismatch_at: Option<u64>,
}

/// The outcome of a UDP transfer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct UdpReport {
    /// Datagrams sent.
    pub sent: u64,
    /// Distinct datagrams received.
    pub received: u64,
    /// `sent - received`.
    pub lost: u64,
    /// Datagrams received more than once (counted once in `received`).
    pub duplicates: u64,
    /// Datagrams that arrived after one with a higher sequence number.
    pub out_of_order: u64,
    /// Bytes received (whole datagrams, sequence numbers included).
    pub bytes: u64,
    /// The receiver's time from the first datagram to the last.
    pub seconds: f64,
    /// `bytes` in Gbit/s over `seconds`.
    pub gbps: f64,
    /// Every datagram that arrived had the right length and content (loss is not a failure).
    pub verified: bool,
    /// The sequence number of the first datagram with a wrong length or content.
    pub mismatch_at: Option<u64>,
}

fn gbps(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds / 1e9
    } else {
        0.0
    }
}

fn step_error(step: &str, e: &io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{step}: {e}"))
}

fn interrupted(step: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::Interrupted,
        format!("{step}: interrupted (stop requested)"),
    )
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Sends the stream over TCP from namespace `client` to `server_addr:port` in namespace
/// `server` for `duration`, verifying every byte received; see [`tcp_transfer_with`].
///
/// Needs root (namespaces), so not run here:
///
/// ```no_run
/// use sluice_ports::{Netns, VethPair};
/// use std::time::Duration;
///
/// let (a, b) = (Netns::create("doc-a")?, Netns::create("doc-b")?);
/// let veth = VethPair::create(&a, "va", &b, "vb", 1500)?;
/// a.run(&["ip", "addr", "add", "10.9.0.1/24", "dev", veth.a()])?;
/// b.run(&["ip", "addr", "add", "10.9.0.2/24", "dev", veth.b()])?;
///
/// let dst = "10.9.0.2".parse().unwrap();
/// let report = sluice_traffic::tcp_transfer(&b, dst, 0, &a, Duration::from_secs(1))?;
/// assert!(report.verified && report.bytes == report.sent && report.bytes > 0);
/// println!("{:.1} Gbit/s", report.gbps);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn tcp_transfer(
    server: &Netns,
    server_addr: IpAddr,
    port: u16,
    client: &Netns,
    duration: Duration,
) -> io::Result<TransferReport> {
    tcp_transfer_with(
        server,
        SocketAddr::new(server_addr, port),
        client,
        &TransferOptions::new(duration),
    )
}

/// What the sender thread ended with.
enum SendEnd {
    /// Connected and sent this many bytes; the stream is kept open until the receiver is done.
    Done(u64, TcpStream),
    /// Failed before connecting.
    Connect(io::Error),
    /// Failed after connecting.
    Send(io::Error),
}

/// Listens on `addr` (port 0: any free port) in `server`, connects from `client` and sends the
/// stream for `opts.duration`, then closes; the receiver reads to the end, verifying every byte.
/// Throughput is the bytes read over the receiver's time from the first byte to the end.
///
/// Fails with an error naming the step (listen, connect, accept, send, receive) when a socket
/// call fails or a time limit of `opts` passes.
pub fn tcp_transfer_with(
    server: &Netns,
    addr: SocketAddr,
    client: &Netns,
    opts: &TransferOptions<'_>,
) -> io::Result<TransferReport> {
    let listener = server
        .enter(move || TcpListener::bind(addr))
        .and_then(|r| r)
        .map_err(|e| step_error(&format!("listen on {addr} in {}", server.name()), &e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| step_error("listen: local address", &e))?;
    let abort = AtomicBool::new(false);
    let (received, sent) = std::thread::scope(|s| {
        let receiver = s.spawn(|| {
            let r = tcp_receive(&listener, opts, &abort);
            if r.is_err() {
                abort.store(true, Ordering::SeqCst);
            }
            r
        });
        let sent = client
            .enter(|| {
                let r = tcp_send(addr, client.name(), opts, &abort);
                if !matches!(r, SendEnd::Done(..)) {
                    abort.store(true, Ordering::SeqCst);
                }
                r
            })
            .unwrap_or_else(|e| {
                abort.store(true, Ordering::SeqCst);
                SendEnd::Connect(step_error(&format!("enter {}", client.name()), &e))
            });
        let received = receiver
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        (received, sent)
    });
    match (received, sent) {
        (_, SendEnd::Connect(e)) => Err(e),
        (Err(e), _) => Err(e),
        (Ok(_), SendEnd::Send(e)) => Err(e),
        (Ok(r), SendEnd::Done(sent, stream)) => {
            drop(stream);
            Ok(TransferReport {
                bytes: r.bytes,
                sent,
                seconds: r.seconds,
                gbps: gbps(r.bytes, r.seconds),
                verified: r.mismatch_at.is_none() && r.bytes == sent,
                mismatch_at: r.mismatch_at,
            })
        }
    }
}

struct Received {
    bytes: u64,
    seconds: f64,
    mismatch_at: Option<u64>,
}

fn tcp_accept(
    listener: &TcpListener,
    opts: &TransferOptions<'_>,
    abort: &AtomicBool,
) -> io::Result<TcpStream> {
    let step = "accept";
    listener
        .set_nonblocking(true)
        .map_err(|e| step_error(step, &e))?;
    // The sender gives up after connect_timeout; wait a little longer than it does.
    let limit = opts.connect_timeout + Duration::from_secs(1);
    let start = Instant::now();
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream
                    .set_nonblocking(false)
                    .map_err(|e| step_error(step, &e))?;
                return Ok(stream);
            }
            Err(e) if is_timeout(&e) => {
                if opts.stopped() {
                    return Err(interrupted(step));
                }
                if abort.load(Ordering::SeqCst) {
                    return Err(io::Error::other("accept: the sender gave up"));
                }
                if start.elapsed() > limit {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("accept: no connection within {limit:?}"),
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(step_error(step, &e)),
        }
    }
}

fn tcp_receive(
    listener: &TcpListener,
    opts: &TransferOptions<'_>,
    abort: &AtomicBool,
) -> io::Result<Received> {
    let mut stream = tcp_accept(listener, opts, abort)?;
    let step = "receive";
    stream
        .set_read_timeout(Some(TICK))
        .map_err(|e| step_error(step, &e))?;
    let mut buf = vec![0u8; IO_CHUNK];
    let mut bytes = 0u64;
    let mut mismatch_at = None;
    let mut first: Option<Instant> = None;
    let mut last_progress = Instant::now();
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let now = Instant::now();
                first.get_or_insert(now);
                last_progress = now;
                let data = buf.get(..n).unwrap_or_default();
                if mismatch_at.is_none() {
                    mismatch_at = verify_chunk(bytes, data);
                }
                bytes += n as u64;
            }
            Err(e) if is_timeout(&e) => {
                if opts.stopped() {
                    return Err(interrupted(step));
                }
                if abort.load(Ordering::SeqCst) {
                    return Err(io::Error::other(format!(
                        "receive: the sender failed after {bytes} bytes"
                    )));
                }
                if last_progress.elapsed() > opts.stall_timeout {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "receive: no data for {:?} after {bytes} bytes (is the path dropping \
                             packets?)",
                            opts.stall_timeout
                        ),
                    ));
                }
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("receive: {e} after {bytes} bytes"),
                ))
            }
        }
    }
    let seconds = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
    Ok(Received {
        bytes,
        seconds,
        mismatch_at,
    })
}

fn tcp_connect(
    addr: SocketAddr,
    ns: &str,
    opts: &TransferOptions<'_>,
    abort: &AtomicBool,
) -> io::Result<TcpStream> {
    let start = Instant::now();
    loop {
        let left = opts.connect_timeout.saturating_sub(start.elapsed());
        let attempt = left
            .min(Duration::from_secs(1))
            .max(Duration::from_millis(10));
        let err = match TcpStream::connect_timeout(&addr, attempt) {
            Ok(s) => return Ok(s),
            Err(e) => e,
        };
        if opts.stopped() {
            return Err(interrupted("connect"));
        }
        if abort.load(Ordering::SeqCst) {
            return Err(io::Error::other(format!(
                "connect to {addr} from {ns}: the receiver failed"
            )));
        }
        if start.elapsed() >= opts.connect_timeout {
            return Err(io::Error::new(
                err.kind(),
                format!(
                    "connect to {addr} from {ns}: {err} (gave up after {:?})",
                    opts.connect_timeout
                ),
            ));
        }
        // Refused or unreachable come back at once: the link or ARP may still be settling.
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn tcp_send(addr: SocketAddr, ns: &str, opts: &TransferOptions<'_>, abort: &AtomicBool) -> SendEnd {
    let mut stream = match tcp_connect(addr, ns, opts, abort) {
        Ok(s) => s,
        Err(e) => return SendEnd::Connect(e),
    };
    match tcp_send_stream(&mut stream, opts, abort) {
        Ok(sent) => SendEnd::Done(sent, stream),
        Err(e) => SendEnd::Send(e),
    }
}

fn tcp_send_stream(
    stream: &mut TcpStream,
    opts: &TransferOptions<'_>,
    abort: &AtomicBool,
) -> io::Result<u64> {
    let step = "send";
    stream
        .set_write_timeout(Some(TICK))
        .map_err(|e| step_error(step, &e))?;
    let start = Instant::now();
    let mut last_progress = start;
    let mut sent = 0u64;
    while start.elapsed() < opts.duration {
        match stream.write(stream_slice(sent, IO_CHUNK)) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!("send: the connection took no more data after {sent} bytes"),
                ))
            }
            Ok(n) => {
                sent += n as u64;
                last_progress = Instant::now();
            }
            Err(e) if is_timeout(&e) => {
                if last_progress.elapsed() > opts.stall_timeout {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "send: no progress for {:?} after {sent} bytes (is the path dropping \
                             packets?)",
                            opts.stall_timeout
                        ),
                    ));
                }
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("send: {e} after {sent} bytes"),
                ))
            }
        }
        if opts.stopped() {
            return Err(interrupted(step));
        }
        if abort.load(Ordering::SeqCst) {
            return Err(io::Error::other(format!(
                "send: the receiver failed after {sent} bytes"
            )));
        }
    }
    stream
        .shutdown(Shutdown::Write)
        .map_err(|e| step_error("send: shutdown", &e))?;
    Ok(sent)
}

/// Sends `datagram_size`-byte UDP datagrams (an 8-byte sequence number, then the stream at
/// offset `seq × (datagram_size − 8)`) from `client` to `server_addr:port` in `server` for
/// `duration`, as fast as the socket takes them; see [`udp_transfer_with`].
///
/// Needs root (namespaces), so not run here:
///
/// ```no_run
/// use sluice_ports::{Netns, VethPair};
/// use std::time::Duration;
///
/// let (a, b) = (Netns::create("doc-a")?, Netns::create("doc-b")?);
/// let veth = VethPair::create(&a, "va", &b, "vb", 1500)?;
/// a.run(&["ip", "addr", "add", "10.9.0.1/24", "dev", veth.a()])?;
/// b.run(&["ip", "addr", "add", "10.9.0.2/24", "dev", veth.b()])?;
///
/// let dst = "10.9.0.2".parse().unwrap();
/// let report = sluice_traffic::udp_transfer(&b, dst, 0, &a, Duration::from_millis(500), 1400)?;
/// assert!(report.verified && report.received > 0);
/// assert_eq!(report.sent, report.received + report.lost);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn udp_transfer(
    server: &Netns,
    server_addr: IpAddr,
    port: u16,
    client: &Netns,
    duration: Duration,
    datagram_size: usize,
) -> io::Result<UdpReport> {
    udp_transfer_with(
        server,
        SocketAddr::new(server_addr, port),
        client,
        datagram_size,
        &TransferOptions::new(duration),
    )
}

/// The UDP transfer: the receiver counts distinct, duplicate and out-of-order datagrams and
/// verifies the length and content of each; lost datagrams are counted, not a failure. The
/// receiver stops once it has every datagram the sender sent or none arrived for 300 ms after
/// the sender finished.
///
/// Fails when a socket call fails, when `datagram_size` is outside
/// [`UDP_MIN_DATAGRAM`]`..=`[`UDP_MAX_DATAGRAM`], or when not a single datagram arrived.
pub fn udp_transfer_with(
    server: &Netns,
    addr: SocketAddr,
    client: &Netns,
    datagram_size: usize,
    opts: &TransferOptions<'_>,
) -> io::Result<UdpReport> {
    if !(UDP_MIN_DATAGRAM..=UDP_MAX_DATAGRAM).contains(&datagram_size) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "UDP datagram size {datagram_size} is outside {UDP_MIN_DATAGRAM}..={UDP_MAX_DATAGRAM}"
            ),
        ));
    }
    let socket = server
        .enter(move || UdpSocket::bind(addr))
        .and_then(|r| r)
        .map_err(|e| step_error(&format!("bind {addr} in {}", server.name()), &e))?;
    let addr = socket
        .local_addr()
        .map_err(|e| step_error("udp bind: local address", &e))?;
    let sent_total = AtomicU64::new(0);
    let sender_done = AtomicBool::new(false);
    let (received, sent) = std::thread::scope(|s| {
        let receiver =
            s.spawn(|| udp_receive(&socket, datagram_size, opts, &sent_total, &sender_done));
        let sent = client
            .enter(|| udp_send(addr, datagram_size, opts, &sent_total))
            .and_then(|r| r);
        sender_done.store(true, Ordering::SeqCst);
        let received = receiver
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        (received, sent)
    });
    let sent = sent?;
    let r = received?;
    if r.received == 0 {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("udp receive: none of the {sent} datagrams sent to {addr} arrived"),
        ));
    }
    Ok(UdpReport {
        sent,
        received: r.received,
        lost: sent.saturating_sub(r.received),
        duplicates: r.duplicates,
        out_of_order: r.out_of_order,
        bytes: r.bytes,
        seconds: r.seconds,
        gbps: gbps(r.bytes, r.seconds),
        verified: r.mismatch_at.is_none(),
        mismatch_at: r.mismatch_at,
    })
}

fn udp_send(
    addr: SocketAddr,
    size: usize,
    opts: &TransferOptions<'_>,
    sent_total: &AtomicU64,
) -> io::Result<u64> {
    let any: SocketAddr = if addr.is_ipv4() {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from(([0u16; 8], 0))
    };
    let socket = UdpSocket::bind(any).map_err(|e| step_error("udp send: bind", &e))?;
    socket
        .connect(addr)
        .map_err(|e| step_error(&format!("udp send: connect to {addr}"), &e))?;
    socket
        .set_write_timeout(Some(TICK))
        .map_err(|e| step_error("udp send", &e))?;
    let payload = (size - 8) as u64;
    let mut buf = vec![0u8; size];
    let start = Instant::now();
    let mut seq = 0u64;
    while start.elapsed() < opts.duration {
        if opts.stopped() {
            return Err(interrupted("udp send"));
        }
        let (head, body) = buf.split_at_mut(8);
        head.copy_from_slice(&seq.to_be_bytes());
        fill_stream(seq * payload, body);
        match socket.send(&buf) {
            Ok(_) => {
                seq += 1;
                sent_total.store(seq, Ordering::SeqCst);
            }
            // A full queue, or an ICMP error from an earlier datagram: try again.
            Err(e)
                if is_timeout(&e)
                    || matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionRefused | io::ErrorKind::OutOfMemory
                    )
                    // ENOBUFS on Linux (no stable ErrorKind for it).
                    || e.raw_os_error() == Some(105) =>
            {
                std::thread::yield_now();
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("udp send: {e} after {seq} datagrams"),
                ))
            }
        }
    }
    Ok(seq)
}

struct UdpReceived {
    received: u64,
    duplicates: u64,
    out_of_order: u64,
    bytes: u64,
    seconds: f64,
    mismatch_at: Option<u64>,
}

fn udp_receive(
    socket: &UdpSocket,
    size: usize,
    opts: &TransferOptions<'_>,
    sent_total: &AtomicU64,
    sender_done: &AtomicBool,
) -> io::Result<UdpReceived> {
    let step = "udp receive";
    socket
        .set_read_timeout(Some(Duration::from_millis(20)))
        .map_err(|e| step_error(step, &e))?;
    let payload = (size - 8) as u64;
    let mut buf = vec![0u8; UDP_MAX_DATAGRAM + 1];
    // One bit per sequence number seen, grown as datagrams arrive.
    let mut seen: Vec<u64> = Vec::new();
    let mut r = UdpReceived {
        received: 0,
        duplicates: 0,
        out_of_order: 0,
        bytes: 0,
        seconds: 0.0,
        mismatch_at: None,
    };
    let mut highest: Option<u64> = None;
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let mut done_at: Option<Instant> = None;
    loop {
        match socket.recv(&mut buf) {
            Ok(n) => {
                let now = Instant::now();
                first.get_or_insert(now);
                last = now;
                r.bytes += n as u64;
                let data = buf.get(..n).unwrap_or_default();
                let seq = data
                    .get(..8)
                    .and_then(|h| <[u8; 8]>::try_from(h).ok())
                    .map(u64::from_be_bytes);
                let Some(seq) = seq.filter(|_| n == size) else {
                    r.mismatch_at.get_or_insert(seq.unwrap_or(u64::MAX));
                    continue;
                };
                // A corrupted sequence number far beyond what was sent must not grow the bitmap.
                if seq > sent_total.load(Ordering::SeqCst) + (1 << 20) {
                    r.mismatch_at.get_or_insert(seq);
                    continue;
                }
                let word = (seq / 64) as usize;
                if seen.len() <= word {
                    seen.resize(word + 1, 0);
                }
                let bit = 1u64 << (seq % 64);
                if let Some(w) = seen.get_mut(word) {
                    if *w & bit != 0 {
                        r.duplicates += 1;
                        continue;
                    }
                    *w |= bit;
                }
                r.received += 1;
                if highest.is_some_and(|h| seq < h) {
                    r.out_of_order += 1;
                }
                highest = highest.max(Some(seq));
                if r.mismatch_at.is_none()
                    && verify_chunk(seq * payload, data.get(8..).unwrap_or_default()).is_some()
                {
                    r.mismatch_at = Some(seq);
                }
            }
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(step_error(step, &e)),
        }
        if opts.stopped() {
            return Err(interrupted(step));
        }
        if sender_done.load(Ordering::SeqCst) {
            let done = *done_at.get_or_insert_with(Instant::now);
            let quiet = last.max(done).elapsed() > Duration::from_millis(300);
            if r.received >= sent_total.load(Ordering::SeqCst) || quiet {
                break;
            }
        } else if first.is_none() && last.elapsed() > opts.duration + opts.stall_timeout {
            break;
        }
    }
    r.seconds = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_is_deterministic_and_not_trivial() {
        let b = block();
        assert_eq!(b.len(), BLOCK_LEN);
        // The first bytes follow from the seed (recomputed independently here).
        let mut s = SEED;
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        assert_eq!(&b[..8], &s.to_le_bytes());
        // Every byte value occurs, roughly uniformly.
        let mut counts = [0usize; 256];
        for &x in b {
            counts[x as usize] += 1;
        }
        let expect = BLOCK_LEN / 256;
        assert!(counts.iter().all(|&c| c > expect / 2 && c < expect * 2));
    }

    #[test]
    fn the_stream_verifies_across_block_boundaries() {
        let mut buf = vec![0u8; 3 * BLOCK_LEN / 2];
        for offset in [0, 1, BLOCK_LEN as u64 - 5, 7 * BLOCK_LEN as u64 + 12_345] {
            fill_stream(offset, &mut buf);
            assert_eq!(verify_chunk(offset, &buf), None, "offset {offset}");
            // The same bytes at the wrong offset do not verify.
            assert!(verify_chunk(offset + 1, &buf).is_some());
        }
        assert_eq!(verify_chunk(42, &[]), None);
    }

    #[test]
    fn a_flipped_byte_is_found_at_its_stream_offset() {
        let base = 5 * BLOCK_LEN as u64 - 1000;
        let mut buf = vec![0u8; 4096];
        fill_stream(base, &mut buf);
        // Before, at and after the block boundary (1000 bytes in).
        for at in [0usize, 999, 1000, 1001, 4095] {
            let mut bad = buf.clone();
            bad[at] ^= 0x20;
            assert_eq!(verify_chunk(base, &bad), Some(base + at as u64), "at {at}");
        }
        // Two flips: the first one is reported.
        let mut bad = buf.clone();
        bad[3000] ^= 1;
        bad[2000] ^= 1;
        assert_eq!(verify_chunk(base, &bad), Some(base + 2000));
    }

    #[test]
    fn a_lost_or_reordered_chunk_is_found() {
        let mut buf = vec![0u8; 10_000];
        fill_stream(0, &mut buf);
        // Loss: bytes 4000..5000 missing, the rest shifted down.
        let lost: Vec<u8> = buf[..4000].iter().chain(&buf[5000..]).copied().collect();
        assert_eq!(verify_chunk(0, &lost), Some(4000));
        // Reordering: two 1000-byte pieces swapped.
        let mut swapped = buf.clone();
        swapped[2000..3000].copy_from_slice(&buf[3000..4000]);
        swapped[3000..4000].copy_from_slice(&buf[2000..3000]);
        assert_eq!(verify_chunk(0, &swapped), Some(2000));
    }

    #[test]
    fn throughput_arithmetic() {
        assert_eq!(gbps(1_250_000_000, 1.0), 10.0);
        assert_eq!(gbps(1, 0.0), 0.0);
    }
}

/// The README's examples, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
