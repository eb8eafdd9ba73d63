//! The store's journal: every change to the books is appended here before
//! its call is answered, and posted to the database file behind it, in
//! batches (`writer`).
//!
//! An append is one `pwrite` of a few hundred bytes into the kernel's page
//! cache, which a killed process cannot take back; a transaction of the
//! database file costs a dozen system calls and kilobytes of pages, so no
//! call waits for one. Two files take turns, `<file>.journal-0` and
//! `<file>.journal-1`: changes go to the active one; posting makes the other
//! one active, and once the transaction that posted the first has
//! committed, empties it. The database records the sequence number of the
//! last record posted (`meta.journal_seq`), in the same transaction.
//!
//! A record is `length (u32) | crc32 (u32) | seq (u64) | payload`, little
//! endian, the checksum taken over the sequence number and the payload;
//! sequence numbers go up by one from record to record across both files.
//! Reading a file stops at its first record that is not whole: an append a
//! crash cut short, which was never answered. Only a crash of the machine
//! (the page cache lost before it reached the disk) can cost whole
//! records, and then the ones after a gap are not trusted either.
//!
//! Emptying a file starts it again from its beginning without shortening
//! it (shortening a file costs more than the posting it follows): what is
//! left after its last record is older records, posted already, which
//! reading finds by their sequence numbers and leaves out. A file grown
//! past [`KEEP_BYTES`] by a burst is shortened when it is emptied.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The bytes in front of each record's payload.
const HEADER: usize = 16;

/// No record is this long: a length field past it is damage, not a record.
const MAX_PAYLOAD: usize = 64 * 1024 * 1024;

/// A file emptied when it is longer than this is shortened, not only
/// started again.
const KEEP_BYTES: u64 = 4 * 1024 * 1024;

/// A record read back: its sequence number and payload.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Record {
    pub seq: u64,
    pub payload: Vec<u8>,
}

/// The two journal files of one store.
pub(super) struct Journal {
    parts: [Part; 2],
    active: usize,
}

struct Part {
    file: File,
    /// Where the next record goes: the end of the last whole record.
    len: u64,
}

impl Journal {
    /// Opens (creating) the journal of the database at `db` and reads
    /// back every whole record of both files, in sequence order.
    pub(super) fn open(db: &Path) -> io::Result<(Journal, Vec<Record>)> {
        let mut records = Vec::new();
        let mut parts = Vec::with_capacity(2);
        for path in paths(db) {
            let mut file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)?;
            let (found, len) = read_part(&mut file)?;
            records.extend(found);
            parts.push(Part { file, len });
        }
        records.sort_by_key(|record| record.seq);
        let [first, second]: [Part; 2] = parts
            .try_into()
            .map_err(|_| io::Error::other("the journal has two files"))?;
        Ok((
            Journal {
                parts: [first, second],
                active: 0,
            },
            records,
        ))
    }

    /// Every whole record of the journal of the database at `db`, in
    /// sequence order, read without creating or changing anything.
    pub(super) fn read(db: &Path) -> io::Result<Vec<Record>> {
        let mut records = Vec::new();
        for path in paths(db) {
            match File::open(&path) {
                Ok(mut file) => records.extend(read_part(&mut file)?.0),
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => return Err(error),
            }
        }
        records.sort_by_key(|record| record.seq);
        Ok(records)
    }

    /// Appends one record to the active file. On failure nothing of it
    /// counts: the next record is written where this one began.
    pub(super) fn append(&mut self, seq: u64, payload: &[u8]) -> io::Result<()> {
        let part = &mut self.parts[self.active];
        let length = u32::try_from(payload.len())
            .ok()
            .filter(|_| payload.len() <= MAX_PAYLOAD)
            .ok_or_else(|| io::Error::other("a journal record too long to write"))?;
        let mut bytes = Vec::with_capacity(HEADER + payload.len());
        bytes.extend_from_slice(&length.to_le_bytes());
        bytes.extend_from_slice(&checksum(seq, payload).to_le_bytes());
        bytes.extend_from_slice(&seq.to_le_bytes());
        bytes.extend_from_slice(payload);
        match part.file.write_all_at(&bytes, part.len) {
            Ok(()) => {
                part.len += bytes.len() as u64;
                Ok(())
            }
            Err(error) => {
                // Cut what was written of it; if even that fails, the next
                // record overwrites it, and a crash before then leaves a
                // record that reads as cut short.
                let _ = part.file.set_len(part.len);
                Err(error)
            }
        }
    }

    /// Makes the other file the active one, if it is empty, and returns
    /// the one that was: once what it holds is posted, [`Journal::empty`]
    /// it. `None` while the other one still holds records (its emptying
    /// failed): appends stay where they are, and nothing is emptied until
    /// it is.
    pub(super) fn turn(&mut self) -> Option<usize> {
        let other = 1 - self.active;
        if self.parts[other].len != 0 {
            return None;
        }
        let posted = self.active;
        self.active = other;
        Some(posted)
    }

    /// Empties file `part`, whose every record is posted.
    pub(super) fn empty(&mut self, part: usize) -> io::Result<()> {
        let part = &mut self.parts[part];
        if part.len > KEEP_BYTES {
            part.file.set_len(0)?;
        }
        part.len = 0;
        Ok(())
    }

    /// Empties a file left holding records, if any, before the next turn.
    pub(super) fn empty_inactive(&mut self) -> io::Result<()> {
        let other = 1 - self.active;
        if self.parts[other].len == 0 {
            return Ok(());
        }
        self.empty(other)
    }

    /// Empties both files, every record of which is posted, and shortens
    /// them: what a new run appends is then all they hold.
    pub(super) fn empty_all(&mut self) -> io::Result<()> {
        for part in &mut self.parts {
            part.file.set_len(0)?;
            part.len = 0;
        }
        self.active = 0;
        Ok(())
    }
}

