//! Rule batches as text (`flow_add_text` / `flow_del_text` / `flow_mod_text`): the rules of a
//! request are one newline-separated string. The lines are parsed on several threads *outside*
//! the control lock; the lock is held only to check the quotas and apply the parsed batch with
//! one `insert_batch_ref_into` (or `delete_batch`, `modify_batch`). Only the failures come back, with their line number and
//! the offending token marked; the handles of the rules that succeeded come back as runs of
//! consecutive handles (a whole file loaded in order is one run per request).

use super::{
    batch_mode, check_batch, Control, Switch, SwitchError, MAX_ACTIONS, SW_QUOTA_MASKS,
    SW_TOO_MANY_ACTIONS,
};
use crate::control::TextOp;
use serde::{Deserialize, Serialize};
use sluice_flow::{parse_rule, ActionList, Handle, Mask, PortNames, Rule, RuleError};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// Batches of fewer rule lines than this are parsed on the calling thread only.
pub const PARALLEL_PARSE_MIN: usize = 4096;

/// Most threads one request's lines are parsed on.
pub const MAX_PARSE_THREADS: usize = 4;

/// Whether a line of a rules text holds a rule (blank lines and `#` comments do not).
pub fn is_rule_line(line: &str) -> bool {
    let t = line.trim();
    !t.is_empty() && !t.starts_with('#')
}

/// The lines of a rules text, `\n`-separated (a trailing `\r` is dropped; a final newline does
/// not start another line).
pub fn text_lines(text: &str) -> impl Iterator<Item = &str> {
    let body = text.strip_suffix('\n').unwrap_or(text);
    let empty = text.is_empty();
    body.split('\n')
        .filter(move |_| !empty)
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
}

/// One rule line that failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineError {
    /// 1-based line number in the request's text.
    pub line: usize,
    /// Why (parse errors: the line, then a `^^^` marker under the offending token and the
    /// message).
    pub error: String,
}

/// The answer to a `flow_add_text` / `flow_del_text` / `flow_mod_text` request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextBatchReply {
    /// Lines in the text (blank and comment lines included).
    pub lines: usize,
    /// Rule lines (blank and `#` comment lines excluded).
    pub rules: usize,
    /// Rules inserted (or deleted, modified).
    pub done: usize,
    /// The handles of the rule lines that succeeded, in line order, as runs
    /// `[first, count]` of consecutive handles.
    pub handles: Vec<(u64, u64)>,
    /// The rule lines that failed, by line.
    pub errors: Vec<LineError>,
}

impl TextBatchReply {
    /// Every handle of [`TextBatchReply::handles`], in line order.
    pub fn handle_list(&self) -> impl Iterator<Item = u64> + '_ {
        self.handles
            .iter()
            .flat_map(|&(first, n)| (0..n).map(move |k| first + k))
    }
}

/// Appends `h` to runs of consecutive handles.
fn push_run(runs: &mut Vec<(u64, u64)>, h: u64) {
    if let Some(last) = runs.last_mut() {
        if last.0 + last.1 == h {
            last.1 += 1;
            return;
        }
    }
    runs.push((h, 1));
}

/// A request's rule lines as parsed outside the lock, in line order: the values of the lines
/// that parsed, and apart the messages of those that did not (values are not moved again on
/// their way to the table: a million-rule load moves a quarter of a gigabyte per copy).
struct Parsed<T> {
    /// Values of the lines that parsed.
    ok: Vec<T>,
    /// Each value's rule line (index into the request's rule lines).
    at: Vec<usize>,
    /// (rule line, message) of the lines that did not parse.
    errors: Vec<(usize, String)>,
    /// The values' masks, when asked for ([`parse_all`]'s `mask_of`).
    masks: MaskIndexer,
}

/// A [`MaskIndex`] built a value at a time, while the value is still in cache (a second pass
/// over a request's parsed rules reads a hundred thousand of them, 23 MB, from memory).
#[derive(Debug, Default)]
struct MaskIndexer {
    /// The distinct masks in order of first use.
    order: Vec<Mask>,
    /// Each distinct mask's index in `order`.
    seen: hashbrown::HashMap<Mask, u32>,
    /// Each value's index in `order`.
    ix: Vec<u32>,
}

impl MaskIndexer {
    /// Notes the next value's mask.
    fn note(&mut self, m: &Mask) {
        let k = self.index_of(m);
        self.ix.push(k);
    }

    /// `m`'s index, given it if new (copied only then: a mask is 104 bytes).
    fn index_of(&mut self, m: &Mask) -> u32 {
        if let Some(&k) = self.seen.get(m) {
            return k;
        }
        let k = self.order.len() as u32;
        self.order.push(*m);
        self.seen.insert(*m, k);
        k
    }

    /// Appends the values of `later` (which come after these).
    fn append(&mut self, later: MaskIndexer) {
        let to: Vec<u32> = later.order.iter().map(|m| self.index_of(m)).collect();
        // (Every index of `later.ix` is one of `later.order`'s.)
        debug_assert!(later.ix.iter().all(|&k| (k as usize) < to.len()));
        self.ix.extend(
            later
                .ix
                .iter()
                .map(|&k| to.get(k as usize).copied().unwrap_or(0)),
        );
    }

    /// The index built.
    fn finish(self) -> MaskIndex {
        (self.order, self.ix)
    }
}

impl<T> Parsed<T> {
    /// Empty, its values to go into `ok` (cleared, room made for `n`).
    fn with_buffer(mut ok: Vec<T>, n: usize) -> Self {
        ok.clear();
        ok.reserve(n);
        Parsed {
            ok,
            at: Vec::with_capacity(n),
            errors: Vec::new(),
            masks: MaskIndexer::default(),
        }
    }

