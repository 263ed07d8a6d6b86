//! The rule text syntax, close to `tc flower`.
//!
//! ```text
//! [prio N] [MATCH VALUE]... action ACTION[,ACTION]...
//! ```
//!
//! Matches (values in decimal or `0x` hex; `/MASK` where shown):
//!
//! | key | value |
//! |---|---|
//! | `in_port` | a port name from [`PortNames`] or a number |
//! | `src_mac`, `dst_mac` | `aa:bb:cc:dd:ee:ff[/MASK]`, mask as a MAC or a prefix length |
//! | `eth_type` | `ipv4`, `ipv6`, `arp` or a number: the EtherType after all VLAN tags |
//! | `vlan_ethtype`, `vlan_id`, `vlan_prio` | outer tag: TPID (`802.1q`, `802.1ad`, `0x9100`, number), VID, PCP |
//! | `cvlan_ethtype`, `cvlan_id`, `cvlan_prio` | the same for the second (inner) tag |
//! | `src_ip`, `dst_ip` | IPv4 or IPv6 address, `/PREFIX` or `/MASK` |
//! | `ip_proto` | `tcp`, `udp`, `sctp`, `icmp`, `icmpv6` or a number |
//! | `ip_tos`, `ip_ttl` | number`[/MASK]` (TOS: DSCP << 2 | ECN; TTL: IPv6 hop limit too) |
//! | `src_port`, `dst_port` | number`[/MASK]` (needs `ip_proto` tcp, udp or sctp) |
//! | `tcp_flags` | number`[/MASK]`, 12 bits (needs `ip_proto tcp`) |
//! | `enc_key_id`, `enc_src_ip`, `enc_dst_ip` | tunnel id; outer addresses (`/PREFIX` or `/MASK`) |
//!
//! Differences from tc flower, on purpose: `vlan_ethtype`/`cvlan_ethtype` name the TPID *of* the
//! outer/inner tag (flower names the type that follows it), and `eth_type` is always the
//! EtherType after the whole VLAN stack. `eth_type` is inferred from an IP address match, so
//! `dst_ip 10.0.0.0/8` alone is enough; `ip_proto`, `ip_tos` and `ip_ttl` need an IP family from
//! either. A value with bits outside its mask is masked (`10.0.0.1/24` means `10.0.0.0/24`).
//!
//! ActionList: `output:PORT`, `drop`, `push_vlan:TPID:VID[:PCP]`, `pop_vlan`,
//! `set_eth_src:MAC`, `set_eth_dst:MAC`, `set_ipv4_src:A`, `set_ipv4_dst:A`, `set_ipv6_src:A`,
//! `set_ipv6_dst:A`, `set_ttl:N`, `set_dscp:N`, `set_tp_src:N`, `set_tp_dst:N`,
//! `encap:KIND:id=N:src=ADDR:dst=ADDR[:csum]` (KIND `vxlan`, `geneve` or `gre`; IPv6 addresses in
//! brackets, e.g. `src=[fd00::1]`; `csum` turns the outer UDP checksum on) and `decap`.
//!
//! Each key may appear once. Errors carry the byte column of the offending token;
//! [`ParseError::render`] prints the line
//! with a `^` marker under it. [`RuleText`] prints a rule back in this syntax, and parsing that
//! text gives the same rule.

use core::hash::BuildHasher;
use smallvec::SmallVec;
use std::cell::RefCell;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::action::{Action, ActionList, TunnelEncap, TunnelKind};
use crate::key::{flags, vlan_tci, Field, VLAN_PRESENT};
use crate::rule::{Match, Rule};

/// Port names and numbers, supplied by the caller.
#[derive(Clone)]
pub struct PortNames {
    by_name: HashMap<String, u32>,
    by_num: HashMap<u32, String>,
    /// Taken afresh from a process-wide counter at creation and at every change (a clone
    /// keeps it until either copy changes): the same stamp means the same contents, so a
    /// parse of action text can be reused while the stamp is the same.
    stamp: u64,
}

/// The names and numbers (not the stamp, a process-wide counter).
impl core::fmt::Debug for PortNames {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PortNames")
            .field("by_name", &self.by_name)
            .field("by_num", &self.by_num)
            .finish()
    }
}

/// The next [`PortNames::stamp`].
fn next_stamp() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl Default for PortNames {
    fn default() -> Self {
        PortNames {
            by_name: HashMap::new(),
            by_num: HashMap::new(),
            stamp: next_stamp(),
        }
    }
}

/// Equal when they name the same ports (the stamps may differ).
impl PartialEq for PortNames {
    fn eq(&self, other: &Self) -> bool {
        self.by_name == other.by_name && self.by_num == other.by_num
    }
}

impl Eq for PortNames {}

impl PortNames {
    /// An empty table (numbers only).
    pub fn new() -> Self {
        Self::default()
    }

    /// Names port `number` (a name given another number, or a number another name, loses
    /// its old pairing both ways).
    pub fn insert(&mut self, name: &str, number: u32) {
        if let Some(old) = self.by_name.insert(name.to_owned(), number) {
            if old != number {
                self.by_num.remove(&old);
            }
        }
        if let Some(old) = self.by_num.insert(number, name.to_owned()) {
            if old != name {
                self.by_name.remove(&old);
            }
        }
        self.stamp = next_stamp();
    }

    /// The number of a named port.
    pub fn number(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    /// The name of a port.
    pub fn name(&self, number: u32) -> Option<&str> {
        self.by_num.get(&number).map(String::as_str)
    }

    fn resolve(&self, s: &str) -> Option<u32> {
        self.number(s)
            .or_else(|| parse_num(s).and_then(|n| u32::try_from(n).ok()))
    }
}

/// A rule text error: where and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// Byte column of the offending token (0-based).
    pub column: usize,
    /// Its length in bytes (at least 1).
    pub len: usize,
    /// What is wrong.
    pub message: String,
}

impl ParseError {
    fn at(tok: &Tok<'_>, message: impl Into<String>) -> Self {
        ParseError {
            column: tok.col,
            len: tok.s.len().max(1),
            message: message.into(),
        }
    }

    /// The line followed by a `^^^` marker under the offending token and the message.
    pub fn render(&self, line: &str) -> String {
        let pad: String = line
            .char_indices()
            .take_while(|(i, _)| *i < self.column)
            .map(|(_, c)| if c == '\t' { '\t' } else { ' ' })
            .collect();
        format!(
            "{line}\n{pad}{} {}",
            "^".repeat(self.len.min(80)),
            self.message
        )
    }
}

impl core::fmt::Display for ParseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "column {}: {}", self.column + 1, self.message)
    }
}

impl std::error::Error for ParseError {}

#[derive(Clone, Copy)]
struct Tok<'a> {
    s: &'a str,
    col: usize,
}

/// A line's tokens: on the stack for any usual rule (a million-rule file is parsed at
/// several hundred thousand lines per second per core, where each heap allocation shows).
type Tokens<'a> = SmallVec<[Tok<'a>; 24]>;