/// `<file>.journal-0` and `<file>.journal-1`.
pub(super) fn paths(db: &Path) -> [PathBuf; 2] {
    ["0", "1"].map(|n| {
        let mut name = db.as_os_str().to_owned();
        name.push(".journal-");
        name.push(n);
        PathBuf::from(name)
    })
}

/// The whole records of one file, and where the last one ends.
fn read_part(file: &mut File) -> io::Result<(Vec<Record>, u64)> {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let mut records = Vec::new();
    let mut at = 0;
    while let Some((record, next)) = parse(&bytes, at) {
        records.push(record);
        at = next;
    }
    Ok((records, at as u64))
}

/// The record at `at`, if it is whole, and where the next one begins.
fn parse(bytes: &[u8], at: usize) -> Option<(Record, usize)> {
    let header = bytes.get(at..at.checked_add(HEADER)?)?;
    let length = u32::from_le_bytes(header[0..4].try_into().ok()?) as usize;
    if length > MAX_PAYLOAD {
        return None;
    }
    let sum = u32::from_le_bytes(header[4..8].try_into().ok()?);
    let seq = u64::from_le_bytes(header[8..16].try_into().ok()?);
    let start = at + HEADER;
    let payload = bytes.get(start..start.checked_add(length)?)?;
    (checksum(seq, payload) == sum).then(|| {
        (
            Record {
                seq,
                payload: payload.to_vec(),
            },
            start + length,
        )
    })
}

fn checksum(seq: u64, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&seq.to_le_bytes());
    hasher.update(payload);
    hasher.finalize()
}