    /// Parses `lines` (rule lines `base..`) with `f`, the values into `buf`, and indexes their
    /// masks with `mask_of` if given. `f` pushes a line's value itself (see [`LineParser`]).
    fn parse(
        base: usize,
        lines: &[&str],
        f: &impl LineParser<T>,
        mask_of: Option<fn(&T) -> &Mask>,
        buf: Vec<T>,
    ) -> Self {
        let mut out = Parsed::with_buffer(buf, lines.len());
        if mask_of.is_some() {
            out.masks.ix.reserve(lines.len());
        }
        for (i, l) in lines.iter().enumerate() {
            let before = out.ok.len();
            let r = f(l, &mut out.ok);
            debug_assert_eq!(out.ok.len(), before + usize::from(r.is_ok()));
            match r {
                Ok(()) => {
                    if let Some(v) = mask_of.zip(out.ok.last()).map(|(g, v)| g(v)) {
                        out.masks.note(v);
                    }
                    out.at.push(base + i);
                }
                Err(e) => out.errors.push((base + i, e)),
            }
        }
        out
    }

    /// Appends the lines of `later` (which come after these); returns its emptied value
    /// buffer.
    fn append(&mut self, mut later: Parsed<T>) -> Vec<T> {
        self.ok.append(&mut later.ok);
        self.at.extend(later.at);
        self.errors.extend(later.errors);
        self.masks.append(later.masks);
        later.ok
    }

    /// The outcome of every rule line (`n` in all) into `outcome` (emptied first): `Ok(0)` for
    /// those that parsed, the message for those that did not.
    fn outcome_into(&mut self, outcome: &mut Vec<Result<u64, String>>, n: usize) {
        outcome.clear();
        outcome.resize(n, Ok(0));
        for (k, e) in self.errors.drain(..) {
            settle(outcome, k, Err(e));
        }
    }
}

/// [`rule_spans_into`] into a new vector.
#[cfg(test)]
fn rule_spans(text: &str) -> (Vec<Span>, usize) {
    let mut spans = Vec::new();
    let n = rule_spans_into(text, &mut spans);
    (spans, n)
}

/// The rule lines of `text` as spans into `spans` (emptied first; a request's spans are
/// megabytes, so a connection reuses the vector), returning the number of lines: the lines of
/// [`text_lines`] that [`is_rule_line`] keeps, found in one pass (`memchr`'s vector search for
/// the newlines; a line that starts with a visible ASCII character other than `#` needs no
/// trimming to tell).
fn rule_spans_into(text: &str, spans: &mut Vec<Span>) -> usize {
    spans.clear();
    let bytes = text.as_bytes();
    if bytes.is_empty() {
        return 0;
    }
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    // Sized once: a request has up to a hundred thousand lines.
    spans.reserve(memchr::memchr_iter(b'\n', body).count() + 1);
    let (mut start, mut line) = (0, 0);
    for nl in memchr::memchr_iter(b'\n', body).chain(core::iter::once(body.len())) {
        let end = if nl > start && body.get(nl - 1) == Some(&b'\r') {
            nl - 1
        } else {
            nl
        };
        let plain = matches!(body.get(start), Some(&b) if b.is_ascii_graphic() && b != b'#');
        // (`\n` and `\r` are ASCII, so both ends are character boundaries.)
        if plain || text.get(start..end).is_some_and(is_rule_line) {
            spans.push(Span { line, start, end });
        }
        line += 1;
        start = nl + 1;
    }
    line
}

/// Where [`parse_all`] gets the (empty) vectors it parses into and where it hands back those it
/// is done with.
trait Buffers<T>: Sync {
    /// An empty vector.
    fn take(&self) -> Vec<T>;
    /// A vector no longer needed.
    fn give(&self, v: Vec<T>);
}

/// Fresh vectors, dropped after use.
struct Fresh;

impl<T> Buffers<T> for Fresh {
    fn take(&self) -> Vec<T> {
        Vec::new()
    }
    fn give(&self, _: Vec<T>) {}
}

/// Most rule vectors a [`ParseBuffers`] keeps: the request being applied and the one being
/// parsed (its parts on up to [`MAX_PARSE_THREADS`] threads).
const SPARE_RULE_VECS: usize = MAX_PARSE_THREADS + 1;

/// The buffers of one control connection's rules texts, reused from one request to the next:
/// a streamed million-rule file is about 230 MB of parsed rules (ten requests of up to
/// [`super::MAX_BATCH`] rules), and fresh vectors cost a page fault and a zeroed page every
/// 4 KiB (half of a load's page faults before). Kept while requests keep coming; dropped
/// ([`ParseBuffers::release`]) when the connection goes idle or ends.
#[derive(Debug, Default)]
pub struct ParseBuffers {
    /// Rule vectors handed back (emptied when taken again).
    rules: Mutex<Vec<Vec<Rule>>>,
    /// A request text's buffer, emptied.
    text: Mutex<Option<Vec<u8>>>,
    /// A request's rule line spans, emptied.
    spans: Mutex<Vec<Span>>,
    /// The allocation of a request's list of rule lines (empty: it borrows nothing).
    lines: Mutex<Vec<&'static str>>,
}

