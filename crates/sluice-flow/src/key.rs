//! The fixed-size flow key (and mask, which has the same shape), and its extraction from a frame.
//!
//! A [`FlowKey`] is [`KEY_WORDS`] 64-bit words holding every matchable field in network byte order
//! at a fixed byte position (see [`Field`]). Masking, hashing and comparing are word-wise, so a
//! subtable only touches the words its mask uses (the idea behind Open vSwitch's miniflow, done
//! here with a fixed layout). A [`Mask`] is a `FlowKey` whose set bits say which key bits matter.
//!
//! Byte `o` of the key lives in word `o / 8` at position `o % 8` of that word's native-endian
//! bytes, so a field's bytes read back in the order they were written on every host.

use sluice_wire::{L3Kind, Layout};

/// Number of 64-bit words in a [`FlowKey`].
pub const KEY_WORDS: usize = 13;
/// Number of bytes in a [`FlowKey`].
pub const KEY_BYTES: usize = KEY_WORDS * 8;

/// The `present` bit in a VLAN TCI field of the key (the DEI bit position, which is not matchable:
/// a tag that is present always has it set in the key, like Open vSwitch's `VLAN_CFI`).
pub const VLAN_PRESENT: u16 = 0x1000;

/// Bits of the key's `flags` byte.
pub mod flags {
    /// The frame was tunnelled: the `tun_*` fields are valid.
    pub const TUNNEL: u8 = 0x01;
    /// The IP packet is a fragment.
    pub const FRAGMENT: u8 = 0x02;
    /// The IP packet is a non-first fragment (no L4 header).
    pub const LATER_FRAGMENT: u8 = 0x04;
}

/// A matchable field: its byte range in the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Field {
    /// Ingress port number (4 bytes).
    InPort,
    /// EtherType after the VLAN stack (2 bytes).
    EthType,
    /// Outer VLAN tag TPID (2 bytes; 0 without a tag).
    Vlan0Tpid,
    /// Outer VLAN TCI: PCP (3 bits), [`VLAN_PRESENT`], VID (12 bits).
    Vlan0Tci,
    /// Ethernet destination (6 bytes).
    EthDst,
    /// Ethernet source (6 bytes).
    EthSrc,
    /// Inner VLAN TCI.
    Vlan1Tci,
    /// Inner VLAN tag TPID.
    Vlan1Tpid,
    /// IP protocol / IPv6 last next header (1 byte).
    IpProto,
    /// IPv4 TOS / IPv6 traffic class: DSCP (6 bits) and ECN (2 bits).
    IpTos,
    /// IPv4 TTL / IPv6 hop limit.
    IpTtl,
    /// [`flags`] byte.
    Flags,
    /// TCP flags (12 bits, 2 bytes).
    TcpFlags,
    /// L4 source port (ICMP type in its low byte).
    L4Src,
    /// L4 destination port (ICMP code in its low byte).
    L4Dst,
    /// Tunnel id: VXLAN/Geneve VNI or GRE key (4 bytes).
    TunId,
    /// IP source (16 bytes; IPv4 as an IPv4-mapped IPv6 address).
    IpSrc,
    /// IP destination (16 bytes; IPv4 mapped).
    IpDst,
    /// Tunnel outer IP source (16 bytes; IPv4 mapped).
    TunSrc,
    /// Tunnel outer IP destination (16 bytes; IPv4 mapped).
    TunDst,
}

impl Field {
    /// Every field, in key order.
    pub const ALL: [Field; 20] = [
        Field::InPort,
        Field::EthType,
        Field::Vlan0Tpid,
        Field::EthDst,
        Field::Vlan0Tci,
        Field::EthSrc,
        Field::Vlan1Tci,
        Field::Vlan1Tpid,
        Field::IpProto,
        Field::IpTos,
        Field::IpTtl,
        Field::Flags,
        Field::TcpFlags,
        Field::L4Src,
        Field::L4Dst,
        Field::TunId,
        Field::IpSrc,
        Field::IpDst,
        Field::TunSrc,
        Field::TunDst,
    ];

