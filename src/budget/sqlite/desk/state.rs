//! The desk as the booking rules see it: [`BookState`] over the desk's
//! maps, reading from the file what the desk let go of, and putting every
//! change into the draft its commit journals.

use std::hash::BuildHasher;

use rusqlite::OptionalExtension;

use super::*;
use crate::budget::caps::customer_scope_id;
use crate::budget::sqlite::counters::{self, key_of};

/// The rules (`budget::books`) decide on the desk: what it does not hold
/// it reads from the file, and every change goes into the draft.
impl BookState for Desk {
    type Error = rusqlite::Error;

    /// The record of `exec_id`: from memory, or from the file when it
    /// knows the id.
    fn record(&mut self, exec_id: &str) -> Sql<Option<Record>> {
        if let Some(held) = self.records.get(exec_id) {
            return Ok(Some(held.record.clone()));
        }
        if !self.known.contains(&known_hash(exec_id)) {
            return Ok(None);
        }
        Record::load(&self.file, exec_id)
    }

    /// The open reservation holding `claim`, if any.
    fn claimed_until(&self, claim: &str) -> Option<i64> {
        let exec_id = self.claims.get(claim)?;
        self.records
            .get(exec_id)
            .map(|held| &held.record)
            .filter(|record| record.is_open())
            .map(|record| record.deadline)
    }

    /// `(spent, reserved)` of one scope and period.
    fn counter(&mut self, kind: ScopeKind, id: &str, period_id: &str) -> Sql<Counter> {
        let counter = counter_entry(&mut self.counters, &self.file, kind, id, period_id)?;
        Ok(Counter {
            spent: counter.spent,
            reserved: counter.reserved,
        })
    }

    /// The cap a run's first call fixed (`Some(None)`: not capped), or
    /// `None` for a run never seen.
    fn run_cap(&mut self, id: &str) -> Sql<Option<Option<UsdMicros>>> {
        Ok(run_entry(&mut self.runs, &self.file, id)?.map(|run| run.cap))
    }

    /// The runs not used since `cutoff` (in memory or in the file).
    fn runs_idle_since(&mut self, cutoff: i64) -> Sql<Vec<String>> {
        let mut ids: BTreeSet<String> = self
            .file
            .prepare_cached("SELECT id FROM runs WHERE last_used <= ?1")?
            .query_map([cutoff], |row| row.get(0))?
            .collect::<Sql<_>>()?;
        ids.extend(
            self.runs
                .iter()
                .filter(|(_, run)| run.last_used <= cutoff)
                .map(|(id, _)| id.clone()),
        );
        let mut idle = Vec::new();
        for id in ids {
            // The desk's view, which may be newer than the file's.
            if run_entry(&mut self.runs, &self.file, &id)?
                .is_some_and(|run| run.last_used <= cutoff)
            {
                idle.push(id);
            }
        }
        Ok(idle)
    }

    fn deadlines(&self) -> &Deadlines {
        &self.deadlines
    }

    /// The first answer of an adjustment already applied, if any.
    fn adjustment(&mut self, exec_id: &str) -> Sql<Option<AppliedAdjustment>> {
        if let Some((applied, _)) = self.adjustments.get(exec_id) {
            return Ok(Some(applied.clone()));
        }
        self.file
            .prepare_cached(
                "SELECT key_id, org_id, key_period_id, org_period_id, key_spent_usd_micros
                   FROM adjustments WHERE exec_id = ?1",
            )?
            .query_row([exec_id], |row| {
                Ok(AppliedAdjustment {
                    key: row.get(0)?,
                    org: row.get(1)?,
                    key_period_id: row.get(2)?,
                    org_period_id: row.get(3)?,
                    key_spent: row.get(4)?,
                })
            })
            .optional()
    }

    /// The record of `exec_id` is now `record`.
    fn put(&mut self, exec_id: &str, record: Record) {
        let row = record.row(exec_id);
        let old = self.set_record(
            exec_id,
            Some(Held {
                record,
                seq: self.next_seq,
            }),
        );
        self.undo
            .push(Undo::Record(exec_id.to_owned(), old.map(Box::new)));
        let hash = known_hash(exec_id);
        if self.known.insert(hash) {
            self.undo.push(Undo::Known(hash));
        }
        self.draft.push(Change::Put(Box::new(row)));
    }