impl ParseBuffers {
    /// A buffer for the next request's text (empty; its capacity kept from an earlier one).
    pub fn take_text(&self) -> Vec<u8> {
        self.text
            .lock()
            .map(|mut t| t.take())
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// Drops the vectors kept (on the calling thread: call it from the parsing one), once the
    /// connection's stream has ended and no more requests will be parsed.
    pub fn release(&self) {
        let spare = self.rules.lock().map(|mut r| std::mem::take(&mut *r));
        drop(spare);
        drop(self.take_text());
        drop(self.spans.lock().map(|mut s| std::mem::take(&mut *s)));
        drop(self.lines.lock().map(|mut l| std::mem::take(&mut *l)));
    }

    /// A vector for the next request's spans (emptied when filled).
    fn take_spans(&self) -> Vec<Span> {
        self.spans
            .lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default()
    }

    /// Hands a request's spans back.
    fn give_spans(&self, s: Vec<Span>) {
        if let Ok(mut slot) = self.spans.lock() {
            *slot = s;
        }
    }

    /// An empty list of rule lines, of any lifetime, in the kept allocation: collecting an
    /// emptied vector's own iterator into a vector of a same-sized type reuses its buffer (no
    /// allocation per request once warm).
    fn take_lines<'a>(&self) -> Vec<&'a str> {
        let mut v = self
            .lines
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default();
        v.clear();
        v.into_iter().map(|s| -> &'a str { s }).collect()
    }

    /// Gives a list of rule lines back, emptied first (so nothing borrowed is kept).
    fn give_lines(&self, mut v: Vec<&str>) {
        v.clear();
        // Empty: the closure never runs; it only names the element type.
        let v: Vec<&'static str> = v.into_iter().map(|_| "").collect();
        if let Ok(mut slot) = self.lines.lock() {
            *slot = v;
        }
    }

    /// Hands a request's text buffer back.
    pub fn give_text(&self, mut t: Vec<u8>) {
        t.clear();
        if let Ok(mut slot) = self.text.lock() {
            *slot = Some(t);
        }
    }
}

impl Buffers<Rule> for ParseBuffers {
    /// (Emptied here, on the parsing thread: a batch's rules share a few action lists whose
    /// reference counts that thread has in its cache; dropped on the control thread, each
    /// drop pulled a count's cache line across.)
    fn take(&self) -> Vec<Rule> {
        let mut v = self
            .rules
            .lock()
            .ok()
            .and_then(|mut v| v.pop())
            .unwrap_or_default();
        sluice_flow::clear_rules(&mut v);
        v
    }

    /// (Kept as it is, rules and all: see [`ParseBuffers::take`].)
    fn give(&self, v: Vec<Rule>) {
        if v.capacity() == 0 {
            return;
        }
        if let Ok(mut spare) = self.rules.lock() {
            if spare.len() < SPARE_RULE_VECS {
                spare.push(v);
            }
        }
    }
}

/// Runs `f` on every line, on up to [`MAX_PARSE_THREADS`] threads for a big batch; results in
/// line order, the values in vectors from `bufs`, their masks indexed with `mask_of` if given.
fn parse_all<T: Send>(
    lines: &[&str],
    f: impl LineParser<T> + Sync,
    mask_of: Option<fn(&T) -> &Mask>,
    bufs: &impl Buffers<T>,
) -> Parsed<T> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_PARSE_THREADS);
    parse_on(threads, lines, f, mask_of, bufs)
}

/// [`parse_all`] on `threads` threads.
fn parse_on<T: Send>(
    threads: usize,
    lines: &[&str],
    f: impl LineParser<T> + Sync,
    mask_of: Option<fn(&T) -> &Mask>,
    bufs: &impl Buffers<T>,
) -> Parsed<T> {
    if threads <= 1 || lines.len() < PARALLEL_PARSE_MIN {
        return Parsed::parse(0, lines, &f, mask_of, bufs.take());
    }
    let per = lines.len().div_ceil(threads);
    std::thread::scope(|s| {
        let f = &f;
        // The calling thread takes the first part; the others run on scoped threads (a thread
        // that cannot be started leaves its part to the calling thread).
        let mut parts = lines.chunks(per).enumerate();
        let first = parts.next().map_or(&[][..], |(_, p)| p);
        let rest: Vec<_> = parts
            .map(|(i, p)| {
                let base = i * per;
                let buf = bufs.take();
                let h = std::thread::Builder::new()
                    .spawn_scoped(s, move || Parsed::parse(base, p, f, mask_of, buf));
                (base, p, h)
            })
            .collect();
        // The first part's vector has room for every line: the others are appended to it
        // without growing it.
        let mut buf = bufs.take();
        buf.reserve(lines.len());
        let mut out = Parsed::parse(0, first, f, mask_of, buf);
        out.at.reserve(lines.len().saturating_sub(first.len()));
        for (base, p, h) in rest {
            let part = match h.ok().and_then(|h| h.join().ok()) {
                Some(v) => v,
                None => Parsed::parse(base, p, f, mask_of, bufs.take()),
            };
            bufs.give(out.append(part));
        }
        out
    })
}

/// What parses one line for [`parse_all`]: on success it has pushed the line's value onto the
/// vector (exactly one), on failure it has pushed nothing and says why. Pushing in place, not
/// returning the value, saves copies of a 232-byte rule: returned through two `Result` types
/// and then pushed, it was copied up to four times (in a profile of a 1M-rule load, about
/// two thirds of the parsing threads' `memcpy` samples were those copies; the rest, the
/// parts' vectors appended).
trait LineParser<T>: Fn(&str, &mut Vec<T>) -> Result<(), String> {}

impl<T, F: Fn(&str, &mut Vec<T>) -> Result<(), String>> LineParser<T> for F {}

/// A [`LineParser`] from a function that returns the value.
fn pushing<T>(f: impl Fn(&str) -> Result<T, String>) -> impl LineParser<T> {
    move |l: &str, out: &mut Vec<T>| f(l).map(|v| out.push(v))
}

/// Parses one rule line for insertion (the per-rule checks that need no switch state), the
/// rule pushed onto `out`.
fn parse_add(line: &str, names: &PortNames, out: &mut Vec<Rule>) -> Result<(), String> {
    match parse_rule(line, names) {
        Ok(r) if r.actions.as_slice().len() <= MAX_ACTIONS => {
            out.push(r);
            Ok(())
        }
        Ok(r) => {
            SW_TOO_MANY_ACTIONS.inc();
            let n = r.actions.as_slice().len();
            Err(format!(
                "{n} actions: a rule has at most {MAX_ACTIONS} actions"
            ))
        }
        Err(e) => Err(e.render(line)),
    }
}

/// A delete spec, parsed outside the lock. A rule is boxed: most deletes name a handle, and a
/// request's vector of 16-byte specs is 1.6 MB where 232-byte ones were 23 MB of fresh memory
/// (a page fault and a zeroed page every 4 KiB) per hundred thousand lines.
enum DelSpec {
    Handle(u64),
    Rule(Box<Rule>),
}

