//! Packet buffers with headroom, and a pool that recycles them.
//!
//! A [`PacketBuf`] holds one frame in `data[start..end]` of a buffer allocated once, with
//! [`HEADROOM`] bytes kept free in front so that pushing a VLAN tag or a tunnel's outer headers
//! moves only the bytes in front of the insertion point (12 bytes of MAC addresses for a tag,
//! nothing for an encapsulation), never the payload. [`BufPool`] hands buffers out and takes them
//! back, so the datapath allocates nothing per packet once warm.
//!
//! A buffer also carries its frame's [`Layout`] once something has parsed it (the port at
//! receive, or the datapath before classification): classification, actions, transmit
//! preparation and software GSO read it instead of parsing again, and the actions keep it in
//! step with their edits. Every other change to the frame's bytes forgets it, so a carried
//! layout is always what a parse of the frame with its [`ParseConfig`] would give.

use sluice_packet::OffloadMeta;
use sluice_wire::{Layout, ParseConfig};

/// Bytes kept free in front of a received frame: enough for the largest encapsulation Sluice
/// builds (Ethernet + 2 tags + IPv6 + UDP + Geneve with options) plus VLAN pushes.
pub const HEADROOM: usize = 192;

/// Default frame room of a pooled buffer: a 64 KiB GSO frame plus a 24-byte `virtio_net_hdr`
/// and a reinserted VLAN tag.
pub const DEFAULT_ROOM: usize = 65536 + 64;

/// One packet: its bytes, metadata and the port it arrived on.
///
/// ```
/// use sluice_datapath::PacketBuf;
/// let mut pkt = PacketBuf::from_frame(&[0xaa, 0xbb, 0xcc]);
/// pkt.push(2).copy_from_slice(&[1, 2]); // prepend into the headroom, no copy of the frame
/// assert_eq!(pkt.frame(), &[1, 2, 0xaa, 0xbb, 0xcc]);
/// assert!(pkt.pull(3));
/// assert_eq!(pkt.frame(), &[0xbb, 0xcc]);
/// assert!(!pkt.pull(3)); // too short: unchanged
/// ```
#[derive(Debug, Clone)]
pub struct PacketBuf {
    data: Vec<u8>,
    start: usize,
    end: usize,
    /// Checksum statuses, header offsets and GSO request of the frame.
    pub meta: OffloadMeta,
    /// Number of the port the packet arrived on.
    pub in_port: u32,
    /// The frame's layout, when known; allocated once per buffer and kept across reuse.
    carried: Option<Box<Carried>>,
    /// Whether `carried` describes the frame as it is (cleared by every change of its bytes:
    /// one store, here rather than behind the box).
    layout_valid: bool,
}

/// A layout carried with its frame (see [`PacketBuf::layout_for`]).
#[derive(Debug, Clone)]
struct Carried {
    layout: Layout,
    cfg: ParseConfig,
    whole: bool,
}

impl Carried {
    fn empty() -> Box<Carried> {
        Box::new(Carried {
            layout: Layout::default(),
            cfg: ParseConfig::DEFAULT,
            whole: false,
        })
    }
}

impl Default for PacketBuf {
    fn default() -> Self {
        PacketBuf::new(DEFAULT_ROOM)
    }
}

impl PacketBuf {
    /// An empty buffer with [`HEADROOM`] in front and `room` bytes for the frame.
    pub fn new(room: usize) -> PacketBuf {
        PacketBuf {
            data: vec![0; HEADROOM + room],
            start: HEADROOM,
            end: HEADROOM,
            meta: OffloadMeta::default(),
            in_port: 0,
            carried: None,
            layout_valid: false,
        }
    }

    /// A buffer holding a copy of `frame`, with headroom.
    pub fn from_frame(frame: &[u8]) -> PacketBuf {
        let mut b = PacketBuf::new(frame.len());
        b.set_frame(frame);
        b
    }

    /// Takes ownership of `v` as the frame, without headroom (a push then moves the frame once).
    pub fn from_vec(v: Vec<u8>) -> PacketBuf {
        let end = v.len();
        PacketBuf {
            data: v,
            start: 0,
            end,
            meta: OffloadMeta::default(),
            in_port: 0,
            carried: None,
            layout_valid: false,
        }
    }

    /// The frame's layout as a parse with `cfg` gives it, and whether that parse met no error,
    /// when it is carried (see the module documentation); `None` when nothing carried it, the
    /// frame changed since, or it was parsed with another configuration.
    pub fn layout_for(&self, cfg: &ParseConfig) -> Option<(&Layout, bool)> {
        match self.carried.as_deref() {
            Some(c) if self.layout_valid && c.cfg == *cfg => Some((&c.layout, c.whole)),
            _ => None,
        }
    }

    /// The frame's whole layout for `cfg` when carried: [`PacketBuf::layout_for`] of a parse
    /// that met no error.
    pub fn whole_layout(&self, cfg: &ParseConfig) -> Option<&Layout> {
        self.layout_for(cfg)
            .and_then(|(l, whole)| whole.then_some(l))
    }

