//! Streaming a rules text to the daemon: the text is cut into `flow_add_text` /
//! `flow_del_text` requests of whole lines (at most [`MAX_BATCH`] rule lines and
//! [`CHUNK_BYTES`] bytes each, the text after its request line as it is: `text_bytes`),
//! written by one thread in large writes while the calling
//! thread reads the replies (the daemon answers in order), so the client never waits for a
//! reply before sending the next chunk.

use super::{Client, MAX_LINE};
use crate::switch::{is_rule_line, FlowResult, TextBatchReply, MAX_BATCH};
use serde_json::Value;
use std::io::{self, BufRead, Read, Write};

/// Most bytes of text in one request (half of [`MAX_LINE`], the most a daemon takes after one
/// request line).
pub const CHUNK_BYTES: usize = MAX_LINE / 2;

/// Rule lines of the first request of a stream (the next ones double up to [`MAX_BATCH`]).
pub const FIRST_CHUNK: usize = 8192;

/// The smallest request the end of a stream of known size is cut into (see
/// [`RuleChunker::ramp_down`]): about six thousand rule lines of a typical file.
pub const TAIL_BYTES: usize = 512 << 10;

/// Bytes the chunker asks its source for at a time.
const READ_BLOCK: usize = 1 << 20;

/// One request's share of a rules text: whole lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleChunk {
    /// Byte range of the lines in the text (a final newline included).
    pub start: usize,
    /// End of the byte range (exclusive).
    pub end: usize,
    /// 0-based index, in the whole text, of the chunk's first line.
    pub first_line: usize,
    /// Rule lines in the chunk (blank and `#` comment lines excluded).
    pub rules: usize,
}

/// A line of a rules text that is not UTF-8 (the error inside the `io::Error` of
/// [`RuleChunker::next_chunk`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotUtf8 {
    /// 0-based index of the line in the whole text.
    pub line: usize,
}

impl std::fmt::Display for NotUtf8 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {} is not valid UTF-8", self.line + 1)
    }
}

impl std::error::Error for NotUtf8 {}

/// Cuts a rules text read from `src` into chunks of whole lines as they are read, so that the
/// first request goes out before the rest of a big file is read: each chunk has at most
/// `max_rules` rule lines and `max_bytes` bytes (a single line longer than that is a chunk of
/// its own, which the daemon refuses if it is too long).
pub struct RuleChunker<R> {
    src: R,
    max_rules: usize,
    /// The rule limit of the next chunk (it doubles up to `max_rules`).
    limit: usize,
    max_bytes: usize,
    /// The source's size, when known ([`RuleChunker::ramp_down`]), and the smallest chunk the
    /// ramp down makes.
    total: Option<usize>,
    tail_floor: usize,
    /// The byte limit of the chunk being cut.
    cap: usize,
    /// Bytes asked of the source at a time ([`READ_BLOCK`]; smaller in tests, so that lines
    /// and bad bytes cross reads).
    read_block: usize,
    /// A line read that did not fit the chunk before: the next chunk's first.
    carry: Vec<u8>,
    /// A chunk's buffer handed back ([`RuleChunker::recycle`]), filled again by the next one:
    /// a file of megabyte chunks is read without a fresh allocation (and its page faults)
    /// per chunk.
    spare: Vec<u8>,
    /// Bytes and lines handed out so far.
    pos: usize,
    line_no: usize,
    /// The source ended (never read again: a terminal would wait for another end of file).
    eof: bool,
}

impl<R: BufRead> RuleChunker<R> {
    /// A chunker of `src` with these limits.
    pub fn new(src: R, max_rules: usize, max_bytes: usize) -> Self {
        RuleChunker {
            src,
            max_rules: max_rules.max(1),
            limit: max_rules.max(1),
            max_bytes,
            total: None,
            tail_floor: 0,
            cap: max_bytes,
            read_block: READ_BLOCK,
            carry: Vec::new(),
            spare: Vec::new(),
            pos: 0,
            line_no: 0,
            eof: false,
        }
    }

    /// Starts with chunks of at most `first` rules, doubling up to the maximum: the daemon
    /// parses a chunk while it applies the one before, so a small first chunk lets it start
    /// applying sooner.
    pub fn ramp_from(mut self, first: usize) -> Self {
        self.limit = first.clamp(1, self.max_rules);
        self
    }

