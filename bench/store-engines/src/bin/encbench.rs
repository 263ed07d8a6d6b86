//! Encoding of 1M rules: hand-written varint (the store's format) vs bincode 1 vs postcard.
//! Without an argument: sizes and wall-clock times over 1M rules, three times. With `none`,
//! `hand`, `bincode` or `postcard`: one encode + decode of 100,000 rules, for callgrind
//! (`valgrind --tool=callgrind encbench MODE`; subtract `none`, which builds, clones and
//! compares the rules the same way).
use std::time::Instant;

#[derive(serde::Serialize, serde::Deserialize, Clone, PartialEq, Debug)]
struct Rule {
    handle: u64,
    priority: u32,
    matches: Vec<u8>,
    actions: Vec<u8>,
}

fn rule(handle: u64) -> Rule {
    Rule {
        handle,
        priority: 100 + (handle % 16) as u32,
        matches: format!(
            "ip,in_port=1,nw_dst=10.{}.{}.{}",
            (handle >> 16) & 255,
            (handle >> 8) & 255,
            handle & 255
        )
        .into_bytes(),
        actions: b"output:2".to_vec(),
    }
}

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}
fn put_bytes(buf: &mut Vec<u8>, b: &[u8]) {
    put_varint(buf, b.len() as u64);
    buf.extend_from_slice(b);
}
fn varint(b: &[u8], p: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for s in (0..64).step_by(7) {
        let x = *b.get(*p)?;
        *p += 1;
        v |= u64::from(x & 0x7f) << s;
        if x & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}
fn bytes<'a>(b: &'a [u8], p: &mut usize) -> Option<&'a [u8]> {
    let n = varint(b, p)? as usize;
    let s = b.get(*p..*p + n)?;
    *p += n;
    Some(s)
}

fn hand_enc(rules: &[Rule]) -> Vec<u8> {
    let mut buf = Vec::new();
    put_varint(&mut buf, rules.len() as u64);
    let mut prev = 0u64;
    for r in rules {
        put_varint(&mut buf, r.handle.wrapping_sub(prev));
        prev = r.handle;
        put_varint(&mut buf, r.priority.into());
        put_bytes(&mut buf, &r.matches);
        put_bytes(&mut buf, &r.actions);
    }
    buf
}
fn hand_dec(b: &[u8]) -> Option<Vec<Rule>> {
    let mut p = 0;
    let n = varint(b, &mut p)? as usize;
    let mut v = Vec::with_capacity(n);
    let mut prev = 0u64;
    for _ in 0..n {
        prev = prev.wrapping_add(varint(b, &mut p)?);
        let priority = u32::try_from(varint(b, &mut p)?).ok()?;
        let matches = bytes(b, &mut p)?.to_vec();
        let actions = bytes(b, &mut p)?.to_vec();
        v.push(Rule {
            handle: prev,
            priority,
            matches,
            actions,
        });
    }
    Some(v)
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    if !mode.is_empty() {
        let rules: Vec<Rule> = (1..=100_000).map(rule).collect();
        let ok = match mode.as_str() {
            "hand" => hand_dec(&hand_enc(&rules)).unwrap() == rules,
            "bincode" => {
                bincode::deserialize::<Vec<Rule>>(&bincode::serialize(&rules).unwrap()).unwrap()
                    == rules
            }
            "postcard" => {
                postcard::from_bytes::<Vec<Rule>>(&postcard::to_stdvec(&rules).unwrap()).unwrap()
                    == rules
            }
            _ => rules.clone() == rules,
        };
        assert!(ok);
        return;
    }
    let rules: Vec<Rule> = (1..=1_000_000).map(rule).collect();
    for _ in 0..3 {
        let t = Instant::now();
        let h = hand_enc(&rules);
        let he = t.elapsed();
        let t = Instant::now();
        let hd = hand_dec(&h).unwrap();
        let hdt = t.elapsed();
        assert_eq!(hd, rules);
        let t = Instant::now();
        let b = bincode::serialize(&rules).unwrap();
        let be = t.elapsed();
        let t = Instant::now();
        let bd: Vec<Rule> = bincode::deserialize(&b).unwrap();
        let bdt = t.elapsed();
        assert_eq!(bd, rules);
        let t = Instant::now();
        let p = postcard::to_stdvec(&rules).unwrap();
        let pe = t.elapsed();
        let t = Instant::now();
        let pd: Vec<Rule> = postcard::from_bytes(&p).unwrap();
        let pdt = t.elapsed();
        assert_eq!(pd, rules);
        println!("hand-written: {:.1} B/rule enc {:.1} ms dec {:.1} ms | bincode 1: {:.1} B/rule enc {:.1} ms dec {:.1} ms | postcard 1: {:.1} B/rule enc {:.1} ms dec {:.1} ms",
            h.len() as f64 / 1e6, he.as_secs_f64()*1e3, hdt.as_secs_f64()*1e3,
            b.len() as f64 / 1e6, be.as_secs_f64()*1e3, bdt.as_secs_f64()*1e3,
            p.len() as f64 / 1e6, pe.as_secs_f64()*1e3, pdt.as_secs_f64()*1e3);
    }
}
