//! The store: open and replay, commit durably, compact.

use std::fs::{self, File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::codec::{self, SnapshotEnd};
use crate::error::StoreError;
use crate::frame::{self, BadRecord, FileKind, Tail, RECORD_HEADER};
use crate::state::{Change, Rule, RuleRef, State};

const JOURNAL: &str = "journal";
const SNAPSHOT: &str = "snapshot";
const JOURNAL_TMP: &str = "journal.tmp";
const SNAPSHOT_TMP: &str = "snapshot.tmp";
const LOCK: &str = "lock";
/// The store holds the switch's configuration: readable by the daemon's group, no one else.
const FILE_MODE: u32 = 0o640;
const DIR_MODE: u32 = 0o750;

/// Rules per snapshot record: keeps records well under the 4 GiB frame limit and the replay's
/// working set small.
const SNAPSHOT_RULES_PER_RECORD: usize = 65_536;
/// The encoding buffer is kept between commits unless a huge batch grew it past this.
const KEEP_BUFFER: usize = 16 << 20;

/// A torn tail [`Store::open`] found and cut off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The journal.
    pub path: PathBuf,
    /// Where the last complete record ended: the file was truncated to this length.
    pub offset: u64,
    /// How many bytes were dropped.
    pub dropped_bytes: u64,
    /// What the dropped bytes looked like.
    pub reason: String,
}

/// What [`Store::open`] repaired. Nothing here loses an acknowledged change; the daemon logs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// An unacknowledged record cut short by a crash, now truncated.
    pub torn_tail: Option<TornTail>,
    /// A compaction had renamed its snapshot into place but not yet replaced the journal; the
    /// journal (already folded into the snapshot) was replaced by an empty one.
    pub superseded_journal: bool,
    /// Temporary files a crashed compaction left behind, now removed.
    pub removed_temp_files: Vec<PathBuf>,
}

impl Recovery {
    /// Nothing was repaired.
    pub fn is_clean(&self) -> bool {
        self.torn_tail.is_none() && !self.superseded_journal && self.removed_temp_files.is_empty()
    }
}

/// Where a compaction stops in a fault-injection test, as if the process died there.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The new snapshot is written and synced under its temporary name.
    SnapshotWritten,
    /// The new snapshot is renamed into place; the journal is still the old generation's.
    SnapshotRenamed,
    /// The new, empty journal is written under its temporary name.
    JournalWritten,
}

/// The durable store. One process at a time holds it (an advisory lock on `lock`).
pub struct Store {
    dir: PathBuf,
    journal: File,
    journal_len: u64,
    snapshot_len: u64,
    generation: u64,
    next_port_handle: u64,
    next_rule_handle: u64,
    poisoned: bool,
    recovery: Recovery,
    buf: Vec<u8>,
    _lock: File,
    #[cfg(test)]
    pub(crate) fault: Option<Fault>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the encoding buffer: it can hold megabytes.
        f.debug_struct("Store")
            .field("dir", &self.dir)
            .field("generation", &self.generation)
            .field("journal_len", &self.journal_len)
            .field("snapshot_len", &self.snapshot_len)
            .field("next_port_handle", &self.next_port_handle)
            .field("next_rule_handle", &self.next_rule_handle)
            .field("poisoned", &self.poisoned)
            .field("recovery", &self.recovery)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens the store in directory `dir` (created if missing, mode 0750, its files 0640),
    /// loads the snapshot, replays the journal, repairs what a crash left (see
    /// [`Store::recovery`]) and returns the state.
    ///
    /// Fails with [`StoreError::Corrupt`] (naming the file and offset) when a file holds
    /// anything but what the store wrote, and with [`StoreError::Locked`] when another
    /// process has the store open.
    pub fn open(dir: impl AsRef<Path>) -> Result<(Store, State), StoreError> {
        let dir = dir.as_ref().to_path_buf();
        create_dir_durably(&dir)?;
        let lock_path = dir.join(LOCK);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(FILE_MODE)
            .open(&lock_path)
            .map_err(|e| StoreError::io(&lock_path, "open", e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(StoreError::Locked { path: lock_path })
            }
            Err(fs::TryLockError::Error(e)) => return Err(StoreError::io(&lock_path, "lock", e)),
        }

        let mut recovery = Recovery::default();
        for tmp in [SNAPSHOT_TMP, JOURNAL_TMP] {
            let p = dir.join(tmp);
            match fs::remove_file(&p) {
                Ok(()) => recovery.removed_temp_files.push(p),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::io(&p, "remove", e)),
            }
        }

