//! What start-up makes of a journal that is not as the last run left it.
//!
//! The journal holds every call answered since the last posting, and only
//! it does, so a journal that cannot be read whole may hold answered calls
//! the file lacks. Start-up posts what it can prove is every such call,
//! and otherwise stops, naming the file and what the operator can do:
//!
//! - a record cut short at the end of a file is an append a crash
//!   interrupted; its call waited for the append and was never answered,
//!   so it is left out, with a warning;
//! - a record that fails its checksum with whole records after it, or one
//!   at the end of a file that fills it to its end (written whole, so
//!   answered, then changed), or
//!   sequence numbers that skip one (bytes flipped, a machine crash that
//!   lost a page), leaves answered calls out of reach: start-up stops,
//!   unless every record past the damage is posted already;
//! - a missing journal file, unless the last run stopped cleanly (every
//!   record posted, `meta.stopped_clean_at`), may have held answered calls:
//!   start-up stops;
//! - a journal whose header names another store (`meta.store_id`) was
//!   copied from elsewhere: start-up stops, naming both.
//!
//! Giving up a journal's calls is the operator's act: moving the files
//! aside and creating them empty.

use std::path::Path;

use super::journal::{self, Logged, Scanned, StoreId};
use super::SqliteOpenError;

/// The records of `parts` that the file at `db` (posted up to `posted`)
/// lacks, if they are every call its journal answered; otherwise why not.
/// `owner` is the file's store id, `clean` the sequence number its last
/// run stopped cleanly at.
pub(super) fn check(
    db: &Path,
    parts: [Scanned; 2],
    posted: u64,
    owner: Option<StoreId>,
    clean: Option<u64>,
) -> Result<Vec<Logged>, SqliteOpenError> {
    let give_up = give_up(db);
    let refuse = |part: &Scanned, problem: String| SqliteOpenError::Journal {
        path: db.to_owned(),
        journal: part.path.clone(),
        problem,
    };
    for part in &parts {
        if let Some(found) = part.owner.filter(|found| Some(*found) != owner) {
            let own = owner.map_or_else(|| "none".to_owned(), |id| show(&id));
            return Err(refuse(
                part,
                format!(
                    "belongs to another store (id {}), not to {} (id {own}): it was copied \
                     from another store's directory. Put this store's own journal files \
                     back; or, to start without the calls they held, {give_up}",
                    show(&found),
                    db.display()
                ),
            ));
        }
    }
    let ran_before = posted > 0 || owner.is_some();
    if let Some(part) = parts.iter().find(|part| part.missing) {
        if ran_before && clean != Some(posted) {
            return Err(refuse(
                part,
                format!(
                    "is missing, and the store's last run did not stop cleanly: it may have \
                     held answered calls the file lacks (how many cannot be known). Put both \
                     journal files back from where they went; or, if their calls are to be \
                     given up (or the file was restored from a backup), {give_up}"
                ),
            ));
        }
    }
    for part in parts.iter().filter(|part| part.torn) {
        tracing::warn!(file = %part.path.display(), "a journal record cut short at the end of the file was left out: the process died writing it, before its call was answered");
    }
    if let Some((part, seq)) = parts.iter().find_map(|part| {
        part.damaged_last
            .filter(|&seq| seq > posted)
            .map(|seq| (part, seq))
    }) {
        let readable = parts
            .iter()
            .flat_map(|part| &part.records)
            .filter(|record| record.seq > posted)
            .count();
        let lost = readable + 1;
        return Err(refuse(
            part,
            format!(
                "is damaged: its last record ({seq}) was written whole, so its call was                  answered, but its bytes have changed since. Restore the journal files from                  a backup; or, to start without the unposted calls they hold, {give_up} —                  {lost} calls would be lost"
            ),
        ));
    }
    // Which file holds each record the file lacks, to name the one
    // where the damage is.
    let mut unposted: Vec<(u64, usize)> = Vec::new();
    for (index, part) in parts.iter().enumerate() {
        let seqs = part.records.iter().map(|record| record.seq);
        unposted.extend(seqs.filter(|&seq| seq > posted).map(|seq| (seq, index)));
    }
    unposted.sort_unstable();
    let paths: Vec<_> = parts.iter().map(|part| part.path.clone()).collect();
    let mut records: Vec<Logged> = parts.into_iter().flat_map(|part| part.records).collect();
    records.sort_by_key(|record| record.seq);
    let (kept, left) = journal::unposted(records, posted);
    if left > 0 {
        let missing = posted + kept.len() as u64 + 1;
        let (next, index) = unposted
            .iter()
            .copied()
            .find(|&(seq, _)| seq > missing)
            .unwrap_or((missing + 1, 0));
        // The records before the damage, those it took, and those after.
        let lost = kept.len() as u64 + (next - missing) + left as u64;
        return Err(SqliteOpenError::Journal {
            path: db.to_owned(),
            journal: paths[index].clone(),
            problem: format!(
                "is damaged: its record {missing} cannot be read (bytes changed, or a crash \
                 of the machine lost it), and the {left} records after it are answered \
                 calls the file lacks. Restore the journal files from a backup; or, to start \
                 without the unposted calls they hold, {give_up} — {lost} calls would be lost"
            ),
        });
    }
    Ok(kept)
}

/// What an operator does to start without the journal's calls.
fn give_up(db: &Path) -> String {
    let [first, second] = journal::paths(db);
    format!(
        "move both journal files aside and create them empty (`touch {} {}`)",
        first.display(),
        second.display()
    )
}

fn show(id: &StoreId) -> String {
    uuid::Uuid::from_bytes(*id).to_string()
}