    /// Ends with smaller chunks, for a source of `total` bytes: each chunk's byte limit is
    /// half of what is left, but not under `floor` (nor over the chunker's maximum); the last
    /// chunk is whatever remains. The daemon applies the last chunk alone, its parsing side
    /// idle: a small last chunk ends the load sooner. (A wrong `total` costs only chunk sizes.)
    pub fn ramp_down(mut self, total: usize, floor: usize) -> Self {
        self.total = Some(total);
        self.tail_floor = floor.max(1);
        self
    }

    /// Gives back the text of a chunk that is no longer needed, for the next chunk to reuse.
    pub fn recycle(&mut self, text: String) {
        self.spare = text.into_bytes();
    }

    /// The next chunk and its text, `None` at the end. A line that is not UTF-8 is an
    /// `InvalidData` error holding a [`NotUtf8`].
    ///
    /// The source is read a buffer at a time (not a line at a time): the whole lines of what
    /// was read are checked for UTF-8 in one pass and cut at newlines found by `memchr`, and
    /// the bytes read past the chunk's end are carried to the next chunk.
    pub fn next_chunk(&mut self) -> io::Result<Option<(RuleChunk, String)>> {
        let Some((chunk, text)) = self.next_text()? else {
            return Ok(None);
        };
        let text =
            String::from_utf8(text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        Ok(Some((chunk, text)))
    }

    /// [`RuleChunker::next_chunk`] with the chunk's text as the bytes it was read in (checked
    /// to be UTF-8 line by line: the sender writes them without a second pass).
    fn next_text(&mut self) -> io::Result<Option<(RuleChunk, Vec<u8>)>> {
        self.cap = match self.total {
            Some(t) => (t.saturating_sub(self.pos) / 2)
                .max(self.tail_floor)
                .min(self.max_bytes),
            None => self.max_bytes,
        };
        let mut buf = std::mem::take(&mut self.spare);
        buf.clear();
        buf.append(&mut self.carry);
        let (mut lines, mut rules) = (0usize, 0usize);
        // `buf[..done]`: the chunk's whole lines so far; `buf[done..searched]` has no newline.
        let (mut done, mut searched) = (0usize, 0usize);
        loop {
            let whole_end = if self.eof {
                // Every byte left is in a whole line (the last one may lack its newline).
                buf.len()
            } else {
                let tail = buf.get(searched..).unwrap_or(&[]);
                memchr::memrchr(b'\n', tail).map_or(done, |p| searched + p + 1)
            };
            if whole_end > done {
                match self.take_lines(&buf, done, whole_end, &mut lines, &mut rules)? {
                    Some(cut) => {
                        self.carry = buf.split_off(cut);
                        break;
                    }
                    None => done = whole_end,
                }
            }
            searched = buf.len();
            if self.eof {
                break;
            }
            // Straight into the chunk's buffer (a `BufReader` at most this big passes a read
            // this big through without copying it into its own buffer first).
            buf.reserve(self.read_block);
            let n = (&mut self.src)
                .take(self.read_block as u64)
                .read_to_end(&mut buf)?;
            if n < self.read_block {
                // The source ended (`take` reads until its limit or the end). Never read
                // again: a terminal would wait for another end of file.
                self.eof = true;
            }
        }
        if lines == 0 {
            return Ok(None);
        }
        let chunk = RuleChunk {
            start: self.pos,
            end: self.pos + buf.len(),
            first_line: self.line_no,
            rules,
        };
        self.pos = chunk.end;
        self.line_no += lines;
        self.limit = self.limit.saturating_mul(2).min(self.max_rules);
        Ok(Some((chunk, buf)))
    }

    /// Adds the whole lines of `buf[from..to]` to the chunk (`lines`, `rules`; the chunk is
    /// `buf[..from]` so far) until one does not fit: `Some(where it starts)` then, `None` when
    /// all fit. A line that is not UTF-8 ends the chunk before it, or is the error when it
    /// would be the chunk's first.
    fn take_lines(
        &self,
        buf: &[u8],
        from: usize,
        to: usize,
        lines: &mut usize,
        rules: &mut usize,
    ) -> io::Result<Option<usize>> {
        let region = buf.get(from..to).unwrap_or(&[]);
        // Where the first byte that is not UTF-8 is, if any (a sequence never spans a
        // newline, so every line before the one holding it is good).
        let bad = std::str::from_utf8(region)
            .err()
            .map(|e| from + e.valid_up_to());
        let mut at = from;
        while at < to {
            let rest = buf.get(at..to).unwrap_or(&[]);
            let end = memchr::memchr(b'\n', rest).map_or(to, |p| at + p + 1);
            if bad.is_some_and(|b| b < end) {
                if *lines > 0 {
                    // The chunk so far is good: send it; the next call reports this line.
                    return Ok(Some(at));
                }
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    NotUtf8 { line: self.line_no },
                ));
            }
            let rule = rule_bytes(buf.get(at..end).unwrap_or(&[]));
            if *lines > 0 && (end > self.cap || (rule && *rules + 1 > self.limit)) {
                return Ok(Some(at));
            }
            *lines += 1;
            *rules += usize::from(rule);
            at = end;
        }
        Ok(None)
    }
}

