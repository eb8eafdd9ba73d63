//! What the store keeps in memory to decide a call without reading its
//! file: the counters it has used, every open reservation (by deadline,
//! with the claims they hold), the records closed since they were last
//! posted, the runs and adjustments it has seen, and which exec ids the
//! file holds.
//!
//! Only this process writes the file, and every change to the books is
//! decided here first, so what the desk holds is the file plus the changes
//! not yet posted to it. What it does not hold it reads from the file, on a
//! connection of its own: a counter or a run let go of once posted, and a
//! closed record that a retry or a late settle asks for. The set of known
//! exec ids tells a new call from a retry without a read.
//!
//! The rules (`books`) read and change the books through the desk. Each
//! change is made here at once and kept in a draft; [`Desk::commit`]
//! appends the draft to the journal as one record, and only then is the
//! call answered. If the append fails, [`Desk::rollback`] undoes the
//! draft, so a refused call leaves no trace.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc::Sender;

use hashbrown::HashMap;
use rusqlite::Connection;

use super::change::{Adjusted, Change, Entry, Row, ROW_COLUMNS};
use super::journal::{Journal, Logged};
use super::writer::Msg;
use crate::budget::books::{moved, BookState, Counter, Deadlines, Record};
use crate::budget::{AppliedAdjustment, LedgerEntry, OpenHold, ScopeKind, StoreError};
use crate::money::{UsdMicros, UsdMicrosDelta};

mod state;

use state::known_hash;

type Sql<T> = rusqlite::Result<T>;

/// Past this many counters (or runs), those already posted are let go
/// after the next posting: they are read again from the file if needed.
const MAX_KEPT: usize = 65_536;

/// While the file refuses its postings, reserves are still answered from
/// the journal, up to this many records waiting: past it, they fail closed
/// until the file takes them again.
pub(super) const MAX_BACKLOG: usize = 100_000;

/// What one posting takes: the journal records written since the last,
/// each the changes of one call's decision, as the journal holds them.
/// Their payloads share one buffer, grown by the threads that decide and
/// freed by the writer once per posting: a buffer per record would be
/// allocated on one thread and freed on another, which glibc's arenas
/// make costly.
#[derive(Debug, Default)]
pub(super) struct Batch {
    bytes: Vec<u8>,
    /// Each record's sequence number and where its payload ends.
    records: Vec<(u64, usize)>,
}

impl Batch {
    /// The batch of `records`, in their order.
    pub(super) fn of(records: Vec<Logged>) -> Batch {
        let mut batch = Batch::default();
        for record in records {
            batch.push(record.seq, &record.payload);
        }
        batch
    }

    fn push(&mut self, seq: u64, payload: &[u8]) {
        self.bytes.extend_from_slice(payload);
        self.records.push((seq, self.bytes.len()));
    }