fn parse_del(line: &str, names: &PortNames) -> Result<DelSpec, String> {
    let s = line.trim();
    let num = s.strip_prefix("handle").map(str::trim).unwrap_or(s);
    if let Ok(ext) = num.parse::<u64>() {
        return Ok(DelSpec::Handle(ext));
    }
    // A rule's text; give it an action if it has none so the parser accepts it.
    if s.contains("action") {
        parse_rule(s, names)
            .map(|r| DelSpec::Rule(Box::new(r)))
            .map_err(|e| e.render(s))
    } else {
        let text = format!("{s} action drop");
        parse_rule(&text, names)
            .map(|r| DelSpec::Rule(Box::new(r)))
            .map_err(|e| e.render(&text))
    }
}

/// The distinct masks of a batch's rules in order of first use, and each rule's index in that
/// list.
type MaskIndex = (Vec<Mask>, Vec<u32>);

/// A rule line of a [`PreparedText`]: its 0-based line index and byte range in the text.
#[derive(Debug, Clone, Copy)]
struct Span {
    line: usize,
    start: usize,
    end: usize,
}

/// What a [`PreparedText`]'s lines parsed to.
enum ParsedLines {
    /// Rules to insert, or (for a modification) rules whose actions replace the existing ones.
    Rules(Parsed<Rule>),
    /// Rules (or handles) to delete.
    Dels(Parsed<DelSpec>),
}

/// A rules text parsed outside the control lock, to be applied with [`Switch::apply_text`].
/// The control server prepares the next request of a connection while the previous one is
/// applied, so a streamed rules file keeps both cores busy: one parses, the other inserts.
pub struct PreparedText {
    op: TextOp,
    text: String,
    spans: Vec<Span>,
    n_lines: usize,
    /// The port names the lines were parsed with; applying parses again if they changed.
    names: PortNames,
    parsed: ParsedLines,
    /// For an insertion, the distinct masks of the parsed rules and each rule's index in them
    /// (found while parsing, outside the lock).
    masks: MaskIndex,
    /// Where its buffers come from and go back to (a control connection's), if anywhere.
    bufs: Option<Arc<ParseBuffers>>,
}

impl PreparedText {
    /// What the text does.
    pub fn op(&self) -> TextOp {
        self.op
    }

    /// Rule lines (blank and `#` comment lines excluded).
    pub fn rules(&self) -> usize {
        self.spans.len()
    }

    /// The rule lines' texts (in the connection's kept list, if it has one).
    fn lines(&self) -> Vec<&str> {
        let mut v = match &self.bufs {
            Some(b) => b.take_lines(),
            None => Vec::with_capacity(self.spans.len()),
        };
        v.extend(
            self.spans
                .iter()
                .map(|s| self.text.get(s.start..s.end).unwrap_or("")),
        );
        v
    }

    /// The text of the `k`-th rule line.
    fn rule_text(&self, k: usize) -> &str {
        self.spans
            .get(k)
            .and_then(|s| self.text.get(s.start..s.end))
            .unwrap_or("")
    }

    /// Parses the lines with `names`.
    fn parse(&mut self, names: PortNames) {
        let lines = self.lines();
        let add = |l: &str, out: &mut Vec<Rule>| parse_add(l, &names, out);
        // An insertion's quotas and counts need each rule's mask index.
        let mask_of: Option<fn(&Rule) -> &Mask> =
            (self.op == TextOp::Add).then_some(|r: &Rule| &r.matcher.mask);
        let mut parsed = match (self.op, &self.bufs) {
            (TextOp::Add | TextOp::Mod, Some(b)) => {
                ParsedLines::Rules(parse_all(&lines, add, mask_of, b.as_ref()))
            }
            (TextOp::Add | TextOp::Mod, None) => {
                ParsedLines::Rules(parse_all(&lines, add, mask_of, &Fresh))
            }
            (TextOp::Del, _) => ParsedLines::Dels(parse_all(
                &lines,
                pushing(|l| parse_del(l, &names)),
                None,
                &Fresh,
            )),
        };
        if let Some(b) = &self.bufs {
            b.give_lines(lines);
        }
        self.masks = match &mut parsed {
            ParsedLines::Rules(r) => std::mem::take(&mut r.masks).finish(),
            ParsedLines::Dels(_) => MaskIndex::default(),
        };
        self.parsed = parsed;
        self.names = names;
    }
}

impl Switch {
    /// Drops the vectors text batches keep under the control lock between batches (up to
    /// about 6.4 MB after batches of a hundred thousand rules): for a control connection that
    /// goes idle or ends, as it drops its own parse buffers.
    pub fn release_batch_buffers(&self) {
        let spare = std::mem::take(&mut self.control().scratch);
        drop(spare);
    }

    /// The port names, without the control lock.
    fn port_names(&self) -> PortNames {
        PortNames::clone(&self.names.get())
    }

    /// Parses the rules text of an `op` request without the control lock (on several threads
    /// for a big batch), for [`Switch::apply_text`]. At most [`super::MAX_BATCH`] rule lines.
    pub fn prepare_text(&self, op: TextOp, text: String) -> Result<PreparedText, SwitchError> {
        self.prepare_text_with(op, text, None)
    }

    /// [`Switch::prepare_text`] with vectors from `bufs`, to which [`Switch::apply_text`]
    /// hands them (and the text's buffer) back.
    pub fn prepare_text_with(
        &self,
        op: TextOp,
        text: String,
        bufs: Option<Arc<ParseBuffers>>,
    ) -> Result<PreparedText, SwitchError> {
        let mut spans = bufs.as_ref().map(|b| b.take_spans()).unwrap_or_default();
        let n_lines = rule_spans_into(&text, &mut spans);
        check_batch(spans.len())?;
        let mut p = PreparedText {
            op,
            text,
            spans,
            n_lines,
            names: PortNames::new(),
            parsed: ParsedLines::Rules(Parsed::with_buffer(Vec::new(), 0)),
            masks: MaskIndex::default(),
            bufs,
        };
        p.parse(self.port_names());
        Ok(p)
    }