/// [`is_rule_line`] of a line known to be UTF-8, answered from its first byte when that is a
/// printable ASCII character (every line of a machine-written rules file).
#[inline]
fn rule_bytes(line: &[u8]) -> bool {
    match line.first() {
        Some(&b) if b.is_ascii_graphic() => b != b'#',
        _ => std::str::from_utf8(line).is_ok_and(is_rule_line),
    }
}

/// Cuts `text` into chunks of whole lines, each of at most `max_rules` rule lines and
/// `max_bytes` bytes (a single line longer than that is a chunk of its own, which the daemon
/// refuses if it is too long): [`RuleChunker`] over a text in memory.
pub fn chunk_rules(text: &str, max_rules: usize, max_bytes: usize) -> Vec<RuleChunk> {
    let mut chunker = RuleChunker::new(text.as_bytes(), max_rules, max_bytes);
    let mut out = Vec::new();
    // Reading from memory cannot fail, and the text is UTF-8 already.
    while let Ok(Some((c, _))) = chunker.next_chunk() {
        out.push(c);
    }
    out
}

/// What a text batch does with its lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextOp {
    /// Insert the rules (`flow_add_text`).
    Add,
    /// Delete the rules (`flow_del_text`: `handle N` or a rule's match and priority).
    Del,
    /// Replace the actions of the rules with the same match and priority (`flow_mod_text`).
    Mod,
}

impl TextOp {
    /// The request's `cmd`.
    pub fn cmd(self) -> &'static str {
        match self {
            TextOp::Add => "flow_add_text",
            TextOp::Del => "flow_del_text",
            TextOp::Mod => "flow_mod_text",
        }
    }

    /// The past participle for messages ("inserted", "deleted", "modified").
    pub fn done(self) -> &'static str {
        match self {
            TextOp::Add => "inserted",
            TextOp::Del => "deleted",
            TextOp::Mod => "modified",
        }
    }
}

/// The request carrying `text`: its line (newline included), then the text as it is
/// (`text_bytes`, `docs/control.md`).
pub fn encode_text_request(text: &str, op: TextOp, atomic: bool) -> io::Result<Vec<u8>> {
    let mut v = Vec::with_capacity(text.len() + 80);
    write_text_request(&mut v, text, op, atomic)?;
    Ok(v)
}

/// Writes the request carrying `text` to `w`: a line that says how many bytes of text follow
/// (`text_bytes`), then the text unescaped — nothing for either side to encode or decode.
pub fn write_text_request(w: impl Write, text: &str, op: TextOp, atomic: bool) -> io::Result<()> {
    write_text_bytes(w, text.as_bytes(), op, atomic)
}

/// [`write_text_request`] of a text already known to be UTF-8, as bytes.
fn write_text_bytes(mut w: impl Write, text: &[u8], op: TextOp, atomic: bool) -> io::Result<()> {
    let cmd = op.cmd();
    let n = text.len();
    writeln!(
        w,
        "{{\"cmd\":\"{cmd}\",\"atomic\":{atomic},\"text_bytes\":{n}}}"
    )?;
    w.write_all(text)
}

impl Client {
    /// Sends the rules of `text` (one per line; blank lines and `#` comments skipped) in
    /// pipelined `flow_add_text` (or, by `op`, `flow_del_text` / `flow_mod_text`) requests and
    /// calls `on_reply` with each chunk and its reply, in order. `atomic` needs the whole text
    /// in one request (an `InvalidInput` error otherwise). A daemon error ends the stream and
    /// closes the connection.
    pub fn stream_rules(
        &mut self,
        text: &str,
        op: TextOp,
        atomic: bool,
        on_reply: impl FnMut(&RuleChunk, TextBatchReply),
    ) -> io::Result<()> {
        self.stream_rules_from(text.as_bytes(), op, atomic, on_reply)
    }