        let mut state = State::default();
        let snapshot_path = dir.join(SNAPSHOT);
        let (generation, snapshot_len) = match read_optional(&snapshot_path)? {
            Some(bytes) => (
                load_snapshot(&snapshot_path, &bytes, &mut state)?,
                bytes.len() as u64,
            ),
            None => (0, 0),
        };

        let journal_path = dir.join(JOURNAL);
        let journal_len = match read_optional(&journal_path)? {
            None if generation > 0 => {
                return Err(StoreError::corrupt(
                    &journal_path,
                    0,
                    format!("missing, but the snapshot is at generation {generation}"),
                ))
            }
            None => create_journal(&dir, generation)?,
            Some(bytes) => {
                let jgen = frame::parse_file_header(FileKind::Journal, &bytes)
                    .map_err(|r| StoreError::corrupt(&journal_path, 0, r))?;
                if jgen < generation {
                    recovery.superseded_journal = true;
                    create_journal(&dir, generation)?
                } else if jgen > generation {
                    return Err(StoreError::corrupt(
                        &journal_path,
                        12,
                        format!(
                            "journal generation {jgen} is newer than the snapshot's {generation}"
                        ),
                    ));
                } else {
                    let tail = replay(&bytes, &mut state, |payload, state| {
                        codec::apply_payload(state, payload).map(|_| ())
                    })
                    .map_err(|b| StoreError::corrupt(&journal_path, b.offset as u64, b.reason))?;
                    match tail {
                        Tail::Clean => bytes.len() as u64,
                        Tail::Torn { good_len, reason } => {
                            truncate(&journal_path, good_len as u64)?;
                            recovery.torn_tail = Some(TornTail {
                                path: journal_path.clone(),
                                offset: good_len as u64,
                                dropped_bytes: (bytes.len() - good_len) as u64,
                                reason,
                            });
                            good_len as u64
                        }
                    }
                }
            }
        };