    /// Byte offset and length of the field in the key.
    pub const fn span(self) -> (usize, usize) {
        match self {
            Field::InPort => (0, 4),
            Field::EthType => (4, 2),
            Field::Vlan0Tpid => (6, 2),
            Field::EthDst => (8, 6),
            Field::Vlan0Tci => (14, 2),
            Field::EthSrc => (16, 6),
            Field::Vlan1Tci => (22, 2),
            Field::Vlan1Tpid => (24, 2),
            Field::IpProto => (26, 1),
            Field::IpTos => (27, 1),
            Field::IpTtl => (28, 1),
            Field::Flags => (29, 1),
            Field::TcpFlags => (30, 2),
            Field::L4Src => (32, 2),
            Field::L4Dst => (34, 2),
            Field::TunId => (36, 4),
            Field::IpSrc => (40, 16),
            Field::IpDst => (56, 16),
            Field::TunSrc => (72, 16),
            Field::TunDst => (88, 16),
        }
    }
}

/// The header fields of one packet (or, as a [`Mask`], which bits of them matter).
#[derive(Clone, Copy, Eq, Default)]
pub struct FlowKey {
    w: [u64; KEY_WORDS],
}

/// Word-wise equality without a `memcmp` call: branch-free over a small fixed array.
#[inline]
pub(crate) fn same_words<const N: usize>(a: &[u64; N], b: &[u64; N]) -> bool {
    a.iter()
        .zip(b.iter())
        .fold(0u64, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// A field value as [`FlowKey::set`] stores it in a field of `len` (at most 16) bytes: a
/// shorter value right-aligned after zeros, a longer one cut to its first `len` bytes.
#[inline]
pub(crate) fn fit(value: &[u8], len: usize) -> [u8; 16] {
    let mut out = [0u8; 16];
    let len = len.min(16);
    let skip = len.saturating_sub(value.len());
    // Byte by byte: no `memcpy` call for a copy of a few bytes.
    for (d, v) in out.iter_mut().take(len).skip(skip).zip(value) {
        *d = *v;
    }
    out
}

impl core::hash::Hash for FlowKey {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.w.hash(state);
    }
}

impl PartialEq for FlowKey {
    #[inline]
    fn eq(&self, other: &FlowKey) -> bool {
        same_words(&self.w, &other.w)
    }
}

/// A mask: a [`FlowKey`] whose set bits are the bits a rule matches on.
pub type Mask = FlowKey;

impl FlowKey {
    /// The all-zero key (as a mask: match everything).
    pub const ZERO: FlowKey = FlowKey { w: [0; KEY_WORDS] };
    /// The all-ones mask (exact match on every bit).
    pub const ALL_ONES: FlowKey = FlowKey {
        w: [u64::MAX; KEY_WORDS],
    };

    /// Builds a key from its raw words.
    pub const fn from_words(w: [u64; KEY_WORDS]) -> Self {
        FlowKey { w }
    }

    /// The raw words.
    pub const fn words(&self) -> &[u64; KEY_WORDS] {
        &self.w
    }

    /// The key as bytes (the layout documented on [`Field`]).
    pub fn to_bytes(&self) -> [u8; KEY_BYTES] {
        let mut out = [0u8; KEY_BYTES];
        for (chunk, w) in out.chunks_exact_mut(8).zip(self.w.iter()) {
            chunk.copy_from_slice(&w.to_ne_bytes());
        }
        out
    }

    /// Builds a key from bytes (the inverse of [`FlowKey::to_bytes`]).
    pub fn from_bytes(bytes: &[u8; KEY_BYTES]) -> Self {
        let mut k = FlowKey::ZERO;
        for (w, chunk) in k.w.iter_mut().zip(bytes.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            *w = u64::from_ne_bytes(b);
        }
        k
    }

    /// Where bytes `s..s + n` of a word are as bits of the native `u64` (`s + n <= 8`,
    /// `1 <= n`): their mask, and the shift of the lowest bit of the field's value.
    #[inline(always)]
    const fn word_bits(s: usize, n: usize) -> (u64, u32) {
        let low = u64::MAX >> (64 - 8 * n as u32);
        let shift = if cfg!(target_endian = "little") {
            8 * s as u32
        } else {
            8 * (8 - s - n) as u32
        };
        (low << shift, shift)
    }

    /// Writes the low `n` bytes of `v`, big-endian, at key bytes `off..off + n`, inside one
    /// word: one masked store.
    #[inline(always)]
    fn put_in_word(&mut self, off: usize, n: usize, v: u64) {
        let Some(w) = self.w.get_mut(off / 8) else {
            return;
        };
        let (mask, shift) = Self::word_bits(off % 8, n);
        let v = v & (u64::MAX >> (64 - 8 * n as u32));
        // Little-endian: the number's most significant byte goes to the lowest address.
        let placed = if cfg!(target_endian = "little") {
            (v << (64 - 8 * n as u32)).swap_bytes() << shift
        } else {
            v << shift
        };
        *w = (*w & !mask) | placed;
    }

    /// Key bytes `off..off + n`, inside one word, as a big-endian number.
    #[inline(always)]
    fn get_in_word(&self, off: usize, n: usize) -> u64 {
        let Some(&w) = self.w.get(off / 8) else {
            return 0;
        };
        let (mask, shift) = Self::word_bits(off % 8, n);
        let x = (w & mask) >> shift;
        if cfg!(target_endian = "little") {
            (x << (64 - 8 * n as u32)).swap_bytes()
        } else {
            x
        }
    }

    fn byte(&self, o: usize) -> u8 {
        match self.w.get(o / 8) {
            Some(w) => w.to_ne_bytes().get(o % 8).copied().unwrap_or(0),
            None => 0,
        }
    }

    /// One byte at a time: the reference the word-wise [`FlowKey::set`] is tested against.
    #[cfg(test)]
    fn set_byte(&mut self, o: usize, v: u8) {
        if let Some(w) = self.w.get_mut(o / 8) {
            let mut b = w.to_ne_bytes();
            if let Some(slot) = b.get_mut(o % 8) {
                *slot = v;
            }
            *w = u64::from_ne_bytes(b);
        }
    }

    /// Writes `value` (network byte order; at most the field's length, right-aligned) into the
    /// field.
    #[inline]
    pub fn set(&mut self, field: Field, value: &[u8]) {
        let (off, len) = field.span();
        if value.len() == len {
            // `fit` would copy it unchanged.
            return self.write_span(off, value);
        }
        let bytes = fit(value, len);
        self.write_span(off, bytes.get(..len).unwrap_or(&[]));
    }

    /// The field's bytes (network byte order); `out` must be the field's length.
    pub fn read(&self, field: Field, out: &mut [u8]) {
        let (off, len) = field.span();
        let (first, span) = self.span_bytes(off, len);
        let start = off - first * 8;
        let n = len.min(out.len());
        if let (Some(d), Some(src)) = (out.get_mut(..n), span.get(start..start + n)) {
            d.copy_from_slice(src);
        }
    }

    /// The (at most three) words holding bytes `off..off + len` as bytes: (first word's index,
    /// its bytes and the next two's).
    #[inline]
    fn span_bytes(&self, off: usize, len: usize) -> (usize, [u8; 24]) {
        let first = off / 8;
        let last = (off + len.max(1) - 1) / 8;
        let mut buf = [0u8; 24];
        for (chunk, w) in buf
            .chunks_exact_mut(8)
            .zip(self.w.iter().skip(first).take(last + 1 - first))
        {
            chunk.copy_from_slice(&w.to_ne_bytes());
        }
        (first, buf)
    }

    /// Writes bytes `off..off + bytes.len()` (at most 16), a word at a time; an address (16
    /// bytes at a word boundary) as two whole words. (Numbers take
    /// [`FlowKey::set_uint`]'s one-word path instead.)
    #[inline]
    fn write_span(&mut self, off: usize, bytes: &[u8]) {
        let (i, s) = (off / 8, off % 8);
        if let (0, Some((a, rest))) = (s, bytes.split_first_chunk::<8>()) {
            if let (Some(b), Some([wa, wb, ..])) = (rest.first_chunk::<8>(), self.w.get_mut(i..)) {
                if rest.len() == 8 {
                    *wa = u64::from_ne_bytes(*a);
                    *wb = u64::from_ne_bytes(*b);
                    return;
                }
            }
        }
        let len = bytes.len();
        let (first, mut buf) = self.span_bytes(off, len);
        let start = off - first * 8;
        if let Some(d) = buf.get_mut(start..start + len) {
            d.copy_from_slice(bytes);
        }
        let last = (off + len.max(1) - 1) / 8;
        for (w, chunk) in self
            .w
            .iter_mut()
            .skip(first)
            .take(last + 1 - first)
            .zip(buf.chunks_exact(8))
        {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            *w = u64::from_ne_bytes(b);
        }
    }

    /// The field as an unsigned number (fields of up to 8 bytes; wider fields give their low 8
    /// bytes).
    pub fn uint(&self, field: Field) -> u64 {
        let (off, len) = field.span();
        if (1..=8).contains(&len) && off % 8 + len <= 8 {
            return self.get_in_word(off, len);
        }
        (0..len).fold(0u64, |acc, i| (acc << 8) | u64::from(self.byte(off + i)))
    }

    /// Sets a field of up to 8 bytes from a number.
    #[inline]
    pub fn set_uint(&mut self, field: Field, value: u64) {
        let (off, len) = field.span();
        if (1..=8).contains(&len) && off % 8 + len <= 8 {
            return self.put_in_word(off, len, value);
        }
        let bytes = value.to_be_bytes();
        let start = 8usize.saturating_sub(len);
        self.set(field, bytes.get(start..).unwrap_or(&[]));
    }

    /// The 16 bytes of an address field.
    pub fn addr(&self, field: Field) -> [u8; 16] {
        let mut out = [0u8; 16];
        self.read(field, &mut out);
        out
    }

    /// The 6 bytes of a MAC field.
    pub fn mac(&self, field: Field) -> [u8; 6] {
        let mut out = [0u8; 6];
        self.read(field, &mut out);
        out
    }

    /// Whether the field is all zero bits.
    pub fn is_zero(&self, field: Field) -> bool {
        let (off, len) = field.span();
        (off..off + len).all(|o| self.byte(o) == 0)
    }

    /// Whether every bit of the field is set.
    pub fn is_ones(&self, field: Field) -> bool {
        let (off, len) = field.span();
        (off..off + len).all(|o| self.byte(o) == 0xff)
    }

    /// `self & mask`, word by word.
    #[inline]
    pub fn masked(&self, mask: &Mask) -> FlowKey {
        let mut out = *self;
        for (o, m) in out.w.iter_mut().zip(mask.w.iter()) {
            *o &= *m;
        }
        out
    }

    /// Whether `self` has no bit set outside `mask` (a valid rule key for that mask).
    pub fn within(&self, mask: &Mask) -> bool {
        // Branch-free over every word (a short-circuiting `all` compiled to a word-at-a-time
        // loop in some builds, twice the instructions of the unrolled form).
        self.w
            .iter()
            .zip(mask.w.iter())
            .fold(0, |stray, (k, m)| stray | (k & !m))
            == 0
    }

    /// Whether `packet` matches this (already masked) key under `mask`.
    #[inline]
    pub fn matches(&self, mask: &Mask, packet: &FlowKey) -> bool {
        self.w
            .iter()
            .zip(mask.w.iter())
            .zip(packet.w.iter())
            .all(|((k, m), p)| p & m == *k)
    }

    /// Fills a key from a parsed frame.
    ///
    /// For a tunnelled frame (`layout.tunnel` and `layout.inner` present) the `tun_*` fields come
    /// from the outer IP header and the tunnel id, [`flags::TUNNEL`] is set, and every other field
    /// comes from the inner headers — what a rule on a tunnel port sees after decapsulation
    /// (tc flower's `enc_*` keys). Use [`FlowKey::extract_outer`] to classify the outer headers
    /// of an encapsulated frame instead. Fields the frame does not carry stay zero. Never panics:
    /// offsets outside the frame read as zero bytes.
    ///
    /// ```
    /// use sluice_flow::{Field, FlowKey};
    /// // A TCP/IPv4 frame 10.0.0.1:1234 -> 10.0.0.2:80.
    /// let mut frame = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00];
    /// frame.extend([0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    /// frame.extend([0x04, 0xd2, 0, 80, 0, 0, 0, 1, 0, 0, 0, 1]); // TCP ports, seq, ack
    /// frame.extend([0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]); // offset 5, ACK, window
    /// let key = FlowKey::extract(&frame, &sluice_wire::parse(&frame).unwrap(), 7);
    /// assert_eq!(key.uint(Field::InPort), 7);
    /// assert_eq!(key.uint(Field::L4Dst), 80);
    /// assert_eq!(key.addr(Field::IpDst)[12..], [10, 0, 0, 2]);
    /// ```
    pub fn extract(frame: &[u8], layout: &Layout, in_port: u32) -> FlowKey {
        let mut k = FlowKey::ZERO;
        k.set_uint(Field::InPort, u64::from(in_port));
        match (&layout.tunnel, &layout.inner) {
            (Some(t), Some(inner)) => {
                let mut f = flags::TUNNEL;
                if let (Some(l3), Some(kind)) = (layout.outer.l3, layout.outer.l3_kind) {
                    let (src, dst) = ip_addrs(frame, l3, kind);
                    k.set(Field::TunSrc, &src);
                    k.set(Field::TunDst, &dst);
                }
                k.set_uint(Field::TunId, u64::from(t.id.unwrap_or(0)));
                f |= k.fill_headers(frame, inner);
                k.set_uint(Field::Flags, u64::from(f));
            }
            _ => {
                let f = k.fill_headers(frame, &layout.outer);
                k.set_uint(Field::Flags, u64::from(f));
            }
        }
        k
    }

    /// Fills a key from the outer headers only (the tunnel, if any, is treated as payload).
    pub fn extract_outer(frame: &[u8], layout: &Layout, in_port: u32) -> FlowKey {
        let mut k = FlowKey::ZERO;
        k.set_uint(Field::InPort, u64::from(in_port));
        let f = k.fill_headers(frame, &layout.outer);
        k.set_uint(Field::Flags, u64::from(f));
        k
    }

    /// Fills L2–L4 from one header stack; returns the fragment flags.
    fn fill_headers(&mut self, frame: &[u8], h: &sluice_wire::Headers) -> u8 {
        let mut f = 0u8;
        if let Some(l2) = h.l2 {
            self.set(Field::EthDst, slice(frame, l2, 6));
            self.set(Field::EthSrc, slice(frame, l2 + 6, 6));
        }
        self.set_uint(Field::EthType, u64::from(h.ethertype));
        let tags = h.vlans.as_slice();
        if let Some(t) = tags.first() {
            self.set_uint(Field::Vlan0Tpid, u64::from(t.tpid));
            self.set_uint(Field::Vlan0Tci, u64::from(vlan_tci(t.pcp, t.vid)));
        }
        if let Some(t) = tags.get(1) {
            self.set_uint(Field::Vlan1Tpid, u64::from(t.tpid));
            self.set_uint(Field::Vlan1Tci, u64::from(vlan_tci(t.pcp, t.vid)));
        }
        let (Some(l3), Some(kind)) = (h.l3, h.l3_kind) else {
            return f;
        };
        let (src, dst) = ip_addrs(frame, l3, kind);
        self.set(Field::IpSrc, &src);
        self.set(Field::IpDst, &dst);
        let (tos, ttl) = match kind {
            L3Kind::Ipv4 => (at(frame, l3 + 1), at(frame, l3 + 8)),
            L3Kind::Ipv6 => (
                (at(frame, l3) << 4) | (at(frame, l3 + 1) >> 4),
                at(frame, l3 + 7),
            ),
        };
        self.set_uint(Field::IpTos, u64::from(tos));
        self.set_uint(Field::IpTtl, u64::from(ttl));
        let proto = match kind {
            L3Kind::Ipv4 => h.l4_proto.unwrap_or_else(|| at(frame, l3 + 9)),
            L3Kind::Ipv6 => h.l4_proto.unwrap_or(0),
        };
        self.set_uint(Field::IpProto, u64::from(proto));
        if h.is_fragment {
            f |= flags::FRAGMENT;
        }
        if h.is_later_fragment {
            f |= flags::LATER_FRAGMENT;
            return f;
        }
        if let Some(l4) = h.l4 {
            use sluice_wire::ip_proto as p;
            match proto {
                p::TCP => {
                    self.set(Field::L4Src, slice(frame, l4, 2));
                    self.set(Field::L4Dst, slice(frame, l4 + 2, 2));
                    let fl = (u16::from(at(frame, l4 + 12)) << 8 | u16::from(at(frame, l4 + 13)))
                        & 0x0fff;
                    self.set_uint(Field::TcpFlags, u64::from(fl));
                }
                p::UDP | p::SCTP => {
                    self.set(Field::L4Src, slice(frame, l4, 2));
                    self.set(Field::L4Dst, slice(frame, l4 + 2, 2));
                }
                p::ICMP | p::ICMPV6 => {
                    self.set_uint(Field::L4Src, u64::from(at(frame, l4)));
                    self.set_uint(Field::L4Dst, u64::from(at(frame, l4 + 1)));
                }
                _ => {}
            }
        }
        f
    }
}

impl core::fmt::Debug for FlowKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("FlowKey(")?;
        for (i, w) in self.w.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            for b in w.to_ne_bytes() {
                write!(f, "{b:02x}")?;
            }
        }
        f.write_str(")")
    }
}

