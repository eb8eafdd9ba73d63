//! The counters the writer keeps in memory.
//!
//! One process owns the file and every change to it goes through its
//! writer, so what the writer last read or wrote of a counter is what the
//! file holds. A counter that the changes of a posting moved is written
//! once when its transaction commits, however many of them moved it: one
//! posting holds many calls of the same key and org. A failed transaction
//! forgets every counter, to be read again from the file.

use hashbrown::hash_map::Entry;
use hashbrown::HashMap;

use rusqlite::{Connection, OptionalExtension};

use crate::budget::books::moved;
use crate::budget::ScopeKind;
use crate::money::{UsdMicros, UsdMicrosDelta};

type Sql<T> = rusqlite::Result<T>;

/// Past this many counters known, they are forgotten after the next
/// commit: a counter per scope and period ever used would otherwise grow
/// without end as periods go by.
const MAX_KNOWN: usize = 65_536;

/// `spent` and `reserved` of the scopes and periods the thread has used.
#[derive(Default)]
pub(super) struct Counters {
    known: HashMap<String, Counter>,
    /// What [`Counters::write`] must write, in the order first moved.
    moved: Vec<String>,
}

struct Counter {
    kind: ScopeKind,
    id: String,
    period_id: String,
    spent: UsdMicros,
    reserved: UsdMicros,
    /// Whether the file has its row: it is then updated, else inserted.
    stored: bool,
    moved: bool,
}

impl Counters {
    /// `(spent, reserved)` of one scope and period: zero if it has none.
    #[cfg(test)]
    pub(super) fn get(
        &mut self,
        conn: &Connection,
        kind: ScopeKind,
        id: &str,
        period_id: &str,
    ) -> Sql<(UsdMicros, UsdMicros)> {
        let counter = entry(&mut self.known, conn, kind, id, period_id)?;
        Ok((counter.spent, counter.reserved))
    }

    /// Moves one counter by signed amounts, never below zero (as the
    /// memory store's saturating arithmetic does); written at commit.
    pub(super) fn add(
        &mut self,
        conn: &Connection,
        kind: ScopeKind,
        id: &str,
        period_id: &str,
        spent: UsdMicrosDelta,
        reserved: UsdMicrosDelta,
    ) -> Sql<()> {
        let counter = entry(&mut self.known, conn, kind, id, period_id)?;
        counter.spent = moved(counter.spent, spent);
        counter.reserved = moved(counter.reserved, reserved);
        if !counter.moved {
            counter.moved = true;
            self.moved.push(key_of(kind, id, period_id));
        }
        Ok(())
    }

    /// Writes every counter moved since the last write, in the open
    /// transaction.
    pub(super) fn write(&mut self, conn: &Connection) -> Sql<()> {
        for key in &self.moved {
            let Some(counter) = self.known.get_mut(key) else {
                continue;
            };
            let sql = if counter.stored {
                "UPDATE counters SET spent_usd_micros = ?4, reserved_usd_micros = ?5
                  WHERE scope_kind = ?1 AND scope_id = ?2 AND period_id = ?3"
            } else {
                "INSERT INTO counters (scope_kind, scope_id, period_id, spent_usd_micros,
                     reserved_usd_micros)
                 VALUES (?1, ?2, ?3, ?4, ?5)"
            };
            conn.prepare_cached(sql)?.execute((
                counter.kind.as_str(),
                &counter.id,
                &counter.period_id,
                counter.spent,
                counter.reserved,
            ))?;
            counter.stored = true;
            counter.moved = false;
        }
        self.moved.clear();
        Ok(())
    }

    /// Forgets one counter whose row is deleted.
    pub(super) fn drop_one(&mut self, kind: ScopeKind, id: &str, period_id: &str) {
        let key = key_of(kind, id, period_id);
        self.known.remove(&key);
        self.moved.retain(|moved| *moved != key);
    }

    /// Forgets every counter of one scope whose rows are deleted.
    pub(super) fn drop_scope(&mut self, kind: ScopeKind, id: &str) {
        let prefix = key_of(kind, id, "");
        self.known.retain(|key, _| !key.starts_with(&prefix));
        self.moved.retain(|moved| !moved.starts_with(&prefix));
    }

    /// Forgets every counter, written or not: after a transaction that
    /// failed, or before statements change the table themselves.
    pub(super) fn forget(&mut self) {
        self.known.clear();
        self.moved.clear();
    }

    /// Forgets them all once there are too many, every one written.
    pub(super) fn trim(&mut self) {
        if self.moved.is_empty() && self.known.len() > MAX_KNOWN {
            self.forget();
        }
    }
}

/// The counter of one scope and period, read from the file the first time.
fn entry<'a>(
    known: &'a mut HashMap<String, Counter>,
    conn: &Connection,
    kind: ScopeKind,
    id: &str,
    period_id: &str,
) -> Sql<&'a mut Counter> {
    Ok(match known.entry(key_of(kind, id, period_id)) {
        Entry::Occupied(found) => found.into_mut(),
        Entry::Vacant(missing) => {
            let stored = read(conn, kind, id, period_id)?;
            let (spent, reserved) = stored.unwrap_or_default();
            missing.insert(Counter {
                kind,
                id: id.to_owned(),
                period_id: period_id.to_owned(),
                spent,
                reserved,
                stored: stored.is_some(),
                moved: false,
            })
        }
    })
}

/// The spent and reserved amounts the file holds for one scope and
/// period, if it holds that counter.
pub(super) fn read(
    conn: &Connection,
    kind: ScopeKind,
    id: &str,
    period_id: &str,
) -> Sql<Option<(UsdMicros, UsdMicros)>> {
    conn.prepare_cached(
        "SELECT spent_usd_micros, reserved_usd_micros FROM counters
          WHERE scope_kind = ?1 AND scope_id = ?2 AND period_id = ?3",
    )?
    .query_row((kind.as_str(), id, period_id), |row| {
        Ok((row.get(0)?, row.get(1)?))
    })
    .optional()
}

/// One key per scope and period. No period id holds a NUL, so the last
/// one splits an id from its period and no two counters share a key.
pub(super) fn key_of(kind: ScopeKind, id: &str, period_id: &str) -> String {
    let kind = kind.as_str();
    let mut key = String::with_capacity(kind.len() + id.len() + period_id.len() + 2);
    for part in [kind, "\0", id, "\0", period_id] {
        key.push_str(part);
    }
    key
}