    /// Applies a prepared rules text in one publish (`atomic`: all or none), recorded in the
    /// store (with `--db`) before the answer. Lines parsed with port names that changed since
    /// are parsed again under the lock.
    pub fn apply_text(
        &self,
        mut p: PreparedText,
        atomic: bool,
    ) -> Result<TextBatchReply, SwitchError> {
        let mut ctl = self.control();
        if ctl.names != p.names {
            // A port was added or removed since the lines were parsed: parse again, under
            // the lock.
            p.parse(ctl.names.clone());
        }
        let parsed = core::mem::replace(
            &mut p.parsed,
            ParsedLines::Rules(Parsed::with_buffer(Vec::new(), 0)),
        );
        let mut spent = Vec::new();
        let reply = match parsed {
            ParsedLines::Rules(parsed) if p.op == TextOp::Add => {
                let masks = std::mem::take(&mut p.masks);
                apply_add(&mut ctl, &p, (parsed, masks), atomic, &mut spent)
            }
            ParsedLines::Rules(parsed) => apply_mod(&mut ctl, &p, parsed, atomic, &mut spent),
            ParsedLines::Dels(parsed) => apply_del(&mut ctl, &p, parsed, atomic),
        };
        drop(ctl);
        if let Some(b) = p.bufs.take() {
            b.give(spent);
            b.give_text(std::mem::take(&mut p.text).into_bytes());
            b.give_spans(std::mem::take(&mut p.spans));
        }
        reply
    }

    /// Parses (outside the control lock, on several threads for a big batch) and inserts the
    /// rules of `text`, one per line (blank lines and `#` comments skipped), in one publish.
    /// `atomic`: all or none. At most [`super::MAX_BATCH`] rule lines.
    pub fn add_flows_text(&self, text: &str, atomic: bool) -> Result<TextBatchReply, SwitchError> {
        self.apply_text(self.prepare_text(TextOp::Add, text.to_owned())?, atomic)
    }

    /// Deletes the rules of `text`, one spec per line as in [`Switch::del_flows`] (`handle N`,
    /// `N`, or a rule's match and priority), parsed outside the control lock, in one publish.
    pub fn del_flows_text(&self, text: &str, atomic: bool) -> Result<TextBatchReply, SwitchError> {
        self.apply_text(self.prepare_text(TextOp::Del, text.to_owned())?, atomic)
    }

    /// Replaces the actions of the rules of `text` in place, one rule per line as in
    /// [`Switch::add_flows_text`]: a line's match and priority name an existing rule (its handle,
    /// counters and place stay), its actions are the rule's new ones. Parsed outside the control
    /// lock, applied with one `modify_batch` (one publish), recorded in the store (with `--db`)
    /// before the answer. A line whose match and priority no rule has fails alone (`atomic`: the
    /// whole batch fails).
    pub fn mod_flows_text(&self, text: &str, atomic: bool) -> Result<TextBatchReply, SwitchError> {
        self.apply_text(self.prepare_text(TextOp::Mod, text.to_owned())?, atomic)
    }
}

/// The vectors a text batch fills under the control lock, kept from one batch to the next: a
/// batch of a hundred thousand rules fills megabytes of each, and a vector made afresh for
/// each batch is a fresh mapping whose every page faults in (`sluice run` has `malloc` map
/// every big allocation: `sluice_ports::memory`). Dropped when a control connection goes idle
/// or ends ([`Switch::release_batch_buffers`]), as its parse buffers are.
#[derive(Debug, Default)]
pub(super) struct BatchScratch {
    /// Each rule line's outcome (see [`Parsed::outcome_into`]).
    outcome: Vec<Result<u64, String>>,
    /// The rules that went in: (switch handle, priority, rule line), for the store.
    added: Vec<(u64, u32, usize)>,
    /// The table's result for each rule inserted.
    inserted: Vec<Result<sluice_flow::Handle, RuleError>>,
    /// Copies of the rules a deletion is about to remove, to put back if it cannot be
    /// recorded (emptied after each batch).
    saved: Vec<(u64, sluice_flow::Rule)>,
}

/// Every rule line's outcome so far (those that did not parse have failed), in the vector
/// kept from the last batch; [`finish`] turns it into the reply and keeps it again.
fn start<T>(
    ctl: &mut Control,
    p: &PreparedText,
    parsed: &mut Parsed<T>,
) -> Vec<Result<u64, String>> {
    let mut outcome = std::mem::take(&mut ctl.scratch.outcome);
    parsed.outcome_into(&mut outcome, p.spans.len());
    outcome
}

/// The reply of a text batch from its `outcome` (emptied, then kept for the next batch).
fn finish(
    ctl: &mut Control,
    p: &PreparedText,
    mut outcome: Vec<Result<u64, String>>,
) -> TextBatchReply {
    let rep = reply(p, &mut outcome);
    ctl.scratch.outcome = outcome;
    rep
}