    /// Moves one counter by signed amounts, never below zero.
    fn move_counter(
        &mut self,
        kind: ScopeKind,
        id: &str,
        period_id: &str,
        spent: UsdMicrosDelta,
        reserved: UsdMicrosDelta,
    ) -> Sql<()> {
        let seq = self.next_seq;
        let counter = counter_entry(&mut self.counters, &self.file, kind, id, period_id)?;
        let before = *counter;
        counter.spent = moved(counter.spent, spent);
        counter.reserved = moved(counter.reserved, reserved);
        counter.seq = seq;
        self.undo
            .push(Undo::Counter(key_of(kind, id, period_id), Some(before)));
        self.draft.push(Change::Move {
            kind,
            id: id.to_owned(),
            period: period_id.to_owned(),
            spent,
            reserved,
        });
        Ok(())
    }

    fn book(&mut self, entry: LedgerEntry, key_period: &str, org_period: Option<&str>) {
        self.draft
            .push(Change::Book(Entry::of(entry, key_period, org_period)));
    }

    /// `exec_id`, just opened, holds `claim`.
    fn take_claim(&mut self, claim: &str, exec_id: &str) {
        let old = self.claims.insert(claim.to_owned(), exec_id.to_owned());
        self.undo.push(Undo::Claim(claim.to_owned(), old));
        self.draft.push(Change::Claim {
            claim: claim.to_owned(),
            exec_id: exec_id.to_owned(),
        });
    }

    /// `exec_id`, closing, lets go of `claim` unless another holds it now.
    fn release_claim(&mut self, claim: &str, exec_id: &str) {
        if self
            .claims
            .get(claim)
            .is_some_and(|holder| holder == exec_id)
        {
            let old = self.claims.remove(claim);
            self.undo.push(Undo::Claim(claim.to_owned(), old));
        }
        self.draft.push(Change::Release {
            claim: claim.to_owned(),
            exec_id: exec_id.to_owned(),
        });
    }

    /// A call of run `id` at `at`; the first one fixes its cap.
    fn touch_run(&mut self, id: &str, cap: Option<UsdMicros>, at: i64) -> Sql<()> {
        let seq = self.next_seq;
        let known = run_entry(&mut self.runs, &self.file, id)?.copied();
        let run = match known {
            Some(run) => Run {
                last_used: run.last_used.max(at),
                seq,
                ..run
            },
            None => Run {
                cap,
                last_used: at,
                seq,
            },
        };
        self.runs.insert(id.to_owned(), run);
        self.undo.push(Undo::Run(id.to_owned(), known));
        self.draft.push(Change::Run {
            id: id.to_owned(),
            cap,
            at,
        });
        Ok(())
    }

    /// Forgets run `id` and its counter.
    fn forget_run(&mut self, id: &str) {
        let run = self.runs.remove(id);
        self.undo.push(Undo::Run(id.to_owned(), run));
        let key = key_of(ScopeKind::Run, id, "total");
        let counter = self.counters.remove(&key);
        self.undo.push(Undo::Counter(key, counter));
        self.draft.push(Change::ForgetRun { id: id.to_owned() });
    }

    /// A call of `key`'s customer `customer` at `at`.
    fn touch_customer(&mut self, key: &str, customer: &str, at: i64) -> Sql<()> {
        let id = customer_scope_id(key, customer);
        let known = customer_entry(&mut self.customers, &self.file, &id)?.copied();
        let last_call = known
            .and_then(|seen| seen.last_call)
            .map_or(at, |last| last.max(at));
        self.customers.insert(
            id.clone(),
            Seen {
                last_call: Some(last_call),
                seq: self.next_seq,
            },
        );
        self.undo.push(Undo::Customer(id, known));
        self.draft.push(Change::Customer {
            key: key.to_owned(),
            customer: customer.to_owned(),
            at,
        });
        Ok(())
    }

    /// The customers whose last call came at or before `cutoff` (in
    /// memory or in the file).
    fn customers_idle_since(&mut self, cutoff: i64) -> Sql<Vec<(String, String)>> {
        let mut ids: BTreeSet<String> = self
            .file
            .prepare_cached("SELECT key, customer FROM customers WHERE last_call <= ?1")?
            .query_map([cutoff], |row| {
                Ok(customer_scope_id(
                    &row.get::<_, String>(0)?,
                    &row.get::<_, String>(1)?,
                ))
            })?
            .collect::<Sql<_>>()?;
        ids.extend(
            self.customers
                .iter()
                .filter(|(_, seen)| seen.last_call.is_some_and(|last| last <= cutoff))
                .map(|(id, _)| id.clone()),
        );
        let mut idle = Vec::new();
        for id in ids {
            // The desk's view, which may be newer than the file's.
            let last_call = customer_entry(&mut self.customers, &self.file, &id)?
                .and_then(|seen| seen.last_call);
            if last_call.is_some_and(|last| last <= cutoff) {
                if let Some((key, customer)) = id.split_once('/') {
                    idle.push((key.to_owned(), customer.to_owned()));
                }
            }
        }
        Ok(idle)
    }

