//! GRO throughput, comparable line for line with the DPDK peer (`bench/dpdk/gro_bench.c`):
//! bursts of 32 TCP/IPv4 segments (1448 payload bytes) of 1, 4 or 64 interleaved flows, fed to
//! one [`GroEngine`] as one batch (flushed at its end), the output drained and its buffers
//! recycled, as a datapath poll loop would.
//!
//! - `sluice_gro_good`: checksums already `Good` (a NIC with rx checksum offload), as DPDK's GRO
//!   assumes; merged packets still get complete, correct checksums.
//! - `sluice_gro_verify`: checksums `Unknown`, verified in software before merging.
//! - `sluice_burst_good` / `sluice_burst_verify`: the same in burst mode
//!   ([`GroEngine::coalesce_burst`], zero copy: output packets are rewritten headers plus pieces
//!   of the input frames, like DPDK's mbuf chains).
//!
//! Output, one line per measurement: `<name> <flows> <median ns per burst> <segments/s>`, plus
//! `check <flows> <packets out per burst>`. Run with
//! `cargo bench -p sluice-offload --bench gro [-- ROUNDS [FLOWS]]`; for callgrind,
//! `… --bench gro -- profile MODE FLOWS BURSTS` runs one measurement untimed (see [`profile`]).

use sluice_checksum::{checksum, combine, pseudo, sum};
use sluice_offload::gro::{GroBurst, GroConfig, GroEngine};
use sluice_packet::OffloadMeta;
use std::hint::black_box;
use std::time::Instant;

const BURST: usize = 32;
const PAYLOAD: usize = 1448;
const ITERS: usize = 20_000;

/// The same bytes as the DPDK peer's `build_templates`.
fn burst(flows: usize) -> Vec<Vec<u8>> {
    (0..BURST)
        .map(|k| {
            let (flow, seg) = (k % flows, k / flows);
            let mut f = vec![0u8; 54 + PAYLOAD];
            f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
            f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            let total = (40 + PAYLOAD) as u16;
            let id = (100 + seg) as u16;
            f[14..34].copy_from_slice(&[
                0x45,
                0,
                (total >> 8) as u8,
                total as u8,
                (id >> 8) as u8,
                id as u8,
                0x40,
                0,
                64,
                6,
                0,
                0,
                192,
                0,
                2,
                1,
                192,
                0,
                2,
                2,
            ]);
            let c = checksum(&f[14..34]);
            f[24..26].copy_from_slice(&c.to_be_bytes());
            let sport = (40000 + flow) as u16;
            let seq = (1000 + seg * PAYLOAD) as u32;
            f[34..36].copy_from_slice(&sport.to_be_bytes());
            f[36..38].copy_from_slice(&5201u16.to_be_bytes());
            f[38..42].copy_from_slice(&seq.to_be_bytes());
            f[42..46].copy_from_slice(&0x1000_0000u32.to_be_bytes());
            f[46] = 0x50;
            f[47] = 0x10;
            f[48..50].copy_from_slice(&512u16.to_be_bytes());
            for (i, b) in f[54..].iter_mut().enumerate() {
                *b = ((seg * PAYLOAD + i) * 31 + flow) as u8;
            }
            let ps = pseudo::ipv4([192, 0, 2, 1], [192, 0, 2, 2], 6, (20 + PAYLOAD) as u16);
            let c = !combine(ps, sum(&f[34..]));
            f[50..52].copy_from_slice(&c.to_be_bytes());
            f
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One measurement's setup: the frames, their metadata, an engine and the burst output.
struct Case {
    frames: &'static [Vec<u8>],
    refs: Vec<&'static [u8]>,
    metas: Vec<OffloadMeta>,
    engine: GroEngine,
    out_burst: GroBurst,
    burst_mode: bool,
}

impl Case {
    fn new(flows: usize, good: bool, burst_mode: bool) -> Case {
        let frames: &'static [Vec<u8>] = Box::leak(burst(flows).into_boxed_slice());
        let metas = frames
            .iter()
            .map(|f| {
                let mut m = OffloadMeta::from_layout(&sluice_wire::parse(f).expect("parses"));
                if good {
                    m.rx_checksum_unnecessary(false);
                }
                m
            })
            .collect();
        Case {
            frames,
            refs: frames.iter().map(Vec::as_slice).collect(),
            metas,
            engine: GroEngine::new(GroConfig::default()),
            out_burst: GroBurst::new(),
            burst_mode,
        }
    }

    /// One burst through the engine, output drained; returns the packets out.
    fn once(&mut self) -> usize {
        let e = &mut self.engine;
        if self.burst_mode {
            e.coalesce_burst(&self.refs, &self.metas, &mut self.out_burst);
            for p in self.out_burst.packets() {
                black_box(p.segments);
            }
            return self.out_burst.packets().len();
        }
        e.receive_batch(
            self.frames
                .iter()
                .map(Vec::as_slice)
                .zip(self.metas.iter().copied()),
            0,
        );
        let mut n = 0;
        e.drain_output(|p| {
            black_box(p.frame.len());
            n += 1;
        });
        n
    }
}

fn run(rounds: usize, flows: usize, good: bool, burst_mode: bool) -> (f64, usize) {
    let mut c = Case::new(flows, good, burst_mode);
    let mut out = 0;
    for _ in 0..ITERS / 10 {
        out = c.once();
    }
    let samples = (0..rounds)
        .map(|_| {
            let t0 = Instant::now();
            for _ in 0..ITERS {
                black_box(c.once());
            }
            t0.elapsed().as_nanos() as f64 / ITERS as f64
        })
        .collect();
    (median(samples), out)
}

const MODES: [(&str, bool, bool); 4] = [
    ("sluice_gro_good", true, false),
    ("sluice_gro_verify", false, false),
    ("sluice_burst_good", true, true),
    ("sluice_burst_verify", false, true),
];

/// `profile MODE FLOWS BURSTS`: runs one measurement for exactly BURSTS bursts, untimed, for
/// callgrind (instructions per segment = the difference of two runs with different BURSTS,
/// divided by 32 × the difference in BURSTS: setup and first-use allocations cancel out).
fn profile(args: &[String]) {
    let mode = args
        .first()
        .map(String::as_str)
        .unwrap_or("sluice_gro_good");
    let flows = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1);
    let bursts: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let Some(&(_, good, burst_mode)) = MODES.iter().find(|m| m.0 == mode) else {
        eprintln!("unknown mode {mode}");
        std::process::exit(2);
    };
    let mut c = Case::new(flows, good, burst_mode);
    let mut out = 0;
    for _ in 0..bursts {
        out += black_box(c.once());
    }
    println!("{mode} {flows} bursts {bursts} packets_out {out}");
}

fn main() {
    // Arguments: [ROUNDS [FLOWS]] (FLOWS: only that flow count), or `profile MODE FLOWS BURSTS`.
    let raw: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = raw.iter().position(|a| a == "profile") {
        return profile(&raw[i + 1..]);
    }
    let args: Vec<usize> = raw.iter().filter_map(|a| a.parse::<usize>().ok()).collect();
    let rounds = args.first().copied().unwrap_or(15);
    let only = args.get(1).copied();
    for flows in [1, 4, 64] {
        if only.is_some_and(|o| o != flows) {
            continue;
        }
        for (name, good, burst_mode) in MODES {
            let (ns, out) = run(rounds, flows, good, burst_mode);
            println!("{name} {flows} {ns:.1} {:.0}", BURST as f64 * 1e9 / ns);
            if good && !burst_mode {
                println!("check {flows} {out}");
            }
        }
    }
}