    /// [`Client::stream_rules`] of a text read from `src` as it is sent: one thread reads,
    /// cuts and writes the requests while this one reads the replies, so the daemon starts on
    /// the first chunk while the rest of a big file is still being read. A read error or a
    /// line that is not UTF-8 ([`NotUtf8`]) ends the stream (the chunks before it were sent).
    pub fn stream_rules_from<R: BufRead + Send>(
        &mut self,
        src: R,
        op: TextOp,
        atomic: bool,
        on_reply: impl FnMut(&RuleChunk, TextBatchReply),
    ) -> io::Result<()> {
        self.stream_rules_sized(src, None, op, atomic, on_reply)
    }

    /// [`Client::stream_rules_from`] of a source of `total` bytes when known (a file): the
    /// last requests are smaller ([`RuleChunker::ramp_down`]), so the daemon's last batch,
    /// applied while nothing else is left to parse, is short.
    pub fn stream_rules_sized<R: BufRead + Send>(
        &mut self,
        src: R,
        total: Option<usize>,
        op: TextOp,
        atomic: bool,
        mut on_reply: impl FnMut(&RuleChunk, TextBatchReply),
    ) -> io::Result<()> {
        let mut chunker = RuleChunker::new(src, MAX_BATCH, CHUNK_BYTES);
        if !atomic {
            // (An all-or-nothing batch is one request, as big as it may be.)
            chunker = chunker.ramp_from(FIRST_CHUNK);
            if let Some(t) = total {
                chunker = chunker.ramp_down(t, TAIL_BYTES);
            }
        }
        let mut first = chunker.next_text()?;
        if atomic && first.is_some() && chunker.next_text()?.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "an all-or-nothing batch must fit one request: at most {MAX_BATCH} rules and {CHUNK_BYTES} bytes"
                ),
            ));
        }
        let writer = self.writer.try_clone()?;
        // Room for a whole request in flight (best effort): the next chunk is in the socket
        // by the time the daemon has parsed this one, instead of crossing in 200 KiB steps.
        let _ = sluice_ports::sockopt::set_socket_buffer(
            &writer,
            sluice_ports::sockopt::SocketBuffer::Send,
            CHUNK_BYTES + (1 << 20),
        );
        let (sent_tx, sent_rx) = std::sync::mpsc::channel::<RuleChunk>();
        std::thread::scope(|s| {
            let sender = s.spawn(move || -> io::Result<()> {
                let mut out = io::BufWriter::with_capacity(1 << 20, &writer);
                loop {
                    let next = match first.take() {
                        Some(c) => Some(c),
                        None => chunker.next_text()?,
                    };
                    let Some((c, part)) = next else { break };
                    write_text_bytes(&mut out, &part, op, atomic)?;
                    out.flush()?;
                    chunker.spare = part;
                    if sent_tx.send(c).is_err() {
                        break; // the reading side gave up
                    }
                }
                out.flush()
            });
            let mut result = Ok(());
            for c in sent_rx.iter() {
                match self.read_reply() {
                    Ok(v) => match serde_json::from_value::<TextBatchReply>(v) {
                        Ok(rep) => on_reply(&c, rep),
                        Err(e) => {
                            result = Err(io::Error::other(format!(
                                "bad response from the daemon: {e}"
                            )));
                            break;
                        }
                    },
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            if result.is_err() {
                // Unblock the sender (the daemon may have stopped reading).
                let _ = self.writer.shutdown(std::net::Shutdown::Both);
            }
            drop(sent_rx);
            let sent = sender
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the sending thread panicked")));
            result.and(sent)
        })
    }

    /// Inserts the rules of `text` (one per line; blank lines and `#` comments skipped),
    /// streamed in large requests: one result per rule line, `index` its 0-based line number
    /// in `text`.
    pub fn add_rules(&mut self, text: &str) -> io::Result<Vec<FlowResult>> {
        self.rules_results(text, TextOp::Add)
    }

    /// Deletes the rules of `text` (one spec per line, as `flow_del` takes them), streamed like
    /// [`Client::add_rules`].
    pub fn del_rules(&mut self, text: &str) -> io::Result<Vec<FlowResult>> {
        self.rules_results(text, TextOp::Del)
    }

    /// Replaces the actions of the rules of `text` (one rule per line, as `flow_add` takes them:
    /// the match and priority name the rule, the actions are its new ones), streamed like
    /// [`Client::add_rules`]; `handle` is the modified rule's.
    pub fn mod_rules(&mut self, text: &str) -> io::Result<Vec<FlowResult>> {
        self.rules_results(text, TextOp::Mod)
    }

    fn rules_results(&mut self, text: &str, op: TextOp) -> io::Result<Vec<FlowResult>> {
        let mut out = Vec::new();
        self.stream_rules(text, op, false, |c, rep| {
            out.extend(expand(text, c, &rep));
        })?;
        Ok(out)
    }

    /// Reads one response line: its result, or the daemon's error.
    pub(super) fn read_reply(&mut self) -> io::Result<Value> {
        let mut resp = String::new();
        if self.reader.read_line(&mut resp)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the daemon closed the connection without answering",
            ));
        }
        let v: Value = serde_json::from_str(&resp)
            .map_err(|e| io::Error::other(format!("bad response from the daemon: {e}")))?;
        if v.get("ok") == Some(&Value::Bool(true)) {
            Ok(v.get("result").cloned().unwrap_or(Value::Null))
        } else {
            let msg = v
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("unknown error")
                .to_string();
            Err(io::Error::other(msg))
        }
    }
}