    pub(super) fn len(&self) -> usize {
        self.records.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub(super) fn last_seq(&self) -> Option<u64> {
        self.records.last().map(|&(seq, _)| seq)
    }

    /// Each record's sequence number and payload, in order.
    pub(super) fn records(&self) -> impl Iterator<Item = (u64, &[u8])> {
        let mut start = 0;
        self.records.iter().map(move |&(seq, end)| {
            let payload = &self.bytes[start..end];
            start = end;
            (seq, payload)
        })
    }
}

pub(super) struct Desk {
    counters: HashMap<String, Kept>,
    /// Every open reservation, and every record changed since the last
    /// posting.
    records: HashMap<String, Held>,
    /// The open reservations, by deadline.
    deadlines: Deadlines,
    /// Idempotency claim → the open reservation holding it.
    claims: HashMap<String, String>,
    runs: HashMap<String, Run>,
    /// Customers seen, by scope id (`<key>/<customer>`): those touched
    /// since the last posting, and those read from the file.
    customers: HashMap<String, Seen>,
    /// Adjustments applied since the last posting.
    adjustments: HashMap<String, (AppliedAdjustment, u64)>,
    /// A hash of every exec id the file or the desk has a record of: a
    /// retry horizon of calls, so it grows without ever moving them all at
    /// once (a table that doubles in one insert would hold every call up
    /// behind the lock while it rehashes).
    known: griddle::HashSet<u64>,
    file: Connection,
    journal: Journal,
    /// Records appended to the journal and not yet taken by a posting.
    pending: Batch,
    /// A posting let go of what the desk held only until it was posted,
    /// which the next call's thread then frees.
    let_go: bool,
    next_seq: u64,
    posted: u64,
    draft: Vec<Change>,
    /// The draft's journal record, in room kept from call to call.
    encoded: Vec<u8>,
    undo: Vec<Undo>,
    /// Why the last posting failed, until one succeeds.
    refusing: Option<String>,
    /// The file says the store stopped cleanly (see
    /// [`Desk::mark_stopped_clean`]).
    stopped_clean: bool,
    max_backlog: usize,
    wake: Sender<Msg>,
    label: String,
}

/// A counter as the desk keeps it.
#[derive(Clone, Copy, Debug)]
struct Kept {
    spent: UsdMicros,
    reserved: UsdMicros,
    /// The journal record that last moved it; 0 if read from the file.
    seq: u64,
}

#[derive(Clone, Debug)]
struct Held {
    record: Record,
    seq: u64,
}

/// A customer's last call as the desk keeps it; `None` once forgotten and
/// not yet posted.
#[derive(Clone, Copy, Debug)]
struct Seen {
    last_call: Option<i64>,
    seq: u64,
}

#[derive(Clone, Copy, Debug)]
struct Run {
    cap: Option<UsdMicros>,
    last_used: i64,
    seq: u64,
}

/// How to take back one change of the draft.
enum Undo {
    Record(String, Option<Box<Held>>),
    Counter(String, Option<Kept>),
    Claim(String, Option<String>),
    Run(String, Option<Run>),
    Customer(String, Option<Seen>),
    Known(u64),
    Adjustment(String),
}

impl Desk {
    /// The desk of a file whose journal is all posted: its open
    /// reservations, their claims and every exec id it holds, read now.
    pub(super) fn load(
        file: Connection,
        journal: Journal,
        posted: u64,
        wake: Sender<Msg>,
        label: String,
    ) -> Sql<Desk> {
        let mut desk = Desk {
            counters: HashMap::new(),
            records: HashMap::new(),
            deadlines: Deadlines::default(),
            claims: HashMap::new(),
            runs: HashMap::new(),
            customers: HashMap::new(),
            adjustments: HashMap::new(),
            known: griddle::HashSet::new(),
            file,
            journal,
            pending: Batch::default(),
            let_go: false,
            next_seq: posted + 1,
            posted,
            draft: Vec::new(),
            encoded: Vec::new(),
            undo: Vec::new(),
            refusing: None,
            stopped_clean: false,
            max_backlog: MAX_BACKLOG,
            wake,
            label,
        };
        let mut ids = desk.file.prepare("SELECT exec_id FROM reservations")?;
        let mut rows = ids.query([])?;
        while let Some(row) = rows.next()? {
            desk.known.insert(known_hash(row.get_ref(0)?.as_str()?));
        }
        drop(rows);
        drop(ids);
        let open: Vec<Row> = desk
            .file
            .prepare(&format!(
                "SELECT {ROW_COLUMNS} FROM reservations WHERE state = 'open'"
            ))?
            .query_map([], Row::from_sql)?
            .collect::<Sql<_>>()?;
        for row in open {
            let record = Record::from_row(&row)?;
            desk.set_record(&row.exec_id, Some(Held { record, seq: 0 }));
        }
        let claims: Vec<(String, String)> = desk
            .file
            .prepare("SELECT claim, exec_id FROM claims")?
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<Sql<_>>()?;
        desk.claims.extend(claims);
        Ok(desk)
    }

