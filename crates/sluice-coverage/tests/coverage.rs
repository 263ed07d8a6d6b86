//! Concurrency (exact sums across live and exited threads) and the rate math.

use sluice_coverage::{
    counter, deltas, lookup, prometheus, register, snapshot, value_by_name, Rates, Sample,
    UnknownCounter,
};
use std::time::Duration;

counter!(TEST_HITS, "test_hits", "hits from the concurrency test");
counter!(
    TEST_OTHER,
    "test_other",
    "a second counter that must not mix with the first"
);
counter!(TEST_NEVER, "test_never", "registered, never incremented");

#[test]
fn threads_sum_exactly_while_running_and_after_exit() {
    const THREADS: u64 = 8;
    const PER: u64 = 100_000;
    let before = TEST_HITS.value();
    let before_other = TEST_OTHER.value();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(THREADS as usize + 1));
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let b = barrier.clone();
            std::thread::spawn(move || {
                for _ in 0..PER {
                    TEST_HITS.inc();
                }
                TEST_OTHER.add(i + 1);
                b.wait(); // counted, still alive
                b.wait(); // main has read
            })
        })
        .collect();
    barrier.wait();
    assert_eq!(TEST_HITS.value() - before, THREADS * PER, "live threads");
    barrier.wait();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(
        TEST_HITS.value() - before,
        THREADS * PER,
        "exited threads folded"
    );
    // 1 + 2 + … + 8
    assert_eq!(TEST_OTHER.value() - before_other, 36);
}

#[test]
fn concurrent_reads_never_exceed_and_end_exact() {
    counter!(RACE, "test_race", "read while threads come and go");
    let readers = std::thread::spawn(|| {
        let mut last = 0;
        for _ in 0..2000 {
            let v = RACE.value();
            assert!(
                v >= last,
                "a reader saw the total go backwards: {v} < {last}"
            );
            assert!(v <= 40_000);
            last = v;
        }
    });
    let writers: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(|| {
                for _ in 0..10_000 {
                    RACE.inc();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    readers.join().unwrap();
    assert_eq!(RACE.value(), 40_000);
}

#[test]
fn registered_counters_are_listed_at_zero_and_exported() {
    register(&[&TEST_NEVER]);
    let snap = snapshot();
    let s = snap
        .iter()
        .find(|s| s.name == "test_never")
        .expect("listed");
    assert_eq!(s.value, 0);
    let text = prometheus(&[Sample {
        name: "oversize_drops",
        help: "frames over MTU",
        value: 7,
    }]);
    assert_eq!(
        text,
        "# HELP sluice_oversize_drops_total frames over MTU\n\
         # TYPE sluice_oversize_drops_total counter\n\
         sluice_oversize_drops_total 7\n"
    );
}

#[test]
fn an_unknown_name_is_an_error_not_zero() {
    counter!(NAMED, "test_named", "looked up by name");
    register(&[&NAMED]);
    NAMED.add(5);
    assert_eq!(value_by_name("test_named"), Ok(5));
    let e = value_by_name("test_nmaed").unwrap_err();
    assert_eq!(e, UnknownCounter("test_nmaed".to_owned()));
    assert_eq!(e.to_string(), "no coverage counter is named \"test_nmaed\"");
    // The same for a lookup in a snapshot or a set of deltas.
    let snap = snapshot();
    assert_eq!(lookup(&snap, "test_named"), Ok(5));
    assert!(lookup(&snap, "").is_err());
    assert!(lookup(&[], "test_named").is_err());
}

#[test]
fn deltas_cover_every_counter_of_the_later_snapshot() {
    let s = |name, value| Sample {
        name,
        help: "",
        value,
    };
    let before = [s("a", 10), s("b", 7)];
    let after = [s("a", 15), s("b", 7), s("c", 3)];
    let d = deltas(&before, &after);
    assert_eq!(d, vec![s("a", 5), s("b", 0), s("c", 3)]);
    assert_eq!(
        lookup(&d, "b"),
        Ok(0),
        "a counter that did not move is known"
    );
    assert!(lookup(&d, "d").is_err());
}

#[test]
fn this_thread_sees_only_its_own_increments() {
    counter!(MINE, "test_this_thread", "per-thread reads");
    counter!(FRESH, "test_this_thread_fresh", "never fired");
    assert_eq!(FRESH.this_thread(), Some(0));
    let before = MINE.this_thread().unwrap();
    MINE.add(3);
    // Another thread's increments move the total, not this thread's count.
    std::thread::spawn(|| {
        MINE.add(100);
        assert_eq!(MINE.this_thread(), Some(100));
    })
    .join()
    .unwrap();
    assert_eq!(MINE.this_thread().unwrap() - before, 3);
    assert_eq!(MINE.value(), 103);
}

fn one(v: u64) -> Vec<Sample> {
    vec![Sample {
        name: "x",
        help: "",
        value: v,
    }]
}

#[test]
fn rates_over_windows() {
    let mut r = Rates::new();
    assert!(r.rates().is_empty());
    r.record(Duration::from_secs(0), one(0));
    assert_eq!(r.rates()[0].per_sec_5s, 0.0, "one snapshot: no rate");
    // 10 events per second for 2 minutes, one snapshot per second.
    for t in 1..=120 {
        r.record(Duration::from_secs(t), one(t * 10));
    }
    let x = r.rates()[0];
    assert_eq!(x.total, 1200);
    assert!((x.per_sec_5s - 10.0).abs() < 1e-9, "{x:?}");
    assert!((x.per_sec_1m - 10.0).abs() < 1e-9, "{x:?}");
    // Less than an hour recorded: the average since the first snapshot.
    assert!((x.per_sec_1h - 10.0).abs() < 1e-9, "{x:?}");
    // Then silence for 10 s: the 5 s rate drops to 0, the minute rate to 50/60 per second.
    for t in 121..=130 {
        r.record(Duration::from_secs(t), one(1200));
    }
    let x = r.rates()[0];
    assert_eq!(x.per_sec_5s, 0.0);
    assert!((x.per_sec_1m - 500.0 / 60.0).abs() < 1e-9, "{x:?}");
    assert!((x.per_sec_1h - 1200.0 / 130.0).abs() < 1e-9, "{x:?}");
    // Time going backwards is ignored.
    r.record(Duration::from_secs(100), one(0));
    assert_eq!(r.rates()[0].total, 1200);
    assert!(r.show(false).contains("total: 1200"));
}

#[test]
fn history_is_bounded_to_an_hour() {
    let mut r = Rates::new();
    for t in 0..=7200u64 {
        r.record(Duration::from_secs(t), one(t));
    }
    let x = r.rates()[0];
    assert!((x.per_sec_1h - 1.0).abs() < 1e-9);
    assert_eq!(x.total, 7200);
}
