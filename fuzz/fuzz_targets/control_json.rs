//! Fuzzes the daemon's control request path on a client's bytes: they are read by
//! `control::next_request` (the reader `serve_connection` runs: lines of JSON, and the raw text
//! after a `text_bytes` line) and each request goes through `control::handle` against a real [`Switch`] with
//! no ports (rule batches, text batches, deletes, dumps, trace, features, coverage …). Requests
//! that would reach the host — `port_add` (creates a TAP or attaches to an interface) and
//! `port_up` — are decoded but not run. The rules an input inserted are deleted after it, so
//! inputs do not depend on each other.
//!
//! The same bytes, as UTF-8 text, also go through the client's streaming path: `chunk_rules`
//! cuts them into whole-line chunks (limits from the first two bytes) and each chunk's
//! `encode_text_request` bytes must read back, with `next_request`, as exactly that chunk's text.
//!
//! The same bytes, raw (a rules file that may not be UTF-8), also go through `RuleChunker`, the
//! CLI's streaming reader, over a reader that hands out a few bytes at a time and with the
//! first chunk's limit ramping up: the chunks must be the input's leading whole lines in order,
//! and a line that is not UTF-8 must stop it with `NotUtf8` naming exactly that line.
//!
//! Checked: no panic; a refusal reads `bad request: ...`; every answer serialises; chunks cover
//! the text in order, each within its limits unless it is a single line.
//!
//! Seeds: `fuzz/seeds/control_json` (every request kind of `docs/control.md`, and text batches).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_switch::control::{
    self, chunk_rules, encode_text_request, Incoming, NotUtf8, Request, RuleChunker, TextOp,
};
use std::io::BufReader;
use sluice_switch::{Switch, SwitchConfig};
use std::sync::atomic::AtomicBool;
use std::sync::OnceLock;

fn switch() -> &'static Switch {
    static SWITCH: OnceLock<Switch> = OnceLock::new();
    SWITCH.get_or_init(|| {
        Switch::start(SwitchConfig {
            max_rules: 4096,
            max_masks: 64,
            max_rule_bytes: 16 << 20,
            ..SwitchConfig::default()
        })
        .expect("a switch without ports starts")
    })
}

fn server_path(data: &[u8]) {
    let sw = switch();
    let stop = AtomicBool::new(false);
    // The server's own reader: lines, and the text that follows a `text_bytes` line. A last
    // line without its newline (or a text cut short) is never run.
    let mut reader: &[u8] = data;
    let mut line = Vec::new();
    loop {
        match control::next_request(&mut reader, &mut line, &stop).expect("a slice reads") {
            Incoming::End | Incoming::Close(_) => break,
            Incoming::Refused(e) => assert!(e.starts_with("bad request: "), "{e}"),
            Incoming::Request(Request::PortAdd(_) | Request::PortUp { .. }) => {}
            Incoming::Request(req) => {
                if let Ok(v) = control::handle(sw, req, &stop) {
                    let _ = v.to_string();
                }
            }
        }
    }
    // Forget this input's rules.
    let handles: Vec<String> = sw
        .dump_flows()
        .iter()
        .filter_map(|l| l.strip_prefix("handle ")?.split(':').next().map(str::to_string))
        .collect();
    if !handles.is_empty() {
        let _ = sw.del_flows_text(&handles.join("\n"), false);
    }
    assert!(sw.dump_flows().is_empty(), "every rule deleted");
}

fn stream_path(data: &[u8]) {
    let (Some(&r), Some(&b)) = (data.first(), data.get(1)) else {
        return;
    };
    let Ok(text) = std::str::from_utf8(&data[2..]) else {
        return;
    };
    let max_rules = usize::from(r % 16) + 1;
    let max_bytes = usize::from(b) * 4 + 16;
    let chunks = chunk_rules(text, max_rules, max_bytes);
    let mut pos = 0;
    for (k, c) in chunks.iter().enumerate() {
        assert_eq!(c.start, pos, "chunk {k} starts where the last ended");
        assert!(c.end > c.start && c.end <= text.len());
        pos = c.end;
        let part = &text[c.start..c.end];
        let one_line = part.trim_end_matches('\n').find('\n').is_none();
        assert!(c.rules <= max_rules || one_line);
        for op in [TextOp::Add, TextOp::Del, TextOp::Mod] {
            let bytes = encode_text_request(part, op, k % 2 == 0).expect("encode");
            assert!(bytes.len() <= max_bytes + 80 || one_line, "chunk {k} too big");
            // Read back by the server's reader: the request, its text exactly the chunk's.
            let (mut reader, mut buf) = (&bytes[..], Vec::new());
            let stop = AtomicBool::new(false);
            let read = control::next_request(&mut reader, &mut buf, &stop).expect("reads");
            let Incoming::Request(req) = read else {
                panic!("an encoded chunk reads as a request: {read:?}");
            };
            assert!(reader.is_empty(), "the request is all of the bytes");
            match req {
                Request::FlowAddText { text, .. } if op == TextOp::Add => {
                    assert_eq!(text.as_deref(), Some(part))
                }
                Request::FlowDelText { text, .. } if op == TextOp::Del => {
                    assert_eq!(text.as_deref(), Some(part))
                }
                Request::FlowModText { text, .. } if op == TextOp::Mod => {
                    assert_eq!(text.as_deref(), Some(part))
                }
                other => panic!("decoded to {other:?}"),
            }
        }
    }
    assert_eq!(pos, text.len(), "the chunks cover the text");
}

fn file_path(data: &[u8]) {
    let (Some(&r), Some(&b)) = (data.first(), data.get(1)) else {
        return;
    };
    let body = &data[2..];
    let max_rules = usize::from(r % 16) + 1;
    let first = usize::from(r / 16) + 1;
    let max_bytes = usize::from(b) * 4 + 16;
    let src = BufReader::with_capacity(usize::from(b % 7) + 1, body);
    let mut c = RuleChunker::new(src, max_rules, max_bytes).ramp_from(first);
    let mut pos = 0;
    let mut line = 0;
    loop {
        match c.next_chunk() {
            Ok(Some((chunk, part))) => {
                assert_eq!((chunk.start, chunk.first_line), (pos, line));
                assert_eq!(part.as_bytes(), &body[chunk.start..chunk.end]);
                let one_line = part.trim_end_matches('\n').find('\n').is_none();
                assert!(chunk.rules <= max_rules || one_line);
                pos = chunk.end;
                line += part.split_inclusive('\n').count();
            }
            Ok(None) => {
                assert_eq!(pos, body.len(), "the chunks cover the input");
                break;
            }
            Err(e) => {
                let bad = e
                    .get_ref()
                    .and_then(|x| x.downcast_ref::<NotUtf8>())
                    .copied()
                    .expect("reading from memory fails only on a line that is not UTF-8");
                // The named line is the next one, and it is not UTF-8.
                assert_eq!(bad.line, line);
                let rest = &body[pos..];
                let end = rest.iter().position(|&x| x == b'\n').map_or(rest.len(), |i| i + 1);
                assert!(std::str::from_utf8(&rest[..end]).is_err());
                break;
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    server_path(data);
    stream_path(data);
    file_path(data);
});