        let journal = open_append(&journal_path, journal_len)?;
        let store = Store {
            dir,
            journal,
            journal_len,
            snapshot_len,
            generation,
            next_port_handle: state.next_port_handle,
            next_rule_handle: state.next_rule_handle,
            poisoned: false,
            recovery,
            buf: Vec::new(),
            _lock: lock,
            #[cfg(test)]
            fault: None,
        };
        Ok((store, state))
    }

    /// What [`Store::open`] repaired.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The lowest port handle never used (committed or not refused).
    pub fn next_port_handle(&self) -> u64 {
        self.next_port_handle
    }

    /// The lowest rule handle never used.
    pub fn next_rule_handle(&self) -> u64 {
        self.next_rule_handle
    }

    /// Bytes in the journal (header included).
    pub fn journal_bytes(&self) -> u64 {
        self.journal_len
    }

    /// Bytes in the snapshot (0 before the first compaction).
    pub fn snapshot_bytes(&self) -> u64 {
        self.snapshot_len
    }

    /// The generation: how many compactions the store has been through.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// A suggested time to [`compact`](Store::compact): the journal holds more than 64 MiB and
    /// more than twice the snapshot, so replay mostly reads history.
    pub fn should_compact(&self) -> bool {
        self.journal_len > 64 << 20 && self.journal_len > 2 * self.snapshot_len
    }

    /// Appends `changes` as one record and returns once it is on stable storage
    /// (`fdatasync`). All or nothing: after a crash, the store holds every change of the batch
    /// or none of it, and none only if this call had not returned `Ok`.
    ///
    /// Refused ([`StoreError::InvalidChange`], nothing written) when an added port or rule has
    /// a handle below [`next_port_handle`](Store::next_port_handle) /
    /// [`next_rule_handle`](Store::next_rule_handle) or equal to `u64::MAX`: handles are never
    /// reused. A failed write or sync poisons the store ([`StoreError::Poisoned`] from then
    /// on): after a failed `fdatasync` the kernel may have dropped the dirty pages, so the only
    /// safe continuation is to reopen.
    pub fn commit(&mut self, changes: &[Change]) -> Result<(), StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        if changes.is_empty() {
            return Ok(());
        }
        let (next_port, next_rule) = self.check(changes)?;
        let buf = &mut self.buf;
        buf.clear();
        buf.resize(RECORD_HEADER, 0);
        for c in changes {
            codec::encode_change(buf, c);
        }
        self.write_record(next_port, next_rule)
    }

    /// [`commit`](Store::commit) of one [`Change::RulesAdd`], with the rules borrowed from the
    /// caller instead of built as [`Rule`]s: the daemon's fast path for large batches. The
    /// same checks (handles fresh and increasing), the same record, the same durability.
    pub fn commit_rules<'a, I>(&mut self, rules: I) -> Result<(), StoreError>
    where
        I: IntoIterator<Item = RuleRef<'a>>,
        I::IntoIter: ExactSizeIterator,
    {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        let rules = rules.into_iter();
        let count = rules.len();
        if count == 0 {
            return Ok(());
        }
        let mut next_rule = self.next_rule_handle;
        let buf = &mut self.buf;
        buf.clear();
        buf.resize(RECORD_HEADER, 0);
        let given = codec::encode_rules_add(buf, count, rules, |r| {
            fresh(0, "rule", r.handle, &mut next_rule)
        })?;
        if given != count {
            return Err(StoreError::InvalidChange {
                index: 0,
                reason: format!("the iterator said {count} rules and gave {given}"),
            });
        }
        self.write_record(self.next_port_handle, next_rule)
    }

    /// [`commit`](Store::commit) of one [`Change::RuleModify`] per `(handle, actions)`, with
    /// the actions borrowed from the caller instead of copied into each change: the daemon's
    /// fast path for large batches. The same record, the same durability.
    pub fn commit_modifies<'a>(
        &mut self,
        modified: impl IntoIterator<Item = (u64, &'a [u8])>,
    ) -> Result<(), StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        let buf = &mut self.buf;
        buf.clear();
        buf.resize(RECORD_HEADER, 0);
        for (handle, actions) in modified {
            codec::encode_rule_modify(buf, handle, actions);
        }
        if buf.len() == RECORD_HEADER {
            return Ok(());
        }
        self.write_record(self.next_port_handle, self.next_rule_handle)
    }

    /// Frames the record in `self.buf`, appends and syncs it, and moves the counters.
    fn write_record(&mut self, next_port: u64, next_rule: u64) -> Result<(), StoreError> {
        let header = frame::record_header(&self.buf[RECORD_HEADER..])
            .map_err(|bytes| StoreError::TooLarge { bytes })?;
        self.buf[..RECORD_HEADER].copy_from_slice(&header);
        let result = self.append();
        if self.buf.capacity() > KEEP_BUFFER {
            self.buf = Vec::new();
        }
        result?;
        self.next_port_handle = next_port;
        self.next_rule_handle = next_rule;
        Ok(())
    }

    /// Checks handle freshness; returns the counters after the batch.
    fn check(&self, changes: &[Change]) -> Result<(u64, u64), StoreError> {
        let (mut port, mut rule) = (self.next_port_handle, self.next_rule_handle);
        for (index, c) in changes.iter().enumerate() {
            match c {
                Change::PortAdd(p) => fresh(index, "port", p.handle, &mut port)?,
                Change::RulesAdd(rules) => {
                    for r in rules {
                        fresh(index, "rule", r.handle, &mut rule)?;
                    }
                }
                _ => {}
            }
        }
        Ok((port, rule))
    }

    /// Writes `self.buf` at the journal's end and syncs it; on failure cuts the journal back
    /// and poisons the store.
    fn append(&mut self) -> Result<(), StoreError> {
        let path = self.dir.join(JOURNAL);
        let result = self
            .journal
            .write_all(&self.buf)
            .map_err(|e| StoreError::io(&path, "write", e))
            .and_then(|()| {
                self.journal
                    .sync_data()
                    .map_err(|e| StoreError::io(&path, "fdatasync", e))
            });
        match result {
            Ok(()) => {
                self.journal_len += self.buf.len() as u64;
                Ok(())
            }
            Err(e) => {
                // Best effort: cut the partial record so this process's view stays sane; a
                // reopen would find it torn anyway. Either way no more commits.
                let _ = self.journal.set_len(self.journal_len);
                self.poisoned = true;
                Err(e)
            }
        }
    }

    /// Folds the journal into a new snapshot and starts an empty journal, so that opening
    /// replays the state once instead of its history. Crash-safe at every step: the snapshot
    /// is written under a temporary name, synced and renamed into place (then the directory
    /// is synced); the journal it supersedes is recognised by its older generation.
    ///
    /// Reads the store's own files (the store keeps no copy of the state in memory), so it
    /// costs about one [`Store::open`] plus writing the snapshot. A failure after the
    /// snapshot's rename poisons the store; reopening finishes the job.
    ///
    /// ```
    /// use sluice_store::{Change, Store};
    /// # let dir = std::env::temp_dir().join(format!("sluice-compact-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// let (mut store, _) = Store::open(&dir)?;
    /// for v in 1..=3 {
    ///     store.commit(&[Change::QuotaSet { name: "rules".into(), value: v * 1000 }])?;
    /// }
    /// let (journal, generation) = (store.journal_bytes(), store.generation());
    /// store.compact()?;
    /// assert!(store.journal_bytes() < journal); // a fresh journal: its header only
    /// assert!(store.generation() > generation);
    /// drop(store);
    /// let (store, state) = Store::open(&dir)?;
    /// assert_eq!(state.quotas["rules"], 3000); // the same state, from the snapshot
    /// assert!(store.recovery().is_clean());
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), sluice_store::StoreError>(())
    /// ```
    pub fn compact(&mut self) -> Result<(), StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        let mut state = State::default();
        let snapshot_path = self.dir.join(SNAPSHOT);
        if let Some(bytes) = read_optional(&snapshot_path)? {
            load_snapshot(&snapshot_path, &bytes, &mut state)?;
        }
        let journal_path = self.dir.join(JOURNAL);
        let bytes =
            fs::read(&journal_path).map_err(|e| StoreError::io(&journal_path, "read", e))?;
        let tail = replay(&bytes, &mut state, |payload, state| {
            codec::apply_payload(state, payload).map(|_| ())
        })
        .map_err(|b| StoreError::corrupt(&journal_path, b.offset as u64, b.reason))?;
        if let Tail::Torn { good_len, reason } = tail {
            return Err(StoreError::corrupt(&journal_path, good_len as u64, reason));
        }
        // What this process committed is authoritative for the counters.
        state.next_port_handle = state.next_port_handle.max(self.next_port_handle);
        state.next_rule_handle = state.next_rule_handle.max(self.next_rule_handle);

        let generation = self.generation + 1;
        let tmp = self.dir.join(SNAPSHOT_TMP);
        let snapshot_len = match write_snapshot(&tmp, generation, &state) {
            Ok(len) => len,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
        };
        #[cfg(test)]
        self.inject(Fault::SnapshotWritten)?;
        fs::rename(&tmp, &snapshot_path).map_err(|e| StoreError::io(&tmp, "rename", e))?;
        // From here on the old journal is superseded: on any failure, poison.
        let result = self.finish_compaction(generation);
        if result.is_err() {
            self.poisoned = true;
        }
        result?;
        self.snapshot_len = snapshot_len;
        Ok(())
    }

    fn finish_compaction(&mut self, generation: u64) -> Result<(), StoreError> {
        sync_dir(&self.dir)?;
        #[cfg(test)]
        self.inject(Fault::SnapshotRenamed)?;
        let dir = self.dir.clone();
        let journal_len = create_journal_with(&dir, generation, || {
            #[cfg(test)]
            self.inject(Fault::JournalWritten)?;
            Ok(())
        })?;
        self.journal = open_append(&self.dir.join(JOURNAL), journal_len)?;
        self.journal_len = journal_len;
        self.generation = generation;
        Ok(())
    }

    #[cfg(test)]
    fn inject(&self, at: Fault) -> Result<(), StoreError> {
        if self.fault == Some(at) {
            return Err(StoreError::io(
                &self.dir,
                "injected fault",
                std::io::Error::other(format!("{at:?}")),
            ));
        }
        Ok(())
    }
}