    /// Records `layout` as the frame's (a parse with `cfg`; `whole`: it met no error). The
    /// caller vouches that it is exactly what that parse gives for the frame as it is now.
    pub fn set_layout(&mut self, layout: &Layout, whole: bool, cfg: &ParseConfig) {
        let c = self.carried.get_or_insert_with(Carried::empty);
        c.layout = *layout;
        c.cfg = *cfg;
        c.whole = whole;
        self.layout_valid = true;
    }

    /// The frame, with its carried layout for `cfg` or else a parse of it with `cfg` (then
    /// carried; parsed in place, nothing moved), and whether that parse met no error.
    pub fn parse_layout(&mut self, cfg: &ParseConfig) -> (&[u8], &Layout, bool) {
        let frame = self.data.get(self.start..self.end).unwrap_or(&[]);
        let c = self.carried.get_or_insert_with(Carried::empty);
        if !(self.layout_valid && c.cfg == *cfg) {
            c.whole = sluice_wire::parse_into(frame, cfg, &mut c.layout).is_none();
            c.cfg = *cfg;
            self.layout_valid = true;
        }
        (frame, &c.layout, c.whole)
    }

    /// After a change that forgot the layout (`had`: a whole layout for the caller's
    /// configuration was carried just before it), makes that layout follow the change in place: `follow` gets the frame
    /// as it is now and the layout as it was, updates it and says whether it now describes the
    /// frame (`false`: it stays forgotten). For the actions, which know what they changed.
    pub(crate) fn follow_layout(
        &mut self,
        had: bool,
        follow: impl FnOnce(&[u8], &mut Layout) -> bool,
    ) {
        if !had {
            return;
        }
        let frame = self.data.get(self.start..self.end).unwrap_or(&[]);
        if let Some(c) = self.carried.as_deref_mut() {
            // Forgetting only cleared `layout_valid`: the layout before the change (for `cfg`,
            // whole: what `had` says) is still here.
            self.layout_valid = follow(frame, &mut c.layout);
        }
    }

    /// Forgets the carried layout (the frame is about to change in a way nobody follows).
    pub fn forget_layout(&mut self) {
        self.layout_valid = false;
    }

    /// Empties the buffer: headroom restored, metadata reset.
    pub fn reset(&mut self) {
        let h = HEADROOM.min(self.data.len());
        self.start = h;
        self.end = h;
        self.meta = OffloadMeta::default();
        self.in_port = 0;
        self.forget_layout();
    }

    /// The frame.
    pub fn frame(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    /// The frame, writable (the carried layout is forgotten).
    pub fn frame_mut(&mut self) -> &mut [u8] {
        self.forget_layout();
        &mut self.data[self.start..self.end]
    }

    /// The frame, writable, for a change of field values the parser does not read (a
    /// checksum): the carried layout stays. The caller vouches that no header moves and no
    /// length, version, protocol, port or tag changes.
    pub fn checksums_mut(&mut self) -> &mut [u8] {
        &mut self.data[self.start..self.end]
    }

    /// Frame length.
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Whether the frame is empty.
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// Free bytes in front of the frame.
    pub fn headroom(&self) -> usize {
        self.start
    }

    /// Everything from the frame's start to the end of the buffer: receive into it, then
    /// [`PacketBuf::set_len`].
    pub fn room_mut(&mut self) -> &mut [u8] {
        self.forget_layout();
        &mut self.data[self.start..]
    }

    /// Sets the frame length (clamped to the room).
    pub fn set_len(&mut self, len: usize) {
        self.forget_layout();
        self.end = (self.start + len).min(self.data.len());
    }

    /// Replaces the frame with a copy of `frame` (metadata kept), growing the buffer if needed.
    pub fn set_frame(&mut self, frame: &[u8]) {
        self.forget_layout();
        let h = HEADROOM.min(self.start.max(HEADROOM));
        if self.data.len() < h + frame.len() {
            self.data.resize(h + frame.len(), 0);
        }
        self.start = h;
        self.end = h + frame.len();
        self.data[self.start..self.end].copy_from_slice(frame);
    }

    /// Appends `bytes` to the frame, growing the buffer if its room is too small.
    pub fn append(&mut self, bytes: &[u8]) {
        self.forget_layout();
        let end = self.end + bytes.len();
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        self.data[self.end..end].copy_from_slice(bytes);
        self.end = end;
    }

    /// Removes the first `n` bytes; `false` (and nothing changed) if the frame is shorter.
    pub fn pull(&mut self, n: usize) -> bool {
        if n > self.len() {
            return false;
        }
        self.forget_layout();
        self.start += n;
        true
    }

    /// Shortens the frame to `len` bytes (no-op if already shorter).
    pub fn truncate(&mut self, len: usize) {
        if len < self.len() {
            self.forget_layout();
            self.end = self.start + len;
        }
    }

    /// Makes sure at least `n` bytes of headroom exist, moving the frame (once) if not.
    fn reserve_front(&mut self, n: usize) {
        if self.start >= n {
            return;
        }
        let grow = HEADROOM.max(n) - self.start;
        let len = self.len();
        self.data.splice(0..0, std::iter::repeat_n(0u8, grow));
        self.start += grow;
        self.end = self.start + len;
    }

    /// Prepends `n` bytes (zeroed) and returns them for writing.
    pub fn push(&mut self, n: usize) -> &mut [u8] {
        self.forget_layout();
        self.reserve_front(n);
        self.start -= n;
        let s = &mut self.data[self.start..self.start + n];
        s.fill(0);
        s
    }

    /// Opens an `n`-byte gap at offset `at` (by moving the `at` bytes in front of it into the
    /// headroom) and returns the gap, zeroed; `None` (nothing changed) if `at` is past the end.
    pub fn insert(&mut self, at: usize, n: usize) -> Option<&mut [u8]> {
        if at > self.len() {
            return None;
        }
        self.forget_layout();
        self.reserve_front(n);
        let old = self.start;
        self.data.copy_within(old..old + at, old - n);
        self.start = old - n;
        let gap = &mut self.data[self.start + at..self.start + at + n];
        gap.fill(0);
        Some(gap)
    }

    /// Removes `n` bytes at offset `at` (by moving the `at` bytes in front of them back);
    /// `false` (nothing changed) if the range is outside the frame.
    pub fn remove(&mut self, at: usize, n: usize) -> bool {
        if at.checked_add(n).is_none_or(|e| e > self.len()) {
            return false;
        }
        self.forget_layout();
        let s = self.start;
        self.data.copy_within(s..s + at, s + n);
        self.start = s + n;
        true
    }

    /// The whole allocation (for giving the buffer back to a pool that keeps `Vec`s).
    pub fn into_vec(self) -> Vec<u8> {
        self.data
    }

    /// Allocated bytes.
    pub fn capacity(&self) -> usize {
        self.data.len()
    }
}

/// A free list of [`PacketBuf`]s of one room size.
///
/// ```
/// use sluice_datapath::BufPool;
/// let mut pool = BufPool::new(2048, 8);
/// let mut a = pool.get();
/// a.set_frame(b"frame");
/// pool.put(a);
/// let b = pool.get(); // recycled and reset, not allocated again
/// assert!(b.is_empty());
/// assert_eq!(pool.allocated(), 1);
/// ```
#[derive(Debug)]
pub struct BufPool {
    free: Vec<PacketBuf>,
    room: usize,
    max_free: usize,
    allocated: u64,
}

impl BufPool {
    /// A pool of buffers with `room` bytes each, keeping at most `max_free` idle buffers.
    pub fn new(room: usize, max_free: usize) -> BufPool {
        BufPool {
            free: Vec::new(),
            room,
            max_free,
            allocated: 0,
        }
    }