/// Inserts the parsed rules of `p` under the lock; their vector (still full: emptied on the
/// parsing thread when reused) ends in `spent`.
fn apply_add(
    ctl: &mut Control,
    p: &PreparedText,
    (mut parsed, (masks, mut mask_of)): (Parsed<Rule>, MaskIndex),
    atomic: bool,
    spent: &mut Vec<Rule>,
) -> Result<TextBatchReply, SwitchError> {
    let mut outcome = start(ctl, p, &mut parsed);
    let refused = refused_masks(ctl, &masks);
    let (mut rules, mut at) = (parsed.ok, parsed.at);
    if !refused.is_empty() {
        let mut kept = (Vec::new(), Vec::new(), Vec::new());
        for ((r, k), ix) in rules.into_iter().zip(at).zip(mask_of) {
            if refused.contains(&r.matcher.mask) {
                SW_QUOTA_MASKS.inc();
                settle(
                    &mut outcome,
                    k,
                    Err(format!(
                        "mask quota reached: at most {} distinct masks (max_masks)",
                        ctl.max_masks
                    )),
                );
            } else {
                kept.0.push(r);
                kept.1.push(k);
                kept.2.push(ix);
            }
        }
        (rules, at, mask_of) = kept;
    }
    if atomic && refuse_all(&mut outcome) {
        return Ok(finish(ctl, p, outcome));
    }
    let priorities: Vec<u32> = rules.iter().map(|r| r.priority).collect();
    let mut out = std::mem::take(&mut ctl.scratch.inserted);
    ctl.table
        .insert_batch_ref_into(&rules, batch_mode(atomic), &mut out);
    *spent = rules;
    ctl.reserve_inserts(out.len());
    let mut per_mask = vec![0usize; masks.len()];
    let mut added = std::mem::take(&mut ctl.scratch.added);
    added.clear();
    added.reserve(out.len());
    for (((k, r), priority), ix) in at
        .into_iter()
        .zip(out.drain(..))
        .zip(priorities)
        .zip(mask_of)
    {
        let o = match r {
            Ok(h) => {
                let ext = ctl.record_insert_uncounted(h);
                if let Some(n) = per_mask.get_mut(ix as usize) {
                    *n += 1;
                }
                added.push((ext, priority, k));
                Ok(ext)
            }
            Err(e) => Err(ctl.rule_error(&e)),
        };
        settle(&mut outcome, k, o);
    }
    ctl.scratch.inserted = out;
    for (m, n) in masks.iter().zip(per_mask) {
        ctl.count_mask(m, n);
    }
    // Durable before acknowledged (with `--db`): the rules that went in, by their text.
    let persisted = ctl.persist_added(&added, |k| p.rule_text(k));
    ctl.scratch.added = added;
    persisted?;
    Ok(finish(ctl, p, outcome))
}

/// Deletes the parsed specs of `p` under the lock.
fn apply_del(
    ctl: &mut Control,
    p: &PreparedText,
    mut parsed: Parsed<DelSpec>,
    atomic: bool,
) -> Result<TextBatchReply, SwitchError> {
    let mut outcome = start(ctl, p, &mut parsed);
    let mut handles = Vec::with_capacity(parsed.ok.len());
    // (rule line, the mask's place in `masks`, named by its match rather than its handle)
    let mut found: Vec<(usize, u32, bool)> = Vec::with_capacity(parsed.ok.len());
    // The masks of the rules found, once each, with how many of their rules went; by the
    // table's mask number (no mask hashed per rule).
    let mut masks: Vec<(Mask, usize)> = Vec::new();
    let mut place_of: Vec<u32> = Vec::new();
    let targets: Vec<(&sluice_flow::Match, u32)> = parsed
        .ok
        .iter()
        .filter_map(|s| match s {
            DelSpec::Rule(r) => Some((&r.matcher, r.priority)),
            DelSpec::Handle(_) => None,
        })
        .collect();
    let mut by_rule = ctl.table.find_batch(&targets).into_iter();
    drop(targets);
    for (spec, &k) in parsed.ok.iter().zip(&parsed.at) {
        let target = match spec {
            DelSpec::Handle(ext) => ctl
                .int_of
                .get(*ext)
                .map(|h| (h, false))
                .ok_or_else(|| format!("no rule with handle {ext}")),
            // Found just now, under the same lock: deleted by its handle.
            DelSpec::Rule(_) => by_rule
                .next()
                .flatten()
                .map(|h| (h, true))
                .ok_or_else(|| RuleError::NotFound.to_string()),
        };
        let o = match target.and_then(|(h, by_match)| {
            let place =
                mask_place(&ctl.table, h, &mut place_of, &mut masks).ok_or_else(|| match spec {
                    DelSpec::Handle(ext) => format!("no rule with handle {ext}"),
                    DelSpec::Rule(_) => RuleError::NotFound.to_string(),
                })?;
            Ok((h, place, by_match))
        }) {
            Ok((h, place, by_match)) => {
                handles.push(h);
                found.push((k, place, by_match));
                Ok(ctl.ext(h))
            }
            Err(e) => Err(e),
        };
        settle(&mut outcome, k, o);
    }
    if atomic && refuse_all(&mut outcome) {
        return Ok(finish(ctl, p, outcome));
    }
    let mut saved = std::mem::take(&mut ctl.scratch.saved);
    ctl.save_rules_into(handles.iter().copied(), &mut saved);
    let out = ctl.table.delete_handles(&handles, batch_mode(atomic));
    for ((&h, (k, place, by_match)), r) in handles.iter().zip(found).zip(out) {
        match r {
            Ok(()) => {
                ctl.forget_rule(h);
                if let Some(m) = masks.get_mut(place as usize) {
                    m.1 += 1;
                }
            }
            Err(e) => {
                // A rule named by its match fails only when a line before deleted it: it is
                // no longer found (its handle is an internal detail of this batch).
                let msg = if by_match && e != RuleError::Aborted {
                    RuleError::NotFound.to_string()
                } else {
                    ctl.rule_error(&e)
                };
                settle(&mut outcome, k, Err(msg));
            }
        }
    }
    for (mask, gone) in &masks {
        ctl.uncount_mask(mask, *gone);
    }
    let deleted = outcome
        .iter()
        .filter_map(|o| o.as_ref().ok().copied())
        .collect();
    ctl.persist_deleted(deleted, &mut saved)?;
    saved.clear();
    ctl.scratch.saved = saved;
    Ok(finish(ctl, p, outcome))
}