/// Checks that `handle` is fresh against `next` (and not `u64::MAX`) and moves `next` past it.
fn fresh(index: usize, what: &str, handle: u64, next: &mut u64) -> Result<(), StoreError> {
    if handle < *next || handle == u64::MAX {
        return Err(StoreError::InvalidChange {
            index,
            reason: format!("{what} handle {handle} is not fresh (the next unused is {next})"),
        });
    }
    *next = handle + 1;
    Ok(())
}

/// Scans a file's records, applying each payload with `apply`; decode errors become a
/// [`BadRecord`] at the record's offset.
fn replay(
    bytes: &[u8],
    state: &mut State,
    mut apply: impl FnMut(&[u8], &mut State) -> Result<(), codec::DecodeError>,
) -> Result<Tail, BadRecord> {
    frame::scan(bytes, |range| {
        let record = range.start - RECORD_HEADER;
        apply(&bytes[range], state).map_err(|e| BadRecord {
            offset: record,
            reason: format!(
                "record does not decode (at payload byte {}): {}",
                e.offset, e.reason
            ),
        })
    })
}

/// Loads a snapshot into `state` (which must be empty) and returns its generation.
fn load_snapshot(path: &Path, bytes: &[u8], state: &mut State) -> Result<u64, StoreError> {
    let generation = frame::parse_file_header(FileKind::Snapshot, bytes)
        .map_err(|r| StoreError::corrupt(path, 0, r))?;
    let mut end: Option<SnapshotEnd> = None;
    let tail = frame::scan(bytes, |range| {
        let record = range.start - RECORD_HEADER;
        if end.is_some() {
            return Err(BadRecord {
                offset: record,
                reason: "record after the snapshot's end record".into(),
            });
        }
        end = codec::apply_snapshot_payload(state, &bytes[range]).map_err(|e| BadRecord {
            offset: record,
            reason: format!(
                "record does not decode (at payload byte {}): {}",
                e.offset, e.reason
            ),
        })?;
        Ok(())
    })
    .map_err(|b| StoreError::corrupt(path, b.offset as u64, b.reason))?;
    if let Tail::Torn { good_len, reason } = tail {
        // A snapshot is renamed into place only once complete: a short one is corrupt.
        return Err(StoreError::corrupt(path, good_len as u64, reason));
    }
    let Some(end) = end else {
        return Err(StoreError::corrupt(
            path,
            bytes.len() as u64,
            "no end record",
        ));
    };
    let counts = (
        state.ports.len() as u64,
        state.rules.len() as u64,
        state.quotas.len() as u64,
    );
    if counts != (end.ports, end.rules, end.quotas) {
        return Err(StoreError::corrupt(
            path,
            bytes.len() as u64,
            format!(
                "holds {counts:?} ports, rules, quotas; its end record says {:?}",
                (end.ports, end.rules, end.quotas)
            ),
        ));
    }
    state.next_port_handle = state.next_port_handle.max(end.next_port_handle);
    state.next_rule_handle = state.next_rule_handle.max(end.next_rule_handle);
    Ok(generation)
}

