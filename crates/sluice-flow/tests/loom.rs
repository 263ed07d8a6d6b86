//! Model check of the publish protocol (`RUSTFLAGS="--cfg loom" cargo test -p sluice-flow
//! --test loom --release`): in every interleaving, a reader sees a batch whole or not at all, and
//! the writer's replay keeps both copies equal.
#![cfg(loom)]

use sluice_flow::publish::{Absorb, Writer};

/// Two counters that every batch moves together with two separate operations.
#[derive(Clone, Default, Debug)]
struct Pair {
    a: u64,
    b: u64,
}

enum Op {
    A(u64),
    B(u64),
}

impl Absorb<Op> for Pair {
    type Context = ();
    fn absorb(&mut self, op: &Op, _: &(), _: &Pair) {
        match op {
            Op::A(n) => self.a += n,
            Op::B(n) => self.b += n,
        }
    }
    fn finish(&mut self) {}
}

fn write_batch(w: &mut Writer<Pair, Op>, n: u64) {
    let ops = vec![Op::A(n), Op::B(n)];
    let t = w.standby_mut(&());
    for op in &ops {
        t.absorb(op, &(), &Pair::default());
    }
    w.publish(ops);
}

#[test]
fn readers_see_whole_batches_only() {
    loom::model(|| {
        let mut w = Writer::new(Pair::default());
        let r = w.reader();
        let reader = loom::thread::spawn(move || {
            let mut last = 0;
            for _ in 0..2 {
                let g = r.load();
                assert_eq!(g.a, g.b, "half a batch visible");
                // Totals after 0, 1, 2 and 3 batches (1, 2 and 4 added).
                assert!([0, 1, 3, 7].contains(&g.a), "not a batch boundary: {}", g.a);
                assert!(g.a >= last, "went back in time");
                last = g.a;
            }
        });
        write_batch(&mut w, 1);
        write_batch(&mut w, 2);
        write_batch(&mut w, 4);
        reader.join().unwrap();
        // After the reader left, the standby copy catches up to the published one.
        let t = w.standby_mut(&());
        assert_eq!((t.a, t.b), (7, 7));
    });
}

/// `catch_up` between batches, while a reader may still hold the copy it would replay on:
/// readers still see whole batches only, and both copies end equal.
#[test]
fn catch_up_between_batches_keeps_batches_whole() {
    loom::model(|| {
        let mut w = Writer::new(Pair::default());
        let r = w.reader();
        let reader = loom::thread::spawn(move || {
            let g = r.load();
            assert_eq!(g.a, g.b, "half a batch visible");
            assert!([0, 1, 3].contains(&g.a), "not a batch boundary: {}", g.a);
        });
        write_batch(&mut w, 1);
        let _ = w.catch_up(&());
        write_batch(&mut w, 2);
        reader.join().unwrap();
        assert!(w.catch_up(&()), "no reader left, yet not replayed");
        let t = w.standby_mut(&());
        assert_eq!((t.a, t.b), (3, 3));
    });
}