/// The high bit of every byte of `w` that is an ASCII space, the other bits clear (exact: no
/// byte that is not a space is marked).
#[inline(always)]
fn space_bytes(w: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let t = w ^ 0x2020_2020_2020_2020;
    !(((t & LOW7) + LOW7) | t | LOW7)
}

#[cfg(test)]
fn tokens(line: &str) -> Tokens<'_> {
    let mut out = Tokens::new();
    tokens_into(line, &mut out);
    out
}

/// [`Tok`]s of `line` into `out` (empty), split at whitespace (filled in place: a returned
/// vector of tokens is a 600-byte copy).
fn tokens_into<'a>(line: &'a str, out: &mut Tokens<'a>) {
    let b = line.as_bytes();
    // The usual line: printable ASCII, tokens apart by spaces only. A branch-free pass (it
    // vectorises) says so, and the spaces are then found eight bytes at a time.
    if !b
        .iter()
        .fold(false, |odd, &c| odd | !(b' '..=b'~').contains(&c))
    {
        let mut start = 0;
        let mut cut = |end: usize, out: &mut Tokens<'a>| {
            if end > start {
                out.push(Tok {
                    s: line.get(start..end).unwrap_or(""),
                    col: start,
                });
            }
            start = end + 1;
        };
        let words = b.chunks_exact(8);
        // The last few bytes, padded with a non-space (a copy of a variable length is a call).
        let mut tail = [b'!'; 8];
        for (i, c) in words.remainder().iter().enumerate() {
            if let Some(t) = tail.get_mut(i) {
                *t = *c;
            }
        }
        let whole = words.filter_map(|w| w.first_chunk::<8>().copied());
        for (k, word) in whole.chain(core::iter::once(tail)).enumerate() {
            let mut spaces = space_bytes(u64::from_le_bytes(word));
            while spaces != 0 {
                cut(k * 8 + (spaces.trailing_zeros() / 8) as usize, out);
                spaces &= spaces - 1;
            }
        }
        cut(b.len(), out);
        return;
    }
    if !line.is_ascii() {
        *out = tokens_chars(line);
        return;
    }
    // Other ASCII whitespace: one pass over the bytes, split on the ASCII characters
    // `char::is_whitespace` accepts.
    let mut start = None;
    for (i, &b) in line.as_bytes().iter().enumerate() {
        let ws = matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r');
        match (ws, start) {
            (true, Some(s)) => {
                out.push(Tok {
                    s: line.get(s..i).unwrap_or(""),
                    col: s,
                });
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push(Tok {
            s: line.get(s..).unwrap_or(""),
            col: s,
        });
    }
}

/// [`tokens_into`] by `char::is_whitespace`, for lines with non-ASCII characters.
fn tokens_chars(line: &str) -> Tokens<'_> {
    let mut out = Tokens::new();
    let mut start = None;
    for (i, c) in line.char_indices() {
        if c.is_whitespace() {
            if let Some(s) = start.take() {
                out.push(Tok {
                    s: line.get(s..i).unwrap_or(""),
                    col: s,
                });
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        out.push(Tok {
            s: line.get(s..).unwrap_or(""),
            col: s,
        });
    }
    out
}

/// `s` split around its first byte `b` (an ASCII character): `str::split_once` without the
/// general character search, for the short tokens of a rule line.
#[inline]
fn split_at_byte(s: &str, b: u8) -> Option<(&str, &str)> {
    let i = s.bytes().position(|c| c == b)?;
    Some((s.get(..i)?, s.get(i + 1..)?))
}

/// A dotted-quad IPv4 address in its plain form (four decimal numbers up to 255, no leading
/// zeros): the usual rule's address, read without the general parser. `None` for anything
/// else, which the caller gives to `str::parse` (so what is accepted, and how it reads, is the
/// standard library's: this reads a subset of its language the same way).
fn plain_ipv4(s: &str) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut parts = s.as_bytes().split(|&c| c == b'.');
    for o in &mut octets {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 3 || (p.len() > 1 && p.first() == Some(&b'0')) {
            return None;
        }
        let mut v = 0u32;
        for &c in p {
            if !c.is_ascii_digit() {
                return None;
            }
            v = v * 10 + u32::from(c - b'0');
        }
        *o = u8::try_from(v).ok()?;
    }
    parts.next().is_none().then_some(Ipv4Addr::from(octets))
}

fn parse_num(s: &str) -> Option<u64> {
    // The usual value: a few decimal digits, read without the general parser (19 digits cannot
    // overflow; anything else, or longer, is the standard library's to read or refuse).
    let b = s.as_bytes();
    if (1..=19).contains(&b.len()) && b.iter().all(u8::is_ascii_digit) {
        return Some(b.iter().fold(0u64, |n, &c| n * 10 + u64::from(c - b'0')));
    }
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else {
        s.parse().ok()
    }
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut n = 0;
    for part in s.split(':') {
        let slot = out.get_mut(n)?;
        if part.is_empty() || part.len() > 2 {
            return None;
        }
        *slot = u8::from_str_radix(part, 16).ok()?;
        n += 1;
    }
    (n == 6).then_some(out)
}

fn prefix_mask<const N: usize>(bits: u32) -> [u8; N] {
    let mut m = [0u8; N];
    for (i, b) in m.iter_mut().enumerate() {
        let lo = (i as u32) * 8;
        *b = if bits >= lo + 8 {
            0xff
        } else if bits > lo {
            0xffu8 << (8 - (bits - lo))
        } else {
            0
        };
    }
    m
}

/// Prefix length of a contiguous mask.
fn prefix_len(m: &[u8]) -> Option<u32> {
    let mut bits = 0u32;
    let mut ended = false;
    for b in m {
        if ended {
            if *b != 0 {
                return None;
            }
            continue;
        }
        let lead = b.leading_ones();
        if lead < 8 {
            // Remaining bits of this byte must be zero.
            if b.checked_shl(lead).unwrap_or(0) != 0 {
                return None;
            }
            ended = true;
        }
        bits += lead;
    }
    Some(bits)
}

/// Parses `ADDR[/PREFIX|/MASK]` as (family is v4, 16-byte value, 16-byte mask) in the key's
/// layout (IPv4 in the last four bytes, mask only there).
fn parse_ip_masked(s: &str) -> Result<(bool, [u8; 16], [u8; 16]), String> {
    let (a, m) = match split_at_byte(s, b'/') {
        Some((a, m)) => (a, Some(m)),
        None => (s, None),
    };
    let addr: IpAddr = match plain_ipv4(a) {
        Some(v4) => IpAddr::V4(v4),
        None => a
            .parse()
            .map_err(|_| format!("`{a}` is not an IPv4 or IPv6 address"))?,
    };
    match addr {
        IpAddr::V4(v4) => {
            let mask: u32 = match m {
                None => u32::MAX,
                Some(m) => match m.parse::<u32>() {
                    Ok(0) => 0,
                    Ok(p) if p <= 32 => u32::MAX << (32 - p),
                    Ok(_) => return Err("IPv4 prefix length is at most 32".into()),
                    Err(_) => m
                        .parse::<Ipv4Addr>()
                        .map_err(|_| format!("bad IPv4 mask `{m}`"))?
                        .to_bits(),
                },
            };
            // The key's layout: the address in the last four bytes, the mask only there.
            let v = u128::from(v4.to_bits() & mask).to_be_bytes();
            let mk = u128::from(mask).to_be_bytes();
            Ok((true, v, mk))
        }
        IpAddr::V6(v6) => {
            let mask: [u8; 16] = match m {
                None => [0xff; 16],
                Some(m) => match m.parse::<u32>() {
                    Ok(p) if p <= 128 => prefix_mask::<16>(p),
                    Ok(_) => return Err("IPv6 prefix length is at most 128".into()),
                    Err(_) => m
                        .parse::<Ipv6Addr>()
                        .map_err(|_| format!("bad IPv6 mask `{m}`"))?
                        .octets(),
                },
            };
            let mut v = v6.octets();
            for (b, k) in v.iter_mut().zip(mask.iter()) {
                *b &= k;
            }
            Ok((false, v, mask))
        }
    }
}

fn parse_num_masked(s: &str, max: u64) -> Result<(u64, u64), String> {
    let (v, m) = match split_at_byte(s, b'/') {
        Some((v, m)) => (v, Some(m)),
        None => (s, None),
    };
    let v = parse_num(v).ok_or_else(|| format!("`{v}` is not a number"))?;
    let m = match m {
        None => max,
        Some(m) => parse_num(m).ok_or_else(|| format!("`{m}` is not a mask"))?,
    };
    if v > max || m > max {
        return Err(format!("value out of range (max {max:#x})"));
    }
    Ok((v & m, m))
}

fn parse_tpid(s: &str) -> Option<u16> {
    match s {
        "802.1q" | "802.1Q" => Some(0x8100),
        "802.1ad" | "802.1AD" => Some(0x88a8),
        _ => parse_num(s).and_then(|n| u16::try_from(n).ok()),
    }
}

fn tpid_name(t: u16) -> String {
    match t {
        0x8100 => "802.1q".into(),
        0x88a8 => "802.1ad".into(),
        _ => format!("{t:#06x}"),
    }
}

fn proto_name(p: u8) -> String {
    match p {
        6 => "tcp".into(),
        17 => "udp".into(),
        132 => "sctp".into(),
        1 => "icmp".into(),
        58 => "icmpv6".into(),
        _ => p.to_string(),
    }
}

/// A match key of the rule syntax, aliases folded (`priority` and `pref` are `prio`,
/// `protocol` is `eth_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Prio,
    InPort,
    SrcMac,
    DstMac,
    EthType,
    VlanEthtype,
    CvlanEthtype,
    VlanId,
    CvlanId,
    VlanPrio,
    CvlanPrio,
    SrcIp,
    DstIp,
    EncSrcIp,
    EncDstIp,
    EncKeyId,
    IpProto,
    IpTos,
    IpTtl,
    SrcPort,
    DstPort,
    TcpFlags,
}