/// Writes records to a new file, counting its length.
struct RecordWriter<'a> {
    file: File,
    path: &'a Path,
    len: u64,
    /// The record being built: a header placeholder, then the payload.
    record: Vec<u8>,
}

impl<'a> RecordWriter<'a> {
    fn create(path: &'a Path, file_header: &[u8]) -> Result<Self, StoreError> {
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(FILE_MODE)
            .open(path)
            .map_err(|e| StoreError::io(path, "create", e))?;
        file.write_all(file_header)
            .map_err(|e| StoreError::io(path, "write", e))?;
        Ok(RecordWriter {
            file,
            path,
            len: file_header.len() as u64,
            record: vec![0; RECORD_HEADER],
        })
    }

    fn payload(&mut self) -> &mut Vec<u8> {
        &mut self.record
    }

    /// Frames and writes the record built so far, if it has a payload.
    fn flush(&mut self) -> Result<(), StoreError> {
        if self.record.len() == RECORD_HEADER {
            return Ok(());
        }
        let header = frame::record_header(&self.record[RECORD_HEADER..])
            .map_err(|bytes| StoreError::TooLarge { bytes })?;
        self.record[..RECORD_HEADER].copy_from_slice(&header);
        self.file
            .write_all(&self.record)
            .map_err(|e| StoreError::io(self.path, "write", e))?;
        self.len += self.record.len() as u64;
        self.record.clear();
        self.record.resize(RECORD_HEADER, 0);
        Ok(())
    }

    /// Syncs data and metadata; returns the file's length.
    fn finish(mut self) -> Result<u64, StoreError> {
        self.flush()?;
        self.file
            .sync_all()
            .map_err(|e| StoreError::io(self.path, "fsync", e))?;
        Ok(self.len)
    }
}

