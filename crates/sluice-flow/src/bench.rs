//! The benchmark's workload, shared by this crate's benchmarks and examples and by
//! `sluice bench flows`: a deterministic generator ([`SplitMix`]), the benchmark's rules
//! ([`bench_rule`]) and packets that match them ([`packet_for`]). Pure functions: no I/O, no
//! threads, no clock (the timing and the rule-file loader are in the `sluice` binary).

use crate::action::{Action, ActionList};
use crate::key::{v4_mapped, Field, FlowKey};
use crate::rule::{Match, Rule};

/// A small deterministic generator (splitmix64).
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    /// Seeded.
    pub fn new(seed: u64) -> Self {
        SplitMix(seed)
    }
    /// Next value.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The benchmark's rule `i` of `n` over `masks` masks: IPv4 TCP, `dst_ip` with prefix
/// 16 + (mask mod 16), exact `dst_port`, plus `src_ip 172.16.0.0/12`-style and `in_port`
/// matches for masks 16..64. Distinct for every `i`; priority pseudo-random in 0..1024; action
/// `output:(i mod 16)`, one shared [`ActionList`] value per port.
pub fn bench_rule(i: usize, masks: usize) -> Rule {
    let masks = masks.clamp(1, 64);
    let j = i % masks;
    let r = (i / masks) as u64;
    let prefix = 16 + (j % 16) as u32;
    let mut m = Match::ANY;
    m.set_exact(Field::EthType, 0x0800);
    m.set_exact(Field::IpProto, 6);
    m.set_exact(Field::L4Dst, r & 0xffff);
    // Host part: the rule's high bits, left-aligned into the prefix after the 8-bit tag 10.
    let net = (10u32 << 24) | (((r >> 16) as u32 & 0xff) << 16) | ((j as u32) << 8);
    let mask32 = u32::MAX << (32 - prefix);
    let mut dm = [0u8; 16];
    dm[12..].copy_from_slice(&mask32.to_be_bytes());
    m.set(Field::IpDst, &v4_mapped((net & mask32).to_be_bytes()), &dm);
    let extra = j / 16;
    if extra & 1 == 1 {
        let mut sm = [0u8; 16];
        sm[12] = 0xff;
        m.set(Field::IpSrc, &v4_mapped([172, 0, 0, 0]), &sm);
    }
    if extra & 2 == 2 {
        m.set_exact(Field::InPort, 1);
    }
    let prio = (SplitMix::new(i as u64).next() % 1024) as u32;
    Rule {
        matcher: m,
        priority: prio,
        actions: BENCH_ACTIONS.with(|a| {
            a.get(i % 16)
                .cloned()
                .unwrap_or_else(|| ActionList::output((i % 16) as u32))
        }),
    }
}

thread_local! {
    /// The benchmark's 16 action lists (`output:0` … `output:15`), one value each that its
    /// rules share, as a controller reuses its action values (a rule file's repeated action
    /// texts share one list too: see [`crate::text`]).
    static BENCH_ACTIONS: Vec<ActionList> =
        (0..16).map(|p| ActionList::new([Action::Output(p)])).collect();
}

/// A packet that matches `rule` (random bits where the rule's mask is zero).
pub fn packet_for(rule: &Rule, rng: &mut SplitMix) -> FlowKey {
    let mut w = [0u64; crate::key::KEY_WORDS];
    let k = rule.matcher.key.words();
    let m = rule.matcher.mask.words();
    for (i, x) in w.iter_mut().enumerate() {
        *x = (k[i] & m[i]) | (rng.next() & !m[i]);
    }
    FlowKey::from_words(w)
}