/// A VLAN TCI as stored in the key: PCP, the present bit, VID.
pub const fn vlan_tci(pcp: u8, vid: u16) -> u16 {
    ((pcp as u16 & 7) << 13) | VLAN_PRESENT | (vid & 0x0fff)
}

/// An IPv4 address as the key stores it (IPv4-mapped IPv6).
pub const fn v4_mapped(a: [u8; 4]) -> [u8; 16] {
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a[0], a[1], a[2], a[3],
    ]
}

fn at(frame: &[u8], o: usize) -> u8 {
    frame.get(o).copied().unwrap_or(0)
}

fn slice(frame: &[u8], o: usize, n: usize) -> &[u8] {
    frame.get(o..o.saturating_add(n)).unwrap_or(&[])
}

fn ip_addrs(frame: &[u8], l3: usize, kind: L3Kind) -> ([u8; 16], [u8; 16]) {
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    match kind {
        L3Kind::Ipv4 => {
            let mut s = [0u8; 4];
            let mut d = [0u8; 4];
            for i in 0..4 {
                s[i] = at(frame, l3 + 12 + i);
                d[i] = at(frame, l3 + 16 + i);
            }
            src = v4_mapped(s);
            dst = v4_mapped(d);
        }
        L3Kind::Ipv6 => {
            for i in 0..16 {
                src[i] = at(frame, l3 + 8 + i);
                dst[i] = at(frame, l3 + 24 + i);
            }
        }
    }
    (src, dst)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A xorshift64 sequence from the non-zero seed `x`: test values without a dependency.
    fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// The byte-at-a-time field write the word-wise one replaced.
    fn set_bytewise(k: &mut FlowKey, field: Field, value: &[u8]) {
        let (off, len) = field.span();
        let skip = len.saturating_sub(value.len());
        for i in 0..len {
            let v = if i < skip {
                0
            } else {
                value.get(i - skip).copied().unwrap_or(0)
            };
            k.set_byte(off + i, v);
        }
    }

    #[test]
    fn wordwise_set_and_read_match_bytewise() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        for round in 0..200 {
            let base = FlowKey::from_words(core::array::from_fn(|_| next()));
            for f in Field::ALL {
                for n in 0..=17usize {
                    let value: Vec<u8> = (0..n).map(|_| next() as u8).collect();
                    let (mut a, mut b) = (base, base);
                    a.set(f, &value);
                    set_bytewise(&mut b, f, &value);
                    assert_eq!(a, b, "round {round} {f:?} len {n}");
                    let (_, len) = f.span();
                    let mut out = vec![0u8; len];
                    a.read(f, &mut out);
                    let want: Vec<u8> = (0..len).map(|i| b.byte(f.span().0 + i)).collect();
                    assert_eq!(out, want);
                }
            }
        }
    }

    /// The one-word numeric paths against the byte-at-a-time write and read, every field of up
    /// to 8 bytes, random keys and values (high bits beyond the field ignored).
    #[test]
    fn wordwise_numbers_match_bytewise() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        for round in 0..500 {
            let base = FlowKey::from_words(core::array::from_fn(|_| next()));
            for f in Field::ALL {
                let (off, len) = f.span();
                if len > 8 {
                    continue;
                }
                let v = next();
                let (mut a, mut b) = (base, base);
                a.set_uint(f, v);
                set_bytewise(&mut b, f, &v.to_be_bytes()[8 - len..]);
                assert_eq!(a, b, "round {round} {f:?}");
                let want = (0..len).fold(0u64, |acc, i| (acc << 8) | u64::from(b.byte(off + i)));
                assert_eq!(a.uint(f), want, "round {round} {f:?}");
                assert_eq!(
                    base.uint(f),
                    (0..len).fold(0u64, |acc, i| (acc << 8) | u64::from(base.byte(off + i)))
                );
            }
        }
    }

    #[test]
    fn fields_do_not_overlap_and_fill_the_key() {
        let mut used = [false; KEY_BYTES];
        for f in Field::ALL {
            let (o, l) = f.span();
            for b in &mut used[o..o + l] {
                assert!(!*b, "{f:?} overlaps");
                *b = true;
            }
        }
        assert!(used.iter().all(|b| *b));
    }

    #[test]
    fn set_and_read_round_trip() {
        let mut k = FlowKey::ZERO;
        k.set_uint(Field::L4Dst, 80);
        k.set_uint(Field::InPort, 7);
        k.set(Field::IpDst, &v4_mapped([10, 0, 0, 1]));
        assert_eq!(k.uint(Field::L4Dst), 80);
        assert_eq!(k.uint(Field::InPort), 7);
        assert_eq!(k.addr(Field::IpDst), v4_mapped([10, 0, 0, 1]));
        assert_eq!(FlowKey::from_bytes(&k.to_bytes()), k);
    }
}