impl Key {
    /// The key a token names, if any.
    fn of(s: &str) -> Option<Key> {
        Some(match s {
            "prio" | "priority" | "pref" => Key::Prio,
            "in_port" => Key::InPort,
            "src_mac" => Key::SrcMac,
            "dst_mac" => Key::DstMac,
            "eth_type" | "protocol" => Key::EthType,
            "vlan_ethtype" => Key::VlanEthtype,
            "cvlan_ethtype" => Key::CvlanEthtype,
            "vlan_id" => Key::VlanId,
            "cvlan_id" => Key::CvlanId,
            "vlan_prio" => Key::VlanPrio,
            "cvlan_prio" => Key::CvlanPrio,
            "src_ip" => Key::SrcIp,
            "dst_ip" => Key::DstIp,
            "enc_src_ip" => Key::EncSrcIp,
            "enc_dst_ip" => Key::EncDstIp,
            "enc_key_id" => Key::EncKeyId,
            "ip_proto" => Key::IpProto,
            "ip_tos" => Key::IpTos,
            "ip_ttl" => Key::IpTtl,
            "src_port" => Key::SrcPort,
            "dst_port" => Key::DstPort,
            "tcp_flags" => Key::TcpFlags,
            _ => return None,
        })
    }

    /// Its bit in a set of keys seen.
    const fn bit(self) -> u32 {
        1 << self as u32
    }
}

