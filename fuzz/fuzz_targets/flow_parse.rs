//! Fuzzes the flow rule parser (`sluice_flow::parse_rule`): it must never panic; an error must
//! render with its caret inside the line; a rule it accepts must be valid (`key & !mask == 0`),
//! print back as text that parses to the same rule, and insert into a table. Non-UTF-8 input
//! instead drives `FlowKey::extract` over the bytes as a frame, which must not panic either. A
//! line parsed twice gives the same answer (the second time through the cache of action texts),
//! and so does a table of the same names built afresh; a table changed after use answers as a
//! new one with its names.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_flow::{parse_rule, FlowKey, FlowTable, PortNames, RuleText, TableConfig};

/// One table of names for every input, so the parser's per-thread cache of action texts
/// carries texts from earlier inputs into later ones.
static PORTS: std::sync::LazyLock<PortNames> = std::sync::LazyLock::new(|| {
    let mut ports = PortNames::new();
    ports.insert("tap0", 1);
    ports.insert("tap1", 2);
    ports
});

fuzz_target!(|data: &[u8]| {
    let ports = &*PORTS;
    let Ok(line) = std::str::from_utf8(data) else {
        let (layout, _) = sluice_wire::parse_partial(data, &sluice_wire::ParseConfig::DEFAULT);
        let _ = FlowKey::extract(data, &layout, 1);
        let _ = FlowKey::extract_outer(data, &layout, 1);
        return;
    };
    let first = parse_rule(line, ports);
    // Parsed again (its action text now cached, if it had one that parsed), and with the same
    // names in a table built afresh (a stamp no cached text has: parsed anew): the same answer.
    assert_eq!(parse_rule(line, ports), first, "{line}");
    let names = || {
        let mut n = PortNames::new();
        n.insert("tap0", 1);
        n.insert("tap1", 2);
        n
    };
    let mut used = names();
    assert_eq!(parse_rule(line, &used), first, "{line}");
    // A table changed after its texts were cached answers as a new table with its names does.
    used.insert("tap0", 7);
    let mut renamed = names();
    renamed.insert("tap0", 7);
    assert_eq!(parse_rule(line, &used), parse_rule(line, &renamed), "{line}");
    match first {
        Err(e) => {
            assert!(e.column <= line.len());
            let _ = e.render(line);
        }
        Ok(rule) => {
            assert!(rule.matcher.is_valid());
            let text = RuleText {
                rule: &rule,
                ports,
            }
            .to_string();
            let again = match parse_rule(&text, ports) {
                Ok(r) => r,
                Err(e) => panic!("printed rule does not parse:\n{}", e.render(&text)),
            };
            assert_eq!(again, rule, "{text}");
            let mut t = FlowTable::new(TableConfig::default());
            assert!(t.insert(rule).is_ok());
        }
    }
});