/// Writes `state` as a snapshot at `generation` to `path` and syncs it; returns its length.
/// Records: the ports and quotas, the rules in chunks, then the end record with the counters
/// and the counts, which tells a complete snapshot from a cut one.
fn write_snapshot(path: &Path, generation: u64, state: &State) -> Result<u64, StoreError> {
    let mut w = RecordWriter::create(path, &frame::file_header(FileKind::Snapshot, generation))?;
    for port in state.ports.values() {
        codec::encode_change(w.payload(), &Change::PortAdd(port.clone()));
    }
    for (name, value) in &state.quotas {
        codec::encode_change(
            w.payload(),
            &Change::QuotaSet {
                name: name.clone(),
                value: *value,
            },
        );
    }
    w.flush()?;
    let mut rules = state.rules.values().peekable();
    while rules.peek().is_some() {
        let chunk: Vec<_> = rules.by_ref().take(SNAPSHOT_RULES_PER_RECORD).collect();
        let no_check = |_: &RuleRef<'_>| Ok::<(), std::convert::Infallible>(());
        let Ok(_) = codec::encode_rules_add(
            w.payload(),
            chunk.len(),
            chunk.into_iter().map(Rule::as_rule_ref),
            no_check,
        );
        w.flush()?;
    }
    codec::encode_snapshot_end(
        w.payload(),
        &SnapshotEnd {
            next_port_handle: state.next_port_handle,
            next_rule_handle: state.next_rule_handle,
            ports: state.ports.len() as u64,
            rules: state.rules.len() as u64,
            quotas: state.quotas.len() as u64,
        },
    );
    w.finish()
}

/// Creates an empty journal at `generation` atomically (temporary file, sync, rename, sync of
/// the directory); `before_rename` is the fault-injection point. Returns its length.
fn create_journal_with(
    dir: &Path,
    generation: u64,
    before_rename: impl FnOnce() -> Result<(), StoreError>,
) -> Result<u64, StoreError> {
    let tmp = dir.join(JOURNAL_TMP);
    let len =
        RecordWriter::create(&tmp, &frame::file_header(FileKind::Journal, generation))?.finish()?;
    before_rename()?;
    let path = dir.join(JOURNAL);
    fs::rename(&tmp, &path).map_err(|e| StoreError::io(&tmp, "rename", e))?;
    sync_dir(dir)?;
    Ok(len)
}

fn create_journal(dir: &Path, generation: u64) -> Result<u64, StoreError> {
    create_journal_with(dir, generation, || Ok(()))
}

/// The file's bytes, or `None` when it does not exist.
fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    match fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::io(path, "read", e)),
    }
}

fn open_append(path: &Path, len: u64) -> Result<File, StoreError> {
    let mut f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| StoreError::io(path, "open", e))?;
    f.seek(SeekFrom::Start(len))
        .map_err(|e| StoreError::io(path, "seek", e))?;
    Ok(f)
}

fn truncate(path: &Path, len: u64) -> Result<(), StoreError> {
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| StoreError::io(path, "open", e))?;
    f.set_len(len)
        .map_err(|e| StoreError::io(path, "truncate", e))?;
    f.sync_all().map_err(|e| StoreError::io(path, "fsync", e))
}

/// Creates `dir` and any missing parents (mode 0750), and syncs each parent that gained an
/// entry, so that a store whose first commit was acknowledged does not vanish with its
/// directory in a crash.
fn create_dir_durably(dir: &Path) -> Result<(), StoreError> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut missing = vec![dir];
    let mut parent = dir.parent();
    while let Some(p) = parent {
        if p.as_os_str().is_empty() || p.is_dir() {
            break;
        }
        missing.push(p);
        parent = p.parent();
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(|e| StoreError::io(dir, "create directory", e))?;
    for d in missing.iter().rev() {
        match d.parent() {
            Some(p) if !p.as_os_str().is_empty() => sync_dir(p)?,
            _ => sync_dir(Path::new("."))?,
        }
    }
    Ok(())
}