/// Parses one rule line.
///
/// ```
/// use sluice_flow::{parse_rule, Action, Field, PortNames, RuleText};
/// let ports = PortNames::new();
/// let line = "prio 5 dst_ip 10.0.0.0/8 ip_proto udp dst_port 53 action set_ttl:9,output:3";
/// let rule = parse_rule(line, &ports).unwrap();
/// assert_eq!(rule.priority, 5);
/// assert_eq!(rule.matcher.key.uint(Field::L4Dst), 53);
/// assert_eq!(rule.actions.as_slice().last(), Some(&Action::Output(3)));
///
/// // Printing gives text that parses to the same rule.
/// let text = RuleText { rule: &rule, ports: &ports }.to_string();
/// assert_eq!(parse_rule(&text, &ports).unwrap(), rule);
///
/// // Errors point at the offending token.
/// let bad = "dst_ip 10.0.0.1 colour red action drop";
/// let err = parse_rule(bad, &ports).unwrap_err();
/// assert_eq!(&bad[err.column..err.column + err.len], "colour");
/// ```
pub fn parse_rule(line: &str, ports: &PortNames) -> Result<Rule, ParseError> {
    let mut toks = Tokens::new();
    tokens_into(line, &mut toks);
    let mut m = Match::ANY;
    let mut prio = 0u32;
    let mut actions: Option<ActionList> = None;
    let mut family: Option<(bool, Tok<'_>)> = None; // (is_v4, where it was implied)
                                                    // The EtherType and IP protocol matched exactly, if any (for the prerequisite checks).
    let mut eth_type: Option<u16> = None;
    let mut proto: Option<u8> = None;
    let mut eth_type_tok: Option<Tok<'_>> = None;
    let mut needs_ip: Option<Tok<'_>> = None;
    let mut needs_l4: Option<Tok<'_>> = None;
    let mut needs_tcp: Option<Tok<'_>> = None;
    let end = Tok {
        s: "",
        col: line.len(),
    };
    let mut seen = 0u32;
    let mut i = 0;
    while let Some(t) = toks.get(i).copied() {
        if t.s == "action" || t.s == "actions" {
            let rest = toks.get(i + 1..).unwrap_or(&[]);
            if rest.is_empty() {
                return Err(ParseError::at(&end, "`action` needs an action list"));
            }
            let (Some(first), Some(last)) = (rest.first(), rest.last()) else {
                break;
            };
            actions = Some(match line.get(first.col..last.col + last.s.len()) {
                Some(text) => cached_actions(text, rest, ports)?,
                // (Cannot happen: the tokens are slices of the line.)
                None => parse_actions(rest, ports)?,
            });
            break;
        }
        // One string match per key, then everything by its `Key` (aliases folded).
        let key = Key::of(t.s);
        if let Some(k) = key {
            if seen & k.bit() != 0 {
                return Err(ParseError::at(&t, format!("`{}` given twice", t.s)));
            }
            seen |= k.bit();
        }
        let v = toks
            .get(i + 1)
            .copied()
            .ok_or_else(|| ParseError::at(&t, format!("`{}` needs a value", t.s)))?;
        let err = |msg: String| ParseError::at(&v, msg);
        let Some(key) = key else {
            return Err(ParseError::at(&t, format!("unknown match key `{}`", t.s)));
        };
        match key {
            Key::Prio => {
                prio = parse_num(v.s)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| err(format!("`{}` is not a priority (0..2^32)", v.s)))?;
            }
            Key::InPort => {
                let p = ports
                    .resolve(v.s)
                    .ok_or_else(|| err(format!("unknown port `{}`", v.s)))?;
                m.set_exact(Field::InPort, u64::from(p));
            }
            Key::SrcMac | Key::DstMac => {
                let (a, mk) = match v.s.split_once('/') {
                    Some((a, mk)) => (a, Some(mk)),
                    None => (v.s, None),
                };
                let mac = parse_mac(a).ok_or_else(|| err(format!("`{a}` is not a MAC")))?;
                let mask = match mk {
                    None => [0xff; 6],
                    Some(mk) => match mk.parse::<u32>() {
                        Ok(p) if p <= 48 => prefix_mask::<6>(p),
                        _ => parse_mac(mk).ok_or_else(|| err(format!("bad MAC mask `{mk}`")))?,
                    },
                };
                let f = if key == Key::SrcMac {
                    Field::EthSrc
                } else {
                    Field::EthDst
                };
                m.set(f, &mac, &mask);
            }
            Key::EthType => {
                let et = match v.s {
                    "ipv4" | "ip" => 0x0800,
                    "ipv6" => 0x86dd,
                    "arp" => 0x0806,
                    s => parse_num(s)
                        .and_then(|n| u16::try_from(n).ok())
                        .ok_or_else(|| err(format!("`{s}` is not an EtherType")))?,
                };
                m.set_exact(Field::EthType, u64::from(et));
                eth_type = Some(et);
                eth_type_tok = Some(v);
            }
            Key::VlanEthtype | Key::CvlanEthtype => {
                let tp =
                    parse_tpid(v.s).ok_or_else(|| err(format!("`{}` is not a VLAN TPID", v.s)))?;
                let inner = key == Key::CvlanEthtype;
                let f = if inner {
                    Field::Vlan1Tpid
                } else {
                    Field::Vlan0Tpid
                };
                m.set_exact(f, u64::from(tp));
                set_present(&mut m, inner);
            }
            Key::VlanId | Key::CvlanId | Key::VlanPrio | Key::CvlanPrio => {
                let inner = matches!(key, Key::CvlanId | Key::CvlanPrio);
                let is_id = matches!(key, Key::VlanId | Key::CvlanId);
                let max = if is_id { 0xfff } else { 7 };
                let n = parse_num(v.s)
                    .filter(|n| *n <= max)
                    .ok_or_else(|| err(format!("`{}` is not in 0..={max}", v.s)))?;
                let f = if inner {
                    Field::Vlan1Tci
                } else {
                    Field::Vlan0Tci
                };
                let (val, mask) = if is_id {
                    (n, 0x0fff)
                } else {
                    (n << 13, 0xe000)
                };
                let k = m.key.uint(f) & !mask;
                let mk = m.mask.uint(f);
                m.key.set_uint(f, k | val);
                m.mask.set_uint(f, mk | mask);
                set_present(&mut m, inner);
            }
            Key::SrcIp | Key::DstIp | Key::EncSrcIp | Key::EncDstIp => {
                let (v4, val, mask) = parse_ip_masked(v.s).map_err(err)?;
                let f = match key {
                    Key::SrcIp => Field::IpSrc,
                    Key::DstIp => Field::IpDst,
                    Key::EncSrcIp => Field::TunSrc,
                    _ => Field::TunDst,
                };
                m.set(f, &val, &mask);
                if matches!(key, Key::EncSrcIp | Key::EncDstIp) {
                    // `/0` matches everything, tunnelled or not (and prints as nothing).
                    if mask.iter().any(|b| *b != 0) {
                        set_tunnel(&mut m);
                    }
                } else {
                    if let Some((fv4, _)) = family {
                        if fv4 != v4 {
                            return Err(err("mixes IPv4 and IPv6 addresses".into()));
                        }
                    }
                    family = Some((v4, v));
                }
            }
            Key::EncKeyId => {
                let n = parse_num(v.s)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| err(format!("`{}` is not a 32-bit key id", v.s)))?;
                m.set_exact(Field::TunId, u64::from(n));
                set_tunnel(&mut m);
            }
            Key::IpProto => {
                let p = match v.s {
                    "tcp" => 6,
                    "udp" => 17,
                    "sctp" => 132,
                    "icmp" => 1,
                    "icmpv6" => 58,
                    s => parse_num(s)
                        .and_then(|n| u8::try_from(n).ok())
                        .ok_or_else(|| err(format!("`{s}` is not an IP protocol")))?,
                };
                m.set_exact(Field::IpProto, u64::from(p));
                proto = Some(p);
                needs_ip.get_or_insert(t);
            }
            Key::IpTos | Key::IpTtl => {
                let (val, mask) = parse_num_masked(v.s, 0xff).map_err(err)?;
                let f = if key == Key::IpTos {
                    Field::IpTos
                } else {
                    Field::IpTtl
                };
                m.set_uint_masked(f, val, mask);
                needs_ip.get_or_insert(t);
            }
            Key::SrcPort | Key::DstPort => {
                let (val, mask) = parse_num_masked(v.s, 0xffff).map_err(err)?;
                let f = if key == Key::SrcPort {
                    Field::L4Src
                } else {
                    Field::L4Dst
                };
                m.set_uint_masked(f, val, mask);
                needs_l4.get_or_insert(t);
            }
            Key::TcpFlags => {
                let (val, mask) = parse_num_masked(v.s, 0xfff).map_err(err)?;
                m.set_uint_masked(Field::TcpFlags, val, mask);
                needs_tcp.get_or_insert(t);
            }
        }
        i += 2;
    }
    let Some(actions) = actions else {
        return Err(ParseError::at(&end, "missing `action ...`"));
    };
    // Prerequisites, checked once the whole line is known.
    if let Some((v4, tok)) = family {
        let want = if v4 { 0x0800 } else { 0x86dd };
        match eth_type {
            None => {
                m.set_exact(Field::EthType, u64::from(want));
                eth_type = Some(want);
            }
            Some(e) if e == want => {}
            Some(_) => {
                let at = eth_type_tok.unwrap_or(tok);
                return Err(ParseError::at(
                    &at,
                    "eth_type does not match the IP address family",
                ));
            }
        }
    }
    let is_ip = matches!(eth_type, Some(0x0800) | Some(0x86dd));
    if let Some(t) = needs_ip.or(needs_l4).or(needs_tcp) {
        if !is_ip {
            return Err(ParseError::at(
                &t,
                format!(
                    "`{}` needs eth_type ipv4 or ipv6 (or an IP address match)",
                    t.s
                ),
            ));
        }
    }
    if let Some(t) = needs_l4 {
        if !matches!(proto, Some(6) | Some(17) | Some(132)) {
            return Err(ParseError::at(
                &t,
                format!("`{}` needs ip_proto tcp, udp or sctp", t.s),
            ));
        }
    }
    if let Some(t) = needs_tcp {
        if proto != Some(6) {
            return Err(ParseError::at(&t, "`tcp_flags` needs ip_proto tcp"));
        }
    }
    Ok(Rule {
        matcher: m,
        priority: prio,
        actions,
    })
}