    /// Up to `limit` of `key`'s customers with an id after `after`: the
    /// file's, with what the desk changed since its last posting over them.
    pub(super) fn customers_of(
        &self,
        key: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Sql<Vec<(String, i64)>> {
        let after = after.unwrap_or("");
        let mut seen: BTreeMap<String, i64> = self
            .file
            .prepare_cached(
                "SELECT customer, last_call FROM customers
                  WHERE key = ?1 AND customer > ?2 ORDER BY customer LIMIT ?3",
            )?
            .query_map(
                (key, after, i64::try_from(limit).unwrap_or(i64::MAX)),
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?
            .collect::<Sql<_>>()?;
        let prefix = format!("{key}/");
        for (id, kept) in &self.customers {
            let Some(customer) = id.strip_prefix(&prefix) else {
                continue;
            };
            if customer <= after {
                continue;
            }
            match kept.last_call {
                Some(last_call) => {
                    seen.insert(customer.to_owned(), last_call);
                }
                None => {
                    seen.remove(customer);
                }
            }
        }
        Ok(seen.into_iter().take(limit).collect())
    }

    /// Up to `limit` open reservations, oldest first (then by exec id).
    pub(super) fn open_holds(&self, limit: usize) -> Vec<OpenHold> {
        let mut open: Vec<(&String, &Record)> = self
            .records
            .iter()
            .map(|(exec_id, held)| (exec_id, &held.record))
            .filter(|(_, record)| record.is_open())
            .collect();
        open.sort_by(|a, b| (a.1.started_at, a.0).cmp(&(b.1.started_at, b.0)));
        open.into_iter()
            .take(limit)
            .map(|(exec_id, record)| OpenHold {
                exec_id: exec_id.clone(),
                key: record.key.id.clone(),
                org: record.org.as_ref().map(|org| org.id.clone()),
                run: record.run_id(),
                model: record.model.clone(),
                amount: record.amount,
                started_at: super::record::from_millis(record.started_at),
                deadline: super::record::from_millis(record.deadline),
            })
            .collect()
    }

    /// How many reservations are open.
    pub(super) fn open_count(&self) -> usize {
        self.deadlines.len()
    }

    /// How many reservations are open and the sum of their amounts.
    pub(super) fn open_sum(&self) -> (usize, UsdMicros) {
        self.deadlines
            .exec_ids()
            .filter_map(|exec_id| self.records.get(exec_id))
            .fold((0, 0), |(count, sum), held| {
                (count + 1, sum.saturating_add(held.record.amount))
            })
    }

    /// Why new reservations are refused now, if they are: the file has
    /// refused its postings for longer than the journal may hold.
    pub(super) fn refusal(&self) -> Option<StoreError> {
        let why = self.refusing.as_ref()?;
        (self.pending.len() >= self.max_backlog).then(|| {
            StoreError::Unavailable(format!(
                "sqlite store {}: {why} ({} journal records wait for the file)",
                self.label,
                self.pending.len()
            ))
        })
    }

    // === the draft ===

    /// Appends the draft to the journal as one record; it then waits for
    /// the next posting. If the journal cannot take it, the draft is
    /// undone and nothing of it happened.
    pub(super) fn commit(&mut self) -> Result<(), StoreError> {
        if self.draft.is_empty() {
            self.undo.clear();
            self.let_go_of_posted();
            return Ok(());
        }
        if let Err(error) = super::change::encode(&self.draft, &mut self.encoded) {
            self.rollback();
            return Err(StoreError::Unavailable(format!(
                "sqlite store {}: cannot write its journal: {error}",
                self.label
            )));
        }
        if self.stopped_clean {
            if let Err(error) = self.write_stopped_clean(None) {
                self.rollback();
                return Err(StoreError::Unavailable(format!(
                    "sqlite store {}: cannot write its file: {error}",
                    self.label
                )));
            }
            self.stopped_clean = false;
        }
        if let Err(error) = self
            .journal
            .append(self.next_seq, &self.encoded, self.posted)
        {
            self.rollback();
            tracing::error!(file = %self.label, %error, "cannot write the store's journal; the call was refused and nothing was changed");
            return Err(StoreError::Unavailable(format!(
                "sqlite store {}: cannot write its journal: {error}",
                self.label
            )));
        }
        let first = self.pending.is_empty();
        // The writer reads the changes back from the bytes, so what one
        // thread allocates is not freed by the other.
        self.draft.clear();
        self.pending.push(self.next_seq, &self.encoded);
        self.next_seq += 1;
        self.undo.clear();
        self.let_go_of_posted();
        if first {
            // The writer waits for it a moment, to post more at once.
            let _ = self.wake.send(Msg::Wake);
        }
        Ok(())
    }

    /// Undoes the draft.
    pub(super) fn rollback(&mut self) {
        self.draft.clear();
        while let Some(undo) = self.undo.pop() {
            match undo {
                Undo::Record(exec_id, old) => {
                    self.set_record(&exec_id, old.map(|held| *held));
                }
                Undo::Counter(key, old) => match old {
                    Some(counter) => {
                        self.counters.insert(key, counter);
                    }
                    None => {
                        self.counters.remove(&key);
                    }
                },
                Undo::Claim(claim, old) => match old {
                    Some(exec_id) => {
                        self.claims.insert(claim, exec_id);
                    }
                    None => {
                        self.claims.remove(&claim);
                    }
                },
                Undo::Run(id, old) => match old {
                    Some(run) => {
                        self.runs.insert(id, run);
                    }
                    None => {
                        self.runs.remove(&id);
                    }
                },
                Undo::Customer(id, old) => match old {
                    Some(seen) => {
                        self.customers.insert(id, seen);
                    }
                    None => {
                        self.customers.remove(&id);
                    }
                },
                Undo::Known(hash) => {
                    self.known.remove(&hash);
                }
                Undo::Adjustment(exec_id) => {
                    self.adjustments.remove(&exec_id);
                }
            }
        }
    }

    // === posting ===

    /// The records written since the last posting, for the next one.
    pub(super) fn take_batch(&mut self) -> Option<Batch> {
        if self.pending.is_empty() {
            return None;
        }
        Some(std::mem::take(&mut self.pending))
    }

    /// The batch is in the file: what the desk kept only because it was
    /// not posted may go, and its journal records may be written over.
    pub(super) fn posted(&mut self, batch: &Batch) {
        if let Some(seq) = batch.last_seq() {
            self.posted = seq;
        }
        if self.refusing.take().is_some() {
            tracing::info!(file = %self.label, "the store's file takes its postings again");
        }
        self.let_go = true;
    }

    /// Frees what the desk kept only because it was not posted, once per
    /// posting, on the thread of a call: it was allocated on one.
    fn let_go_of_posted(&mut self) {
        if !std::mem::take(&mut self.let_go) {
            return;
        }
        let posted = self.posted;
        self.records
            .retain(|_, held| held.record.is_open() || held.seq > posted);
        self.adjustments.retain(|_, (_, seq)| *seq > posted);
        if self.counters.len() > MAX_KEPT {
            self.counters.retain(|_, counter| counter.seq > posted);
        }
        if self.runs.len() > MAX_KEPT {
            self.runs.retain(|_, run| run.seq > posted);
        }
        if self.customers.len() > MAX_KEPT {
            self.customers.retain(|_, seen| seen.seq > posted);
        }
    }

    /// If every record appended is posted, records so in the file
    /// (`meta.stopped_clean_at`): its journal holds nothing the file
    /// lacks, and a start-up that finds it gone loses nothing. The next
    /// append takes the mark back first, so it is never there while the
    /// journal holds a call the file lacks.
    pub(super) fn mark_stopped_clean(&mut self) -> Sql<()> {
        let all_posted =
            self.pending.is_empty() && self.refusing.is_none() && self.next_seq == self.posted + 1;
        if all_posted {
            self.write_stopped_clean(Some(self.posted))?;
            self.stopped_clean = true;
        }
        Ok(())
    }

    /// Writes the mark through the desk's connection, which otherwise only
    /// reads: under the desk's lock, so no call is appended meanwhile.
    fn write_stopped_clean(&self, seq: Option<u64>) -> Sql<()> {
        self.file.pragma_update(None, "query_only", false)?;
        let written = super::schema::set_stopped_clean_at(&self.file, seq);
        self.file.pragma_update(None, "query_only", true)?;
        written
    }

    /// The file refused a posting: the batch stays in the journal, to be
    /// posted again.
    pub(super) fn posting_failed(&mut self, error: &str) {
        if self.refusing.is_none() {
            tracing::error!(file = %self.label, %error, "the store's file refuses its postings; calls are kept in the journal meanwhile");
        }
        self.refusing = Some(error.to_owned());
    }

    /// The file forgot these records (their retry horizon passed), unless
    /// a change not yet posted brings one back.
    pub(super) fn forget_known(&mut self, exec_ids: &[String]) {
        for exec_id in exec_ids {
            if !self.records.contains_key(exec_id) {
                self.known.remove(&known_hash(exec_id));
            }
        }
    }

    #[cfg(test)]
    pub(super) fn set_max_backlog(&mut self, records: usize) {
        self.max_backlog = records;
    }

    #[cfg(test)]
    pub(super) fn set_journal_room(&mut self, room: Option<u64>) {
        self.journal.set_room(room);
    }

    /// Keeps `record` in `records` under `exec_id` (or removes it), with
    /// its deadline listed while it is open; returns what was there.
    fn set_record(&mut self, exec_id: &str, new: Option<Held>) -> Option<Held> {
        let old = match new {
            Some(held) => self.records.insert(exec_id.to_owned(), held),
            None => self.records.remove(exec_id),
        };
        if let Some(old) = old.as_ref().filter(|old| old.record.is_open()) {
            self.deadlines.remove(old.record.deadline, exec_id);
        }
        if let Some(new) = self
            .records
            .get(exec_id)
            .filter(|held| held.record.is_open())
        {
            self.deadlines.insert(new.record.deadline, exec_id);
        }
        old
    }
}