/// Makes renames and creations in `dir` durable.
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io(dir, "fsync directory", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Port, Rule};

    fn temp_dir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("sluice-store-unit-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    fn rule(handle: u64) -> Rule {
        Rule {
            handle,
            priority: (handle % 7) as u32,
            matches: format!("ip,nw_dst=10.0.{}.{}", handle >> 8, handle & 255).into_bytes(),
            actions: b"output:1".to_vec(),
        }
    }

    /// A store with a port, a quota and rules over a compaction and a journal tail.
    fn populated(dir: &Path) -> State {
        let (mut store, _) = Store::open(dir).unwrap();
        store
            .commit(&[
                Change::PortAdd(Port {
                    handle: 1,
                    name: "tap0".into(),
                    number: 1,
                    kind: "tap".into(),
                    settings: Default::default(),
                    features: Default::default(),
                }),
                Change::QuotaSet {
                    name: "rules".into(),
                    value: 100,
                },
            ])
            .unwrap();
        store
            .commit(&[Change::RulesAdd((10..20).map(rule).collect())])
            .unwrap();
        store.commit(&[Change::RulesDel(vec![19, 12])]).unwrap();
        store.compact().unwrap();
        store
            .commit(&[Change::RulesAdd((20..25).map(rule).collect())])
            .unwrap();
        store.commit(&[Change::RulesDel(vec![24])]).unwrap();
        drop(store);
        let (_, state) = Store::open(dir).unwrap();
        assert_eq!(state.rules.len(), 12);
        assert_eq!(state.next_rule_handle, 25);
        state
    }

    #[test]
    fn compaction_keeps_the_state_and_shrinks_the_journal() {
        let dir = temp_dir("compact");
        let before = populated(&dir);
        let (mut store, _) = Store::open(&dir).unwrap();
        let journal_before = store.journal_bytes();
        store.compact().unwrap();
        assert_eq!(store.generation(), 2);
        assert!(store.journal_bytes() < journal_before);
        assert_eq!(store.journal_bytes(), frame::FILE_HEADER as u64);
        // Commits after a compaction land in the new journal.
        store.commit(&[Change::RulesDel(vec![10])]).unwrap();
        drop(store);
        let (store, after) = Store::open(&dir).unwrap();
        assert!(store.recovery().is_clean());
        let mut expected = before;
        expected.apply(Change::RulesDel(vec![10]));
        assert_eq!(after, expected);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_crash_at_any_step_of_compaction_leaves_a_valid_store() {
        for fault in [
            Fault::SnapshotWritten,
            Fault::SnapshotRenamed,
            Fault::JournalWritten,
        ] {
            let dir = temp_dir(&format!("fault-{fault:?}"));
            let before = populated(&dir);
            let (mut store, _) = Store::open(&dir).unwrap();
            store.fault = Some(fault);
            let e = store.compact().unwrap_err();
            assert!(e.to_string().contains("injected fault"), "{e}");
            // After the snapshot's rename the old journal is superseded: no more commits.
            let poisoned = fault != Fault::SnapshotWritten;
            assert_eq!(
                matches!(
                    store.commit(&[Change::RulesDel(vec![11])]),
                    Err(StoreError::Poisoned)
                ),
                poisoned,
                "{fault:?}"
            );
            drop(store);
            let (mut store, after) = Store::open(&dir).unwrap();
            let mut expected = before.clone();
            if !poisoned {
                expected.apply(Change::RulesDel(vec![11]));
            }
            assert_eq!(after, expected, "{fault:?}");
            let r = store.recovery().clone();
            assert_eq!(r.superseded_journal, poisoned, "{fault:?}");
            assert_eq!(
                r.removed_temp_files.len(),
                usize::from(fault != Fault::SnapshotRenamed),
                "{fault:?}: {r:?}"
            );
            // And the repaired store goes on working.
            store.commit(&[Change::RulesDel(vec![13])]).unwrap();
            drop(store);
            let (_, again) = Store::open(&dir).unwrap();
            expected.apply(Change::RulesDel(vec![13]));
            assert_eq!(again, expected, "{fault:?}");
            fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[test]
    fn a_truncated_snapshot_is_corrupt_not_half_loaded() {
        let dir = temp_dir("snapcut");
        populated(&dir);
        let snap = dir.join(SNAPSHOT);
        let len = fs::metadata(&snap).unwrap().len();
        for cut in [len - 1, len - 20, FILE_HEADER_U64 + 5, FILE_HEADER_U64] {
            let bytes = fs::read(&snap).unwrap();
            let f = OpenOptions::new().write(true).open(&snap).unwrap();
            f.set_len(cut).unwrap();
            drop(f);
            match Store::open(&dir) {
                Err(StoreError::Corrupt { path, .. }) => assert_eq!(path, snap),
                other => panic!("cut at {cut}: {other:?}"),
            }
            fs::write(&snap, bytes).unwrap();
        }
        assert!(Store::open(&dir).is_ok());
        fs::remove_dir_all(&dir).unwrap();
    }

    const FILE_HEADER_U64: u64 = frame::FILE_HEADER as u64;
}