/// Slots of the per-thread cache of recent action texts. With 16 slots, each text's only slot
/// its hash's, a file's 16 distinct action texts (`output:0` … `output:15`) had ~6 of them
/// sharing a slot with another and pushing each other out: a parse and an allocation, and a
/// free on the thread that drops the rule, every few lines.
const RECENT_ACTIONS: usize = 64;

/// Slots a text is looked for in, from its hash's slot on (linear probing). While the cache
/// has free slots, as many as 16 distinct texts never push one another out (a text's window
/// cannot be full of the others); nothing is removed, so once a long-lived thread has met 64
/// texts, a new one takes its hash's slot after 16 probes, as a direct-mapped cache would.
const RECENT_PROBE: usize = 16;

/// The longest action text kept in the cache (a longer one is parsed every time): a thread
/// keeps at most [`RECENT_ACTIONS`] texts for its whole life, and a line may be megabytes
/// long (say, padded with spaces).
const MAX_CACHED_TEXT: usize = 256;

/// A cached action text: the [`PortNames`] stamp it was read with, the text, its list.
type RecentActions = (u64, Box<str>, ActionList);

thread_local! {
    /// Action texts this thread parsed lately, by a hash of the text.
    static RECENT: RefCell<(hashbrown::DefaultHashBuilder, [Option<RecentActions>; RECENT_ACTIONS])> =
        RefCell::new((Default::default(), core::array::from_fn(|_| None)));
}