    /// A reset buffer: a recycled one if any, else a new allocation (counted).
    pub fn get(&mut self) -> PacketBuf {
        match self.free.pop() {
            Some(mut b) => {
                b.reset();
                b
            }
            None => {
                self.allocated += 1;
                PacketBuf::new(self.room)
            }
        }
    }

    /// Gives a buffer back (dropped if the pool is full or the buffer is smaller than the
    /// pool's room).
    pub fn put(&mut self, b: PacketBuf) {
        if self.free.len() < self.max_free && b.capacity() >= self.room {
            self.free.push(b);
        }
    }

    /// Buffers allocated so far (stops growing in steady state).
    pub fn allocated(&self) -> u64 {
        self.allocated
    }

    /// Room of each buffer.
    pub fn room(&self) -> usize {
        self.room
    }

    /// Idle buffers.
    pub fn idle(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_and_remove_move_only_the_front() {
        let frame: Vec<u8> = (0..40u8).collect();
        let mut b = PacketBuf::from_frame(&frame);
        b.insert(12, 4).unwrap().copy_from_slice(&[0x81, 0, 0, 5]);
        assert_eq!(b.len(), 44);
        assert_eq!(&b.frame()[..12], &frame[..12]);
        assert_eq!(&b.frame()[12..16], &[0x81, 0, 0, 5]);
        assert_eq!(&b.frame()[16..], &frame[12..]);
        assert!(b.remove(12, 4));
        assert_eq!(b.frame(), &frame[..]);
        assert!(!b.remove(30, 20));
        assert!(b.insert(41, 1).is_none());
    }

    #[test]
    fn push_without_headroom_moves_once() {
        let mut b = PacketBuf::from_vec(vec![1, 2, 3]);
        assert_eq!(b.headroom(), 0);
        b.push(2).copy_from_slice(&[9, 8]);
        assert_eq!(b.frame(), &[9, 8, 1, 2, 3]);
        assert!(b.headroom() >= HEADROOM - 2);
        assert!(b.pull(2));
        assert_eq!(b.frame(), &[1, 2, 3]);
        assert!(!b.pull(4));
    }

    #[test]
    fn pool_recycles() {
        let mut p = BufPool::new(2048, 4);
        let mut a = p.get();
        a.room_mut()[..3].copy_from_slice(&[1, 2, 3]);
        a.set_len(3);
        assert_eq!(a.frame(), &[1, 2, 3]);
        p.put(a);
        let b = p.get();
        assert!(b.is_empty());
        assert_eq!(b.headroom(), HEADROOM);
        assert_eq!(p.allocated(), 1);
    }
}