/// The records that follow `posted`, one sequence number after another:
/// the journal's part not yet in the database. Stops at the first gap;
/// says how many records after it were left out.
pub(super) fn unposted(records: Vec<Record>, posted: u64) -> (Vec<Record>, usize) {
    let mut next = posted + 1;
    let mut kept = Vec::new();
    let mut left = 0;
    for record in records {
        if record.seq < next {
            continue;
        }
        if record.seq == next && left == 0 {
            next += 1;
            kept.push(record);
        } else {
            left += 1;
        }
    }
    (kept, left)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn db(dir: &tempfile::TempDir) -> PathBuf {
        dir.path().join("books.db")
    }

    fn seqs(records: &[Record]) -> Vec<u64> {
        records.iter().map(|record| record.seq).collect()
    }

    #[test]
    fn records_appended_read_back_in_order_across_turns() {
        let dir = tempfile::tempdir().unwrap();
        let (mut journal, found) = Journal::open(&db(&dir)).unwrap();
        assert!(found.is_empty());
        journal.append(1, b"one").unwrap();
        journal.append(2, b"two").unwrap();
        let posted = journal.turn().unwrap();
        journal.append(3, b"three").unwrap();
        drop(journal);

        let (mut journal, found) = Journal::open(&db(&dir)).unwrap();
        assert_eq!(seqs(&found), [1, 2, 3]);
        assert_eq!(found[2].payload, b"three");
        // What was posted is left behind, and read as posted.
        journal.empty(posted).unwrap();
        drop(journal);
        let (kept, _) = unposted(Journal::read(&db(&dir)).unwrap(), 2);
        assert_eq!(seqs(&kept), [3]);
    }

    #[test]
    fn a_record_cut_short_ends_its_file_and_the_next_append_overwrites_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = db(&dir);
        let (mut journal, _) = Journal::open(&path).unwrap();
        journal.append(1, b"whole").unwrap();
        journal.append(2, b"cut short").unwrap();
        drop(journal);
        let part = &paths(&path)[0];
        let len = std::fs::metadata(part).unwrap().len();
        let file = OpenOptions::new().write(true).open(part).unwrap();
        file.set_len(len - 3).unwrap();
        drop(file);

        let (mut journal, found) = Journal::open(&path).unwrap();
        assert_eq!(seqs(&found), [1]);
        journal.append(2, b"again").unwrap();
        drop(journal);
        let found = Journal::read(&path).unwrap();
        assert_eq!(seqs(&found), [1, 2]);
        assert_eq!(found[1].payload, b"again");
    }

    #[test]
    fn a_damaged_record_is_not_read_nor_anything_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = db(&dir);
        let (mut journal, _) = Journal::open(&path).unwrap();
        for seq in 1..=3 {
            journal.append(seq, b"payload").unwrap();
        }
        drop(journal);
        let part = &paths(&path)[0];
        let mut bytes = std::fs::read(part).unwrap();
        // The second record's payload, one bit flipped.
        bytes[(HEADER + 7) + HEADER + 2] ^= 1;
        std::fs::write(part, bytes).unwrap();
        assert_eq!(seqs(&Journal::read(&path).unwrap()), [1]);
    }

    #[test]
    fn only_the_records_after_the_posted_one_and_before_a_gap_are_unposted() {
        let records = |seqs: &[u64]| -> Vec<Record> {
            seqs.iter()
                .map(|&seq| Record {
                    seq,
                    payload: Vec::new(),
                })
                .collect()
        };
        let (kept, left) = unposted(records(&[3, 4, 5, 6]), 4);
        assert_eq!((seqs(&kept), left), (vec![5, 6], 0));
        let (kept, left) = unposted(records(&[5, 6, 8, 9]), 4);
        assert_eq!((seqs(&kept), left), (vec![5, 6], 2));
        let (kept, left) = unposted(records(&[1, 2]), 2);
        assert_eq!((seqs(&kept), left), (vec![], 0));
    }

    /// An emptied file starts again from its beginning; the older records
    /// left after the new ones read back, and `unposted` leaves them out.
    #[test]
    fn an_emptied_file_is_written_again_from_its_beginning() {
        let dir = tempfile::tempdir().unwrap();
        let path = db(&dir);
        let (mut journal, _) = Journal::open(&path).unwrap();
        for seq in 1..=4 {
            journal.append(seq, b"an older, longer record").unwrap();
        }
        let posted = journal.turn().unwrap();
        journal.empty(posted).unwrap();
        journal.append(5, b"other").unwrap();
        let posted = journal.turn().unwrap();
        journal.append(6, b"new").unwrap();
        drop(journal);
        let read = Journal::read(&path).unwrap();
        let (kept, left) = unposted(read, 4);
        assert_eq!((seqs(&kept), left), (vec![5, 6], 0));
        assert_eq!(posted, 1);
    }

    #[test]
    fn a_file_not_yet_emptied_keeps_the_other_active() {
        let dir = tempfile::tempdir().unwrap();
        let (mut journal, _) = Journal::open(&db(&dir)).unwrap();
        journal.append(1, b"a").unwrap();
        let posted = journal.turn().unwrap();
        journal.append(2, b"b").unwrap();
        // The first was not emptied: no second turn.
        assert_eq!(journal.turn(), None);
        journal.append(3, b"c").unwrap();
        journal.empty(posted).unwrap();
        assert!(journal.turn().is_some());
        drop(journal);
        let (kept, _) = unposted(Journal::read(&db(&dir)).unwrap(), 1);
        assert_eq!(seqs(&kept), [2, 3]);
    }
}