/// The action list the action tokens `toks` (all of the line after `action`; `text`, their
/// span of the line) give with port names `ports`: the list this thread read lately from the
/// same text with the same names if any, else [`parse_actions`]' (then kept in the first free
/// slot of the text's probe, else in its hash's slot). Rules mostly share their action text,
/// say `output:3`: such lines then cost no action parsing, and share one allocation from the
/// parser on, so a million-rule file costs no allocation and no cross-thread free per rule
/// for its actions. The names' stamp is part of the key, as a port name's number may change.
fn cached_actions(
    text: &str,
    toks: &[Tok<'_>],
    ports: &PortNames,
) -> Result<ActionList, ParseError> {
    if text.len() > MAX_CACHED_TEXT {
        return parse_actions(toks, ports);
    }
    RECENT.with_borrow_mut(|(hasher, recent)| {
        let home = hasher.hash_one(text) as usize;
        let mut free = None;
        for k in 0..RECENT_PROBE {
            let slot = home.wrapping_add(k) % RECENT_ACTIONS;
            match recent.get(slot) {
                Some(Some((stamp, known, list))) => {
                    if *stamp == ports.stamp && **known == *text {
                        return Ok(list.clone());
                    }
                }
                Some(None) => {
                    free = Some(slot);
                    break;
                }
                None => break,
            }
        }
        let list = parse_actions(toks, ports)?;
        if let Some(entry) = recent.get_mut(free.unwrap_or(home % RECENT_ACTIONS)) {
            *entry = Some((ports.stamp, text.into(), list.clone()));
        }
        Ok(list)
    })
}

fn set_present(m: &mut Match, inner: bool) {
    let p = u64::from(VLAN_PRESENT);
    let fields: &[Field] = if inner {
        &[Field::Vlan0Tci, Field::Vlan1Tci]
    } else {
        &[Field::Vlan0Tci]
    };
    for f in fields {
        let k = m.key.uint(*f) | p;
        let mk = m.mask.uint(*f) | p;
        m.key.set_uint(*f, k);
        m.mask.set_uint(*f, mk);
    }
}

fn set_tunnel(m: &mut Match) {
    let k = m.key.uint(Field::Flags) | u64::from(flags::TUNNEL);
    let mk = m.mask.uint(Field::Flags) | u64::from(flags::TUNNEL);
    m.key.set_uint(Field::Flags, k);
    m.mask.set_uint(Field::Flags, mk);
}

/// Splits on `:` outside `[...]`.
fn split_colons(s: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ':' if depth == 0 => {
                out.push((start, s.get(start..i).unwrap_or("")));
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push((start, s.get(start..).unwrap_or("")));
    out
}

/// The action list of the action tokens `toks`.
fn parse_actions(toks: &[Tok<'_>], ports: &PortNames) -> Result<ActionList, ParseError> {
    let mut out: SmallVec<[Action; 4]> = SmallVec::new();
    for t in toks {
        // The token's comma-separated parts, each with its own column.
        let (mut rest, mut col) = (t.s, t.col);
        loop {
            let (part, next) = match split_at_byte(rest, b',') {
                Some((part, next)) => (part, Some(next)),
                None => (rest, None),
            };
            if !part.is_empty() {
                out.push(parse_action(Tok { s: part, col }, ports)?);
            }
            let Some(next) = next else { break };
            col += part.len() + 1;
            rest = next;
        }
    }
    if out.is_empty() {
        let t = toks.first().copied().unwrap_or(Tok { s: "", col: 0 });
        return Err(ParseError::at(&t, "empty action list"));
    }
    Ok(ActionList::new(out.as_slice()))
}

fn parse_action(t: Tok<'_>, ports: &PortNames) -> Result<Action, ParseError> {
    let (name, arg) = match split_at_byte(t.s, b':') {
        Some((n, a)) => (n, Some(a)),
        None => (t.s, None),
    };
    let err = |m: String| ParseError::at(&t, m);
    let need = |what: &str| -> Result<&str, ParseError> {
        arg.filter(|a| !a.is_empty())
            .ok_or_else(|| ParseError::at(&t, format!("`{name}` needs {what}")))
    };
    let num = |what: &str, max: u64| -> Result<u64, ParseError> {
        let a = need(what)?;
        parse_num(a)
            .filter(|n| *n <= max)
            .ok_or_else(|| ParseError::at(&t, format!("`{a}` is not {what} (max {max})")))
    };
    let v4 = |a: &str| -> Result<[u8; 4], ParseError> {
        a.parse::<Ipv4Addr>()
            .map(|x| x.octets())
            .map_err(|_| ParseError::at(&t, format!("`{a}` is not an IPv4 address")))
    };
    let v6 = |a: &str| -> Result<[u8; 16], ParseError> {
        a.trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<Ipv6Addr>()
            .map(|x| x.octets())
            .map_err(|_| ParseError::at(&t, format!("`{a}` is not an IPv6 address")))
    };
    let mac = |a: &str| -> Result<[u8; 6], ParseError> {
        parse_mac(a).ok_or_else(|| ParseError::at(&t, format!("`{a}` is not a MAC")))
    };
    Ok(match name {
        "output" => {
            let p = need("a port")?;
            Action::Output(
                ports
                    .resolve(p)
                    .ok_or_else(|| err(format!("unknown port `{p}`")))?,
            )
        }
        "drop" => Action::Drop,
        "pop_vlan" => Action::PopVlan,
        "decap" => Action::Decap,
        "push_vlan" => {
            let a = need("TPID:VID[:PCP]")?;
            let parts: Vec<&str> = a.split(':').collect();
            let (tp, vid, pcp) = match parts.as_slice() {
                [tp, vid] => (*tp, *vid, "0"),
                [tp, vid, pcp] => (*tp, *vid, *pcp),
                _ => return Err(err("push_vlan takes TPID:VID[:PCP]".into())),
            };
            let tpid = parse_tpid(tp).ok_or_else(|| err(format!("`{tp}` is not a TPID")))?;
            let vid = parse_num(vid)
                .filter(|v| *v <= 0xfff)
                .ok_or_else(|| err(format!("`{vid}` is not a VID (0..=4095)")))?;
            let pcp = parse_num(pcp)
                .filter(|v| *v <= 7)
                .ok_or_else(|| err(format!("`{pcp}` is not a PCP (0..=7)")))?;
            Action::PushVlan {
                tpid,
                tci: vlan_tci(pcp as u8, vid as u16) & !VLAN_PRESENT,
            }
        }
        "set_eth_src" => Action::SetEthSrc(mac(need("a MAC")?)?),
        "set_eth_dst" => Action::SetEthDst(mac(need("a MAC")?)?),
        "set_ipv4_src" => Action::SetIpv4Src(v4(need("an IPv4 address")?)?),
        "set_ipv4_dst" => Action::SetIpv4Dst(v4(need("an IPv4 address")?)?),
        "set_ipv6_src" => Action::SetIpv6Src(v6(need("an IPv6 address")?)?),
        "set_ipv6_dst" => Action::SetIpv6Dst(v6(need("an IPv6 address")?)?),
        "set_ttl" => Action::SetTtl(num("a TTL", 0xff)? as u8),
        "set_dscp" => Action::SetDscp(num("a DSCP", 0x3f)? as u8),
        "set_tp_src" => Action::SetTpSrc(num("a port", 0xffff)? as u16),
        "set_tp_dst" => Action::SetTpDst(num("a port", 0xffff)? as u16),
        "encap" => {
            let a = need("KIND:id=N:src=ADDR:dst=ADDR[:csum]")?;
            let parts = split_colons(a);
            let mut it = parts.iter();
            let kind = match it.next().map(|p| p.1) {
                Some("vxlan") => TunnelKind::Vxlan,
                Some("geneve") => TunnelKind::Geneve,
                Some("gre") => TunnelKind::Gre,
                other => {
                    return Err(err(format!(
                        "`{}` is not a tunnel kind (vxlan, geneve, gre)",
                        other.unwrap_or("")
                    )))
                }
            };
            let (mut id, mut src, mut dst, mut csum) = (None, None, None, false);
            for (_, p) in it {
                let ip = |s: &str| -> Result<IpAddr, ParseError> {
                    s.trim_start_matches('[')
                        .trim_end_matches(']')
                        .parse::<IpAddr>()
                        .map_err(|_| ParseError::at(&t, format!("`{s}` is not an address")))
                };
                match p.split_once('=') {
                    Some(("id", n)) => {
                        id = Some(
                            parse_num(n)
                                .and_then(|n| u32::try_from(n).ok())
                                .ok_or_else(|| err(format!("`{n}` is not a tunnel id")))?,
                        )
                    }
                    Some(("src", s)) => src = Some(ip(s)?),
                    Some(("dst", s)) => dst = Some(ip(s)?),
                    None if *p == "csum" => csum = true,
                    _ => return Err(err(format!("unknown encap parameter `{p}`"))),
                }
            }
            let (Some(id), Some(src), Some(dst)) = (id, src, dst) else {
                return Err(err("encap needs id=, src= and dst=".into()));
            };
            if src.is_ipv4() != dst.is_ipv4() {
                return Err(err("encap endpoints mix IPv4 and IPv6".into()));
            }
            if kind != TunnelKind::Gre && id > 0x00ff_ffff {
                return Err(err("VXLAN/Geneve ids are 24 bits".into()));
            }
            Action::Encap(TunnelEncap {
                kind,
                src,
                dst,
                id,
                udp_csum: csum,
            })
        }
        other => return Err(err(format!("unknown action `{other}`"))),
    })
}

/// Prints a rule in the text syntax (with port names when known).
pub struct RuleText<'a> {
    /// The rule.
    pub rule: &'a Rule,
    /// Names to print ports with.
    pub ports: &'a PortNames,
}

fn mac_str(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn ip_str(v: &[u8; 16], m: &[u8; 16], v4: bool) -> String {
    if v4 {
        let a = Ipv4Addr::new(v[12], v[13], v[14], v[15]);
        let mk = [m[12], m[13], m[14], m[15]];
        match prefix_len(&mk) {
            Some(32) => a.to_string(),
            Some(p) => format!("{a}/{p}"),
            None => format!("{a}/{}", Ipv4Addr::from(mk)),
        }
    } else {
        let a = Ipv6Addr::from(*v);
        match prefix_len(m) {
            Some(128) => a.to_string(),
            Some(p) => format!("{a}/{p}"),
            None => format!("{a}/{}", Ipv6Addr::from(*m)),
        }
    }
}

fn num_str(v: u64, m: u64, full: u64) -> String {
    if m == full {
        v.to_string()
    } else {
        format!("{v}/{m:#x}")
    }
}

impl core::fmt::Display for RuleText<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let r = self.rule;
        let (k, m) = (&r.matcher.key, &r.matcher.mask);
        let port = |p: u32| -> String {
            self.ports
                .name(p)
                .map_or_else(|| p.to_string(), str::to_owned)
        };
        write!(f, "prio {}", r.priority)?;
        if !m.is_zero(Field::InPort) {
            write!(f, " in_port {}", port(k.uint(Field::InPort) as u32))?;
        }
        for (name, fld) in [("src_mac", Field::EthSrc), ("dst_mac", Field::EthDst)] {
            if !m.is_zero(fld) {
                let (kv, mv) = (k.mac(fld), m.mac(fld));
                if m.is_ones(fld) {
                    write!(f, " {name} {}", mac_str(&kv))?;
                } else {
                    write!(f, " {name} {}/{}", mac_str(&kv), mac_str(&mv))?;
                }
            }
        }
        for (pfx, tp, tci) in [
            ("vlan", Field::Vlan0Tpid, Field::Vlan0Tci),
            ("cvlan", Field::Vlan1Tpid, Field::Vlan1Tci),
        ] {
            if !m.is_zero(tp) {
                write!(f, " {pfx}_ethtype {}", tpid_name(k.uint(tp) as u16))?;
            }
            let (kv, mv) = (k.uint(tci), m.uint(tci));
            if mv & 0x0fff == 0x0fff {
                write!(f, " {pfx}_id {}", kv & 0x0fff)?;
            }
            if mv & 0xe000 == 0xe000 {
                write!(f, " {pfx}_prio {}", kv >> 13)?;
            }
        }
        let v4 = m.is_ones(Field::EthType) && k.uint(Field::EthType) == 0x0800;
        if m.is_ones(Field::EthType) {
            let name = match k.uint(Field::EthType) {
                0x0800 => "ipv4".to_owned(),
                0x86dd => "ipv6".to_owned(),
                0x0806 => "arp".to_owned(),
                e => format!("{e:#06x}"),
            };
            write!(f, " eth_type {name}")?;
        }
        for (name, fld) in [("src_ip", Field::IpSrc), ("dst_ip", Field::IpDst)] {
            if !m.is_zero(fld) {
                write!(f, " {name} {}", ip_str(&k.addr(fld), &m.addr(fld), v4))?;
            }
        }
        if m.is_ones(Field::IpProto) {
            write!(f, " ip_proto {}", proto_name(k.uint(Field::IpProto) as u8))?;
        }
        for (name, fld, full) in [
            ("ip_tos", Field::IpTos, 0xff),
            ("ip_ttl", Field::IpTtl, 0xff),
            ("src_port", Field::L4Src, 0xffff),
            ("dst_port", Field::L4Dst, 0xffff),
            ("tcp_flags", Field::TcpFlags, 0xfff),
        ] {
            if !m.is_zero(fld) {
                write!(f, " {name} {}", num_str(k.uint(fld), m.uint(fld), full))?;
            }
        }
        if !m.is_zero(Field::TunId) {
            write!(f, " enc_key_id {}", k.uint(Field::TunId))?;
        }
        for (name, fld) in [("enc_src_ip", Field::TunSrc), ("enc_dst_ip", Field::TunDst)] {
            if !m.is_zero(fld) {
                let (kv, mv) = (k.addr(fld), m.addr(fld));
                let tv4 = mv.iter().take(12).all(|b| *b == 0);
                write!(f, " {name} {}", ip_str(&kv, &mv, tv4))?;
            }
        }
        f.write_str(" action ")?;
        for (i, a) in r.actions.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match a {
                Action::Output(p) => write!(f, "output:{}", port(*p))?,
                Action::Drop => f.write_str("drop")?,
                Action::PopVlan => f.write_str("pop_vlan")?,
                Action::Decap => f.write_str("decap")?,
                Action::PushVlan { tpid, tci } => write!(
                    f,
                    "push_vlan:{}:{}:{}",
                    tpid_name(*tpid),
                    tci & 0x0fff,
                    tci >> 13
                )?,
                Action::SetEthSrc(m) => write!(f, "set_eth_src:{}", mac_str(m))?,
                Action::SetEthDst(m) => write!(f, "set_eth_dst:{}", mac_str(m))?,
                Action::SetIpv4Src(a) => write!(f, "set_ipv4_src:{}", Ipv4Addr::from(*a))?,
                Action::SetIpv4Dst(a) => write!(f, "set_ipv4_dst:{}", Ipv4Addr::from(*a))?,
                Action::SetIpv6Src(a) => write!(f, "set_ipv6_src:{}", Ipv6Addr::from(*a))?,
                Action::SetIpv6Dst(a) => write!(f, "set_ipv6_dst:{}", Ipv6Addr::from(*a))?,
                Action::SetTtl(n) => write!(f, "set_ttl:{n}")?,
                Action::SetDscp(n) => write!(f, "set_dscp:{n}")?,
                Action::SetTpSrc(n) => write!(f, "set_tp_src:{n}")?,
                Action::SetTpDst(n) => write!(f, "set_tp_dst:{n}")?,
                Action::Encap(e) => {
                    let addr = |a: &IpAddr| match a {
                        IpAddr::V4(v) => v.to_string(),
                        IpAddr::V6(v) => format!("[{v}]"),
                    };
                    write!(
                        f,
                        "encap:{}:id={}:src={}:dst={}{}",
                        e.kind.name(),
                        e.id,
                        addr(&e.src),
                        addr(&e.dst),
                        if e.udp_csum { ":csum" } else { "" }
                    )?
                }
            }
        }
        Ok(())
    }
}