    /// Forgets `key`'s customer `customer` and every counter of its scope.
    fn forget_customer(&mut self, key: &str, customer: &str) {
        let id = customer_scope_id(key, customer);
        let old = self.customers.insert(
            id.clone(),
            Seen {
                last_call: None,
                seq: self.next_seq,
            },
        );
        self.undo.push(Undo::Customer(id.clone(), old));
        let prefix = key_of(ScopeKind::Customer, &id, "");
        let dropped: Vec<String> = self
            .counters
            .keys()
            .filter(|counter| counter.starts_with(&prefix))
            .cloned()
            .collect();
        for counter in dropped {
            let kept = self.counters.remove(&counter);
            self.undo.push(Undo::Counter(counter, kept));
        }
        self.draft.push(Change::ForgetCustomer {
            key: key.to_owned(),
            customer: customer.to_owned(),
        });
    }

    fn adjusted(&mut self, exec_id: &str, applied: AppliedAdjustment, forget_at: i64) {
        let row = Adjusted {
            exec_id: exec_id.to_owned(),
            key_id: applied.key.clone(),
            org_id: applied.org.clone(),
            key_period_id: applied.key_period_id.clone(),
            org_period_id: applied.org_period_id.clone(),
            key_spent: applied.key_spent,
            forget_at,
        };
        self.adjustments
            .insert(exec_id.to_owned(), (applied, self.next_seq));
        self.undo.push(Undo::Adjustment(exec_id.to_owned()));
        self.draft.push(Change::Adjusted(row));
    }
}

/// The counter of one scope and period, read from the file the first time.
fn counter_entry<'a>(
    counters: &'a mut HashMap<String, Kept>,
    file: &Connection,
    kind: ScopeKind,
    id: &str,
    period_id: &str,
) -> Sql<&'a mut Kept> {
    use hashbrown::hash_map::Entry;
    Ok(match counters.entry(key_of(kind, id, period_id)) {
        Entry::Occupied(found) => found.into_mut(),
        Entry::Vacant(missing) => {
            let (spent, reserved) = counters::read(file, kind, id, period_id)?.unwrap_or_default();
            missing.insert(Kept {
                spent,
                reserved,
                seq: 0,
            })
        }
    })
}

/// A customer as the desk or the file knows it (`last_call` `None`:
/// forgotten, not yet posted); `None` for one never seen.
fn customer_entry<'a>(
    customers: &'a mut HashMap<String, Seen>,
    file: &Connection,
    id: &str,
) -> Sql<Option<&'a Seen>> {
    if !customers.contains_key(id) {
        let Some((key, customer)) = id.split_once('/') else {
            return Ok(None);
        };
        let stored: Option<i64> = file
            .prepare_cached("SELECT last_call FROM customers WHERE key = ?1 AND customer = ?2")?
            .query_row((key, customer), |row| row.get(0))
            .optional()?;
        let Some(last_call) = stored else {
            return Ok(None);
        };
        customers.insert(
            id.to_owned(),
            Seen {
                last_call: Some(last_call),
                seq: 0,
            },
        );
    }
    Ok(customers.get(id))
}

/// A run as the desk or the file knows it.
fn run_entry<'a>(
    runs: &'a mut HashMap<String, Run>,
    file: &Connection,
    id: &str,
) -> Sql<Option<&'a Run>> {
    if !runs.contains_key(id) {
        let stored: Option<(Option<UsdMicros>, i64)> = file
            .prepare_cached("SELECT cap_usd_micros, last_used FROM runs WHERE id = ?1")?
            .query_row([id], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()?;
        let Some((cap, last_used)) = stored else {
            return Ok(None);
        };
        runs.insert(
            id.to_owned(),
            Run {
                cap,
                last_used,
                seq: 0,
            },
        );
    }
    Ok(runs.get(id))
}

/// The hash [`Desk`] knows an exec id by. Two ids with one hash only cost
/// a read of the file.
pub(super) fn known_hash(exec_id: &str) -> u64 {
    KNOWN.hash_one(exec_id)
}

/// A fixed hasher: the same id always has the same hash in a process.
static KNOWN: std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher> =
    std::hash::BuildHasherDefault::new();