/// One [`FlowResult`] per rule line of chunk `c` of `text`, from its reply.
fn expand(text: &str, c: &RuleChunk, rep: &TextBatchReply) -> Vec<FlowResult> {
    let part = text.get(c.start..c.end).unwrap_or("");
    let mut handles = rep.handle_list();
    let mut errors = rep.errors.iter().peekable();
    let mut out = Vec::with_capacity(c.rules);
    for (i, line) in crate::switch::text_lines(part).enumerate() {
        if !is_rule_line(line) {
            continue;
        }
        let index = c.first_line + i;
        let error = errors.next_if(|e| e.line == i + 1).map(|e| e.error.clone());
        let handle = if error.is_none() {
            handles.next()
        } else {
            None
        };
        out.push(FlowResult {
            index,
            handle,
            error,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::Request;

    /// The request of an encoded text request, and the text after its line.
    fn decode(bytes: Vec<u8>) -> (Request, String) {
        let nl = bytes.iter().position(|&b| b == b'\n').unwrap();
        let req: Request = serde_json::from_slice(&bytes[..nl]).unwrap();
        (req, String::from_utf8(bytes[nl + 1..].to_vec()).unwrap())
    }

    #[test]
    fn encoded_requests_carry_the_text_after_their_line() {
        let text = "prio 1 dst_ip 10.0.0.0/8 action drop\n# \"quoted\" \\ \t\u{1}\n";
        let (r, after) = decode(encode_text_request(text, TextOp::Add, true).unwrap());
        assert_eq!(
            r,
            Request::FlowAddText {
                text: None,
                text_bytes: Some(text.len()),
                atomic: true
            }
        );
        assert_eq!(after, text);
        let (r, after) = decode(encode_text_request("handle 3", TextOp::Del, false).unwrap());
        assert_eq!(
            r,
            Request::FlowDelText {
                text: None,
                text_bytes: Some(8),
                atomic: false
            }
        );
        assert_eq!(after, "handle 3");
        let line = "prio 3 dst_ip 10.0.0.1 action output:2";
        let (r, after) = decode(encode_text_request(line, TextOp::Mod, true).unwrap());
        assert_eq!(
            r,
            Request::FlowModText {
                text: None,
                text_bytes: Some(line.len()),
                atomic: true
            }
        );
        assert_eq!(after, line);
    }

    #[test]
    fn chunks_are_whole_lines_within_the_limits() {
        let mut text = String::new();
        for i in 0..1000 {
            if i % 7 == 0 {
                text.push_str("# comment\n\n");
            }
            text.push_str(&format!("prio {i} dst_ip 10.0.0.0/8 action output:1\n"));
        }
        text.push_str("prio 5000 action drop"); // no final newline
        let chunks = chunk_rules(&text, 100, 2000);
        // Together they are the text, in order, cut at line ends.
        let mut pos = 0;
        let mut line = 0;
        let mut rules = 0;
        for c in &chunks {
            assert_eq!(c.start, pos);
            assert!(c.start == 0 || text.as_bytes()[c.start - 1] == b'\n');
            assert!(c.rules <= 100, "{c:?}");
            let part = &text[c.start..c.end];
            assert!(part.len() <= 2000, "{c:?}");
            assert!(
                encode_text_request(part, TextOp::Add, false).unwrap().len() <= part.len() + 80
            );
            assert_eq!(c.first_line, line);
            assert_eq!(
                c.rules,
                crate::switch::text_lines(part)
                    .filter(|l| is_rule_line(l))
                    .count()
            );
            line += crate::switch::text_lines(part).count();
            rules += c.rules;
            pos = c.end;
        }
        assert_eq!(pos, text.len());
        assert_eq!(rules, 1001);
        assert_eq!(line, text.lines().count());
        assert!(chunks.len() >= 11);
        // Rule-count limit alone.
        let by_rules = chunk_rules(&text, 250, usize::MAX);
        assert_eq!(
            by_rules.iter().map(|c| c.rules).collect::<Vec<_>>(),
            vec![250, 250, 250, 250, 1]
        );
        assert!(chunk_rules("", 10, 10).is_empty());
    }

    #[test]
    fn expand_maps_errors_and_handles_to_lines() {
        let text = "x\n# c\nbad\ny\n";
        let c = RuleChunk {
            start: 0,
            end: text.len(),
            first_line: 10,
            rules: 3,
        };
        let rep = TextBatchReply {
            lines: 4,
            rules: 3,
            done: 2,
            handles: vec![(7, 2)],
            errors: vec![crate::switch::LineError {
                line: 3,
                error: "nope".into(),
            }],
        };
        let r = expand(text, &c, &rep);
        assert_eq!(r.len(), 3);
        assert_eq!(
            (r[0].index, r[0].handle, r[0].error.as_deref()),
            (10, Some(7), None)
        );
        assert_eq!(
            (r[1].index, r[1].handle, r[1].error.as_deref()),
            (12, None, Some("nope"))
        );
        assert_eq!(
            (r[2].index, r[2].handle, r[2].error.as_deref()),
            (13, Some(8), None)
        );
    }

    #[test]
    fn the_chunker_ramps_up_and_reads_in_small_steps() {
        let mut text = String::new();
        for i in 0..100 {
            text.push_str(&format!("prio {i} action drop\n"));
            if i % 10 == 0 {
                text.push_str("# note\n");
            }
        }
        // Reads of 7 bytes at a time: lines cross them.
        let src = io::BufReader::with_capacity(7, text.as_bytes());
        let mut c = RuleChunker::new(src, 40, usize::MAX).ramp_from(5);
        c.read_block = 7;
        let mut sizes = Vec::new();
        let mut joined = String::new();
        let mut line = 0;
        while let Some((chunk, part)) = c.next_chunk().unwrap() {
            assert_eq!(chunk.first_line, line);
            assert_eq!(&text[chunk.start..chunk.end], part);
            line += crate::switch::text_lines(&part).count();
            sizes.push(chunk.rules);
            joined.push_str(&part);
        }
        assert_eq!(joined, text);
        assert_eq!(sizes, vec![5, 10, 20, 40, 25]);
    }

    #[test]
    fn a_line_that_is_not_utf8_is_named() {
        let bytes = b"prio 1 action drop\nprio 2 action drop\nprio \xff action drop\n";
        let mut c = RuleChunker::new(&bytes[..], 1, usize::MAX);
        assert_eq!(c.next_chunk().unwrap().map(|(c, _)| c.rules), Some(1));
        assert_eq!(c.next_chunk().unwrap().map(|(c, _)| c.rules), Some(1));
        let e = c.next_chunk().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let bad = e
            .get_ref()
            .and_then(|x| x.downcast_ref::<NotUtf8>())
            .copied();
        assert_eq!(bad, Some(NotUtf8 { line: 2 }));
    }

    #[test]
    fn the_chunker_never_reads_past_the_end_of_its_source() {
        /// Counts reads that come after the source said it had ended.
        struct Once<'a> {
            data: &'a [u8],
            after_end: usize,
        }
        impl io::Read for Once<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.data.is_empty() {
                    self.after_end += 1;
                }
                let n = buf.len().min(self.data.len());
                buf[..n].copy_from_slice(&self.data[..n]);
                self.data = &self.data[n..];
                Ok(n)
            }
        }
        let mut src = Once {
            data: b"prio 1 action drop\nprio 2 action drop",
            after_end: 0,
        };
        let mut c = RuleChunker::new(io::BufReader::new(&mut src), 10, usize::MAX);
        assert_eq!(c.next_chunk().unwrap().map(|(c, _)| c.rules), Some(2));
        assert!(c.next_chunk().unwrap().is_none());
        assert!(c.next_chunk().unwrap().is_none());
        drop(c);
        // One read saw the end (a terminal's ^D); none after it.
        assert_eq!(src.after_end, 1);
    }

    /// A chunk's `(first_line, rules, text)`, or the line that is not UTF-8.
    type ModelChunk = Result<(usize, usize, Vec<u8>), usize>;

    /// What the chunker must give, computed a line at a time: chunks of `(first_line, rules,
    /// text)`, then `Err(line)` for the first line that is not UTF-8 (if any).
    fn model(
        bytes: &[u8],
        max_rules: usize,
        max_bytes: usize,
        first: usize,
        tail: Option<usize>,
    ) -> Vec<ModelChunk> {
        let mut lines: Vec<&[u8]> = bytes.split_inclusive(|&b| b == b'\n').collect();
        lines.retain(|l| !l.is_empty());
        let mut out = Vec::new();
        let (mut i, mut limit) = (0, first.clamp(1, max_rules));
        while i < lines.len() {
            let (start, mut rules, mut size, mut text) = (i, 0, 0, Vec::new());
            let done: usize = lines.iter().take(i).map(|l| l.len()).sum();
            let max_bytes = tail.map_or(max_bytes, |floor| {
                ((bytes.len() - done) / 2).max(floor).min(max_bytes)
            });
            while let Some(l) = lines.get(i) {
                let Ok(t) = std::str::from_utf8(l) else { break };
                let rule = is_rule_line(t);
                if i > start && (size + l.len() > max_bytes || (rule && rules + 1 > limit)) {
                    break;
                }
                rules += usize::from(rule);
                size += l.len();
                text.extend_from_slice(l);
                i += 1;
            }
            if i == start {
                out.push(Err(i));
                return out;
            }
            out.push(Ok((start, rules, text)));
            limit = (limit * 2).min(max_rules);
        }
        out
    }

    proptest::proptest! {
        /// Read through buffers of any size (lines cross reads), the chunks are the model's:
        /// the same cuts, rule counts, line numbers and the same line named when one is not
        /// UTF-8.
        #[test]
        fn chunks_match_a_line_at_a_time_model(
            parts in proptest::collection::vec(0usize..9, 0..60),
            cap in 1usize..64,
            max_rules in 1usize..8,
            max_bytes in 1usize..200,
            first in 1usize..8,
            end_newline: bool,
            tail in proptest::option::of(1usize..40),
        ) {
            const PIECES: [&[u8]; 9] = [
                b"prio 1 action drop\n", b"# note\n", b"\n", b"  prio 2 action drop\n",
                b"\t# indented note\n", b"prio 3 \xc3\xa9 action drop\n", b"\xc2\xa0prio 4\n",
                b"prio \xff bad\n", b"   \n",
            ];
            let mut bytes: Vec<u8> = parts.iter().flat_map(|&k| PIECES[k].iter().copied()).collect();
            if !end_newline && bytes.last() == Some(&b'\n') {
                bytes.pop();
            }
            let want = model(&bytes, max_rules, max_bytes, first, tail);
            let src = io::BufReader::with_capacity(cap, &bytes[..]);
            let mut c = RuleChunker::new(src, max_rules, max_bytes).ramp_from(first);
            // Reads of `cap` bytes: lines, bad bytes and the end cross them.
            c.read_block = cap;
            if let Some(floor) = tail {
                c = c.ramp_down(bytes.len(), floor);
            }
            let mut got = Vec::new();
            let mut pos = 0;
            loop {
                match c.next_chunk() {
                    Ok(Some((chunk, text))) => {
                        proptest::prop_assert_eq!(chunk.start, pos);
                        proptest::prop_assert_eq!(chunk.end, pos + text.len());
                        pos = chunk.end;
                        got.push(Ok((chunk.first_line, chunk.rules, text.into_bytes())));
                    }
                    Ok(None) => break,
                    Err(e) => {
                        let bad = e.get_ref().and_then(|x| x.downcast_ref::<NotUtf8>()).copied();
                        got.push(Err(bad.map_or(usize::MAX, |b| b.line)));
                        break;
                    }
                }
            }
            proptest::prop_assert_eq!(got, want);
        }
    }
}