impl core::fmt::Display for Rule {
    /// The rule in the text syntax, ports as numbers.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let ports = PortNames::new();
        RuleText {
            rule: self,
            ports: &ports,
        }
        .fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pairs(t: Tokens<'_>) -> Vec<(String, usize)> {
        t.iter().map(|t| (t.s.to_string(), t.col)).collect()
    }

    proptest! {
        /// The byte splitter of ASCII lines agrees with the `char::is_whitespace` one.
        #[test]
        fn ascii_tokens_agree_with_char_tokens(line in "[ a-z0-9:/,.~\t\n\x0b\x0c\r\x7f\u{e9}\u{a0}]{0,60}") {
            prop_assert_eq!(pairs(tokens(&line)), pairs(tokens_chars(&line)));
        }

        /// Printable lines of several words, many spaces (the eight-byte splitter's own input).
        #[test]
        fn printable_lines_split_as_by_chars(line in "[ a-z0-9:/,.~]{0,80}") {
            prop_assert_eq!(pairs(tokens(&line)), pairs(tokens_chars(&line)));
        }

        /// What the plain IPv4 reader accepts, the standard parser reads the same way; and it
        /// accepts every address in its plain form.
        #[test]
        fn plain_ipv4_reads_a_subset_of_the_standard_language(
            s in "[0-9.a]{0,17}",
            parts in prop::collection::vec("0?[0-9]{0,3}", 3..=5),
            a in any::<u32>(),
        ) {
            for s in [s, parts.join(".")] {
                if let Some(v4) = plain_ipv4(&s) {
                    prop_assert_eq!(s.parse::<Ipv4Addr>().ok(), Some(v4), "{}", s);
                }
            }
            let plain = Ipv4Addr::from(a);
            prop_assert_eq!(plain_ipv4(&plain.to_string()), Some(plain));
        }

        /// An IPv4 prefix length reads as the same mask written out, for every length, and the
        /// value is masked (the mask as a number against the byte-wise `prefix_mask`).
        #[test]
        fn ipv4_prefixes_read_as_their_masks(a in any::<u32>(), p in 0u32..=32) {
            let addr = Ipv4Addr::from(a);
            let by_len = parse_ip_masked(&format!("{addr}/{p}")).unwrap();
            let mask = Ipv4Addr::from(prefix_mask::<4>(p));
            let by_mask = parse_ip_masked(&format!("{addr}/{mask}")).unwrap();
            prop_assert_eq!(by_len, by_mask);
            let (v4, v, m) = by_len;
            prop_assert!(v4);
            let m4 = u32::from_be_bytes(m[12..].try_into().unwrap());
            prop_assert_eq!(m4, u32::from(mask));
            prop_assert_eq!(u32::from_be_bytes(v[12..].try_into().unwrap()), a & m4);
            prop_assert!(v[..12].iter().chain(&m[..12]).all(|b| *b == 0));
        }

        /// A decimal number reads as the standard library reads it, up to and past `u64::MAX`
        /// (the digits-only path stops at 19 digits).
        #[test]
        fn decimal_numbers_read_as_the_standard_library_reads_them(
            s in "[+0-9]{0,22}",
            long in "[0-9]{19,21}",
            n in any::<u64>(),
            zeros in 0usize..4,
        ) {
            for s in [s, long, u64::MAX.to_string(), "18446744073709551616".into()] {
                prop_assert_eq!(parse_num(&s), s.parse::<u64>().ok(), "{}", s);
            }
            let padded = format!("{}{n}", "0".repeat(zeros));
            prop_assert_eq!(parse_num(&padded), Some(n));
            let over = format!("{}0", u64::MAX);
            prop_assert_eq!(parse_num(&over), None);
        }
    }