/// The place in `masks` of rule `h`'s mask (added with a count of 0 the first time), found by
/// the table's mask number through `place_of`; `None` when the table has no rule `h`.
fn mask_place(
    table: &sluice_flow::FlowTable,
    h: Handle,
    place_of: &mut Vec<u32>,
    masks: &mut Vec<(Mask, usize)>,
) -> Option<u32> {
    let n = table.mask_number(h)? as usize;
    if place_of.len() <= n {
        place_of.resize(n + 1, u32::MAX);
    }
    let slot = place_of.get_mut(n)?;
    if *slot == u32::MAX {
        let place = u32::try_from(masks.len()).ok()?;
        masks.push((table.mask_of(h)?, 0));
        *slot = place;
    }
    Some(*slot)
}

/// Replaces the actions of the rules of `p` under the lock; their vector, emptied (the actions
/// moved out), ends in `spent`.
fn apply_mod(
    ctl: &mut Control,
    p: &PreparedText,
    mut parsed: Parsed<Rule>,
    atomic: bool,
    spent: &mut Vec<Rule>,
) -> Result<TextBatchReply, SwitchError> {
    let mut outcome = start(ctl, p, &mut parsed);
    let mut changes: Vec<(Handle, ActionList)> = Vec::with_capacity(parsed.ok.len());
    let mut found: Vec<(usize, Handle)> = Vec::with_capacity(parsed.ok.len());
    let targets: Vec<(&sluice_flow::Match, u32)> =
        parsed.ok.iter().map(|r| (&r.matcher, r.priority)).collect();
    let handles = ctl.table.find_batch(&targets);
    drop(targets);
    for ((r, k), h) in parsed.ok.drain(..).zip(parsed.at).zip(handles) {
        let o = match h {
            Some(h) => {
                changes.push((h, r.actions));
                found.push((k, h));
                Ok(ctl.ext(h))
            }
            None => Err(RuleError::NotFound.to_string()),
        };
        settle(&mut outcome, k, o);
    }
    *spent = parsed.ok;
    if atomic && refuse_all(&mut outcome) {
        return Ok(finish(ctl, p, outcome));
    }
    let saved = ctl.save_actions(found.iter().map(|&(_, h)| h));
    let out = ctl.table.modify_handles(changes, batch_mode(atomic));
    for ((k, _), r) in found.into_iter().zip(out) {
        if let Err(e) = r {
            let msg = ctl.rule_error(&e);
            settle(&mut outcome, k, Err(msg));
        }
    }
    ctl.persist_modified(
        outcome
            .iter()
            .enumerate()
            .filter_map(|(k, o)| Some((*o.as_ref().ok()?, p.rule_text(k)))),
        saved,
    )?;
    Ok(finish(ctl, p, outcome))
}

/// The new masks of a batch (in first-use order) that the mask quota refuses.
fn refused_masks(ctl: &Control, masks: &[Mask]) -> HashSet<Mask> {
    let mut room = ctl.max_masks.saturating_sub(ctl.masks.len());
    let mut refused = HashSet::new();
    for m in masks {
        if ctl.masks.contains_key(m) {
            continue;
        }
        if room == 0 {
            refused.insert(*m);
        } else {
            room -= 1;
        }
    }
    refused
}

/// Sets rule line `k`'s outcome.
fn settle(outcome: &mut [Result<u64, String>], k: usize, o: Result<u64, String>) {
    if let Some(slot) = outcome.get_mut(k) {
        *slot = o;
    }
}

/// If any rule already failed, marks every other one as not applied (all or nothing) and
/// returns true.
fn refuse_all(outcome: &mut [Result<u64, String>]) -> bool {
    if !outcome.iter().any(Result::is_err) {
        return false;
    }
    for o in outcome.iter_mut().filter(|o| o.is_ok()) {
        *o = Err("not applied: another rule of the all-or-nothing batch failed".into());
    }
    true
}

