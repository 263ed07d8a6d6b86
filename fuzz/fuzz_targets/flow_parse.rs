//! Fuzzes the flow rule parser (`sluice_flow::parse_rule`): it must never panic; an error must
//! render with its caret inside the line; a rule it accepts must be valid (`key & !mask == 0`),
//! print back as text that parses to the same rule, and insert into a table. Non-UTF-8 input
//! instead drives `FlowKey::extract` over the bytes as a frame, which must not panic either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_flow::{parse_rule, FlowKey, FlowTable, PortNames, RuleText, TableConfig};

fuzz_target!(|data: &[u8]| {
    let mut ports = PortNames::new();
    ports.insert("tap0", 1);
    ports.insert("tap1", 2);
    let Ok(line) = std::str::from_utf8(data) else {
        let (layout, _) = sluice_wire::parse_partial(data, &sluice_wire::ParseConfig::DEFAULT);
        let _ = FlowKey::extract(data, &layout, 1);
        let _ = FlowKey::extract_outer(data, &layout, 1);
        return;
    };
    match parse_rule(line, &ports) {
        Err(e) => {
            assert!(e.column <= line.len());
            let _ = e.render(line);
        }
        Ok(rule) => {
            assert!(rule.matcher.is_valid());
            let text = RuleText {
                rule: &rule,
                ports: &ports,
            }
            .to_string();
            let again = match parse_rule(&text, &ports) {
                Ok(r) => r,
                Err(e) => panic!("printed rule does not parse:\n{}", e.render(&text)),
            };
            assert_eq!(again, rule, "{text}");
            let mut t = FlowTable::new(TableConfig::default());
            assert!(t.insert(rule).is_ok());
        }
    }
});