    /// Sixteen distinct action lists, met in turn, keep one allocation each on a thread (with
    /// one slot per hash, some pushed each other out: a new allocation every few lines).
    #[test]
    fn sixteen_action_lists_are_shared() {
        std::thread::spawn(|| {
            let names = PortNames::new();
            let first: Vec<ActionList> = (0..16)
                .map(|p| {
                    parse_rule(&format!("prio 1 action output:{p}"), &names)
                        .unwrap()
                        .actions
                })
                .collect();
            for i in 0..1600 {
                let r = parse_rule(
                    &format!(
                        "prio 2 eth_type ipv4 ip_proto tcp dst_port {i} action output:{}",
                        i % 16
                    ),
                    &names,
                )
                .unwrap();
                assert!(
                    r.actions.ptr_eq(&first[i % 16]),
                    "line {i}: a new allocation"
                );
            }
        })
        .join()
        .unwrap();
    }

    /// A cached action text is read again once the port names change, in the same table or
    /// another one, and a refused one is refused every time.
    #[test]
    fn action_texts_are_read_again_when_port_names_change() {
        std::thread::spawn(|| {
            let out = |line: &str, names: &PortNames| {
                parse_rule(line, names).map(|r| r.actions.as_slice().to_vec())
            };
            let line = "prio 1 action output:up,set_ttl:3";
            let mut names = PortNames::new();
            assert!(out(line, &names).is_err());
            names.insert("up", 1);
            let one = vec![Action::Output(1), Action::SetTtl(3)];
            assert_eq!(out(line, &names), Ok(one.clone()));
            assert_eq!(out(line, &names), Ok(one));
            names.insert("up", 2);
            assert_eq!(
                out(line, &names),
                Ok(vec![Action::Output(2), Action::SetTtl(3)])
            );
            let mut other = PortNames::new();
            other.insert("up", 3);
            assert_eq!(
                out(line, &other),
                Ok(vec![Action::Output(3), Action::SetTtl(3)])
            );
            // The same names built again (another stamp), and a clone (the same stamp): the
            // same answer; a clone changed gets its own.
            let mut again = PortNames::new();
            again.insert("up", 2);
            // (Renumbered, "up" no longer names port 1 either way.)
            assert_eq!(again, names);
            assert_eq!((names.name(1), names.name(2)), (None, Some("up")));
            let two = Ok(vec![Action::Output(2), Action::SetTtl(3)]);
            assert_eq!(out(line, &again), two);
            let mut copy = names.clone();
            assert_eq!(out(line, &copy), two);
            copy.insert("up", 4);
            assert_eq!(
                out(line, &copy),
                Ok(vec![Action::Output(4), Action::SetTtl(3)])
            );
            assert_eq!(out(line, &names), two);
            // A refused text is reported where it is, every time.
            let bad = "prio 1 action output:down";
            for _ in 0..2 {
                let e = parse_rule(bad, &names).unwrap_err();
                assert_eq!(&bad[e.column..e.column + e.len], "output:down");
            }
            // A text too long to keep reads as a short one does.
            let long = format!("prio 1 action output:up{}set_ttl:3", " ".repeat(300));
            assert_eq!(out(&long, &names), two);
            assert_eq!(out(&long, &names), two);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_renamed_or_renumbered_port_loses_its_old_pairing() {
        let mut n = PortNames::new();
        n.insert("a", 1);
        n.insert("b", 1);
        assert_eq!(
            (n.number("a"), n.number("b"), n.name(1)),
            (None, Some(1), Some("b"))
        );
        n.insert("b", 2);
        assert_eq!(
            (n.name(1), n.name(2), n.number("b")),
            (None, Some("b"), Some(2))
        );
    }

    /// Lines parsed twice with one table of names (action texts cached, pushing one another
    /// out of the cache) give the rules a parse with a table of the same names built afresh for
    /// each line (whose stamp no cached text has) gives.
    #[test]
    fn cached_action_texts_give_what_a_parse_gives() {
        std::thread::spawn(|| {
            let mut names = PortNames::new();
            names.insert("a", 7);
            let lines: Vec<String> = (0..400)
                .map(|i| {
                    format!(
                        "prio {i} eth_type ipv4 dst_port {i} ip_proto udp action set_tp_dst:{},output:{}",
                        i % 97,
                        if i % 2 == 0 { "a".to_string() } else { (i % 5).to_string() }
                    )
                })
                .collect();
            let fresh = |l: &str| {
                let mut n = PortNames::new();
                n.insert("a", 7);
                parse_rule(l, &n).unwrap()
            };
            for l in lines.iter().chain(lines.iter().rev()) {
                assert_eq!(parse_rule(l, &names).unwrap(), fresh(l), "{l}");
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn non_ascii_whitespace_still_splits() {
        // U+00A0 and U+2003 are whitespace to `char::is_whitespace`.
        let t = pairs(tokens("prio\u{a0}1\u{2003}action drop"));
        assert_eq!(
            t,
            vec![
                ("prio".to_string(), 0),
                ("1".to_string(), 6),
                ("action".to_string(), 10),
                ("drop".to_string(), 17)
            ]
        );
        assert_eq!(
            pairs(tokens("  a\x0bb ")),
            vec![("a".to_string(), 2), ("b".to_string(), 4)]
        );
    }
}
