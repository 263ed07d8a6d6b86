//! `--spec` files of the pcap tools: one JSON object per line, for the frame of the same number.
//! The keys the tools share (`gso_type`, `gso_size`) are read here, so that both tools accept
//! and refuse the same values with the same messages.

use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};
use sluice_packet::GsoType;
use std::io::BufRead;
use std::path::Path;

/// Reads a spec file, one parsed line per non-blank line (`skip_blank`) or per line.
pub fn read<T>(
    path: &Path,
    skip_blank: bool,
    parse: impl Fn(&Map<String, Value>, usize) -> Result<T>,
) -> Result<Vec<T>> {
    let f = std::fs::File::open(path)
        .with_context(|| format!("cannot open spec {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let no = i + 1;
        let line = line.with_context(|| format!("spec line {no}: cannot read"))?;
        if skip_blank && line.trim().is_empty() {
            continue;
        }
        out.push(parse(&object(&line, no)?, no)?);
    }
    Ok(out)
}

/// One line as a JSON object.
fn object(line: &str, no: usize) -> Result<Map<String, Value>> {
    match serde_json::from_str(line).with_context(|| format!("spec line {no}: not JSON"))? {
        Value::Object(obj) => Ok(obj),
        _ => bail!("spec line {no}: not a JSON object"),
    }
}

/// The `gso_type` key, if present.
pub fn gso_type(obj: &Map<String, Value>, no: usize) -> Result<Option<GsoType>> {
    let Some(t) = obj.get("gso_type") else {
        return Ok(None);
    };
    Ok(Some(match t.as_str() {
        Some("tcpv4") => GsoType::TcpV4,
        Some("tcpv6") => GsoType::TcpV6,
        Some("udp_l4") => GsoType::UdpL4,
        Some("udp") => GsoType::Udp,
        Some("none") => GsoType::None,
        _ => bail!(
            "spec line {no}: gso_type must be one of \"tcpv4\", \"tcpv6\", \"udp_l4\", \"udp\", \"none\", not {t}"
        ),
    }))
}

/// The `gso_size` key, if present.
pub fn gso_size(obj: &Map<String, Value>, no: usize) -> Result<Option<u16>> {
    obj.get("gso_size")
        .map(|n| {
            n.as_u64()
                .and_then(|n| u16::try_from(n).ok())
                .with_context(|| {
                    format!("spec line {no}: gso_size must be an integer 0..=65535, not {n}")
                })
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(line: &str) -> Map<String, Value> {
        object(line, 1).expect("an object")
    }

    #[test]
    fn shared_keys_parse_and_refuse_with_the_line_number() {
        let o = obj(r#"{"gso_type": "udp_l4", "gso_size": 1400}"#);
        assert_eq!(gso_type(&o, 1).unwrap(), Some(GsoType::UdpL4));
        assert_eq!(gso_size(&o, 1).unwrap(), Some(1400));
        assert_eq!(gso_type(&obj("{}"), 1).unwrap(), None);
        let bad = obj(r#"{"gso_type": "sctp", "gso_size": 70000}"#);
        assert!(gso_type(&bad, 7)
            .unwrap_err()
            .to_string()
            .starts_with("spec line 7: gso_type"));
        assert!(gso_size(&bad, 7)
            .unwrap_err()
            .to_string()
            .contains("0..=65535, not 70000"));
        assert!(object("[1]", 3)
            .unwrap_err()
            .to_string()
            .contains("spec line 3: not a JSON object"));
        assert!(object("{", 4)
            .unwrap_err()
            .to_string()
            .contains("spec line 4: not JSON"));
    }
}