/// The answer: every rule line's outcome, by its line number.
fn reply(p: &PreparedText, outcome: &mut Vec<Result<u64, String>>) -> TextBatchReply {
    let mut rep = TextBatchReply {
        lines: p.n_lines,
        rules: p.spans.len(),
        ..TextBatchReply::default()
    };
    for (span, o) in p.spans.iter().zip(outcome.drain(..)) {
        match o {
            Ok(h) => {
                rep.done += 1;
                push_run(&mut rep.handles, h);
            }
            Err(error) => rep.errors.push(LineError {
                line: span.line + 1,
                error,
            }),
        }
    }
    rep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_rule_lines() {
        let t = "a\r\n\n# c\n  \nb";
        let l: Vec<&str> = text_lines(t).collect();
        assert_eq!(l, vec!["a", "", "# c", "  ", "b"]);
        let (r, n) = rule_spans(t);
        assert_eq!(n, 5);
        let r: Vec<(usize, &str)> = r.iter().map(|s| (s.line, &t[s.start..s.end])).collect();
        assert_eq!(r, vec![(0, "a"), (4, "b")]);
        assert_eq!(text_lines("x\n").count(), 1);
        assert_eq!(text_lines("").count(), 0);
        assert_eq!(text_lines("\n").count(), 1);
    }

    proptest::proptest! {
        /// The one-pass split gives what `text_lines` and `is_rule_line` give, on texts of
        /// rule-like lines, blank lines, comments, `\r\n` endings, leading spaces and non-ASCII
        /// whitespace.
        #[test]
        fn rule_spans_are_the_rule_lines(
            parts in proptest::collection::vec(
                proptest::sample::select(vec![
                    "prio 1 action drop", "\n", "\r\n", "", "  ", "# c", " #x", "\t a",
                    "\u{a0}b", "\u{2003}", "\r", "x\r", "é", "#", "\n\n",
                ]),
                0..40,
            )
        ) {
            let t: String = parts.concat();
            let want: Vec<(usize, &str)> =
                text_lines(&t).enumerate().filter(|(_, l)| is_rule_line(l)).collect();
            let (spans, n) = rule_spans(&t);
            let got: Vec<(usize, &str)> =
                spans.iter().map(|s| (s.line, &t[s.start..s.end])).collect();
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert_eq!(n, text_lines(&t).count());
        }
    }

    /// Handed-back vectors come back empty with their capacity; at most [`SPARE_RULE_VECS`]
    /// are kept, and one text buffer, one span vector and one list of lines.
    #[test]
    fn parse_buffers_are_reused_and_bounded() {
        let b = ParseBuffers::default();
        assert_eq!(Buffers::<Rule>::take(&b).capacity(), 0);
        let mut v: Vec<Rule> = Vec::with_capacity(100);
        v.push(Rule {
            matcher: sluice_flow::Match::ANY,
            priority: 1,
            actions: ActionList::output(1),
        });
        b.give(v);
        let v = Buffers::<Rule>::take(&b);
        assert!(v.is_empty() && v.capacity() >= 100);
        for _ in 0..SPARE_RULE_VECS + 3 {
            b.give(Vec::with_capacity(10));
        }
        assert_eq!(b.rules.lock().map(|r| r.len()).ok(), Some(SPARE_RULE_VECS));
        b.give_text(b"abc".to_vec());
        let t = b.take_text();
        assert!(t.is_empty() && t.capacity() >= 3);
        assert_eq!(b.take_text().capacity(), 0);
        // Spans and the list of lines: reused, and what comes back is empty.
        let text = String::from("a\n# b\nc\n");
        let mut spans = b.take_spans();
        assert_eq!(rule_spans_into(&text, &mut spans), 3);
        assert_eq!(spans.len(), 2);
        let cap = spans.capacity();
        b.give_spans(spans);
        let mut spans = b.take_spans();
        assert_eq!(spans.capacity(), cap);
        assert_eq!(rule_spans_into("x", &mut spans), 1);
        assert_eq!(spans.len(), 1, "emptied before it is filled");
        let mut lines = b.take_lines();
        lines.extend(text.lines());
        let cap = lines.capacity();
        b.give_lines(lines);
        let lines = b.take_lines();
        assert!(lines.is_empty() && lines.capacity() == cap);
        b.release();
        assert_eq!(b.take_spans().capacity(), 0);
        assert_eq!(b.take_lines().capacity(), 0);
    }

    #[test]
    fn handle_runs() {
        let mut runs = Vec::new();
        for h in [5, 6, 7, 9, 10, 3] {
            push_run(&mut runs, h);
        }
        assert_eq!(runs, vec![(5, 3), (9, 2), (3, 1)]);
        let rep = TextBatchReply {
            handles: runs,
            ..TextBatchReply::default()
        };
        assert_eq!(
            rep.handle_list().collect::<Vec<_>>(),
            vec![5, 6, 7, 9, 10, 3]
        );
    }

    #[test]
    fn parallel_parse_keeps_line_order() {
        let lines: Vec<String> = (0..10_000)
            .map(|i| {
                if i % 7 == 3 {
                    "x".into()
                } else {
                    format!("{i}")
                }
            })
            .collect();
        let input: Vec<&str> = lines.iter().map(String::as_str).collect();
        let mut out = parse_on(
            2,
            &input,
            pushing(|l| l.parse::<usize>().map_err(|e| e.to_string())),
            None,
            &Fresh,
        );
        assert_eq!(out.ok.len() + out.errors.len(), 10_000);
        for (v, k) in out.ok.iter().zip(&out.at) {
            assert_eq!(v, k);
        }
        assert!(out.at.windows(2).all(|w| w[0] < w[1]));
        let bad: Vec<usize> = out.errors.iter().map(|e| e.0).collect();
        assert_eq!(bad, (0..10_000).filter(|i| i % 7 == 3).collect::<Vec<_>>());
        // Into a vector left over from a bigger batch: emptied first.
        let mut outcome = vec![Err("stale".to_string()); 20_000];
        out.outcome_into(&mut outcome, 10_000);
        assert_eq!(outcome.len(), 10_000);
        assert!(outcome[3].is_err() && outcome[4] == Ok(0));
        assert_eq!(outcome.iter().filter(|o| o.is_err()).count(), bad.len());
    }

    /// The reference: a [`MaskIndex`] made in one pass over the parsed rules.
    fn mask_index(rules: &[Rule]) -> MaskIndex {
        let mut order: Vec<Mask> = Vec::new();
        let mut seen: hashbrown::HashMap<Mask, u32> = hashbrown::HashMap::new();
        let ix = rules
            .iter()
            .map(|r| {
                let m = r.matcher.mask;
                *seen.entry(m).or_insert_with(|| {
                    order.push(m);
                    (order.len() - 1) as u32
                })
            })
            .collect();
        (order, ix)
    }

    /// The mask index built while parsing, on several threads, is the one a single pass over
    /// the rules gives: masks met first in a later part, masks shared by parts, bad lines
    /// between.
    #[test]
    fn parallel_parse_indexes_masks_as_one_pass_does() {
        let names = PortNames::new();
        let lines: Vec<String> = (0..10_000usize)
            .map(|i| match i % 11 {
                5 => "prio 1 dst_ip 10.0.0.0/33 action drop".into(),
                // Prefix lengths by a pattern the two halves meet in different orders, and
                // lengths only the second half has.
                _ => {
                    let len = if i < 5_000 {
                        8 + (i * 7) % 5
                    } else {
                        8 + (i * 5) % 9
                    };
                    format!("prio {i} dst_ip 10.0.0.0/{len} action output:{}", i % 3)
                }
            })
            .collect();
        let input: Vec<&str> = lines.iter().map(String::as_str).collect();
        // On two threads whatever the machine (the parts' indexes merged).
        let mut out = parse_on(
            2,
            &input,
            |l: &str, out: &mut Vec<Rule>| parse_add(l, &names, out),
            Some(|r: &Rule| &r.matcher.mask),
            &Fresh,
        );
        assert_eq!(
            out.errors.len(),
            (0..10_000).filter(|i| i % 11 == 5).count()
        );
        let got = std::mem::take(&mut out.masks).finish();
        let want = mask_index(&out.ok);
        assert_eq!(want.0.len(), 9);
        assert_eq!(got, want);
    }
}
