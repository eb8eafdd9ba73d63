//! The store's journal: every change to the books is appended here before
//! its call is answered, and posted to the database file behind it, in
//! batches (`writer`).
//!
//! An append is one `pwrite` of a few hundred bytes into the kernel's page
//! cache, which a killed process cannot take back; a transaction of the
//! database file costs a dozen system calls and kilobytes of pages, so no
//! call waits for one. The database records the sequence number of the
//! last record posted (`meta.journal_seq`), in the transaction that posts
//! it.
//!
//! Two files take turns, `<file>.journal-0` and `<file>.journal-1`: records
//! are appended to the active one until it holds [`TURN_BYTES`]; then the
//! other one, every record of which is posted by then, is written again
//! from its beginning. While the file refuses its postings the other one
//! is not, so the active one grows, and only a full disk stops it.
//!
//! A record is `length (u32) | crc32 (u32) | seq (u64) | payload`, little
//! endian, the checksum taken over the sequence number and the payload;
//! sequence numbers go up by one from record to record across both files.
//! Reading a file stops at its first record that is not whole: an append a
//! crash cut short, which was never answered. A file written again from
//! its beginning is not shortened (it would cost a metadata change and a
//! page cache purge at every turn): after its new records come older ones,
//! posted already, which the sequence numbers tell apart. Only a crash of
//! the machine (the page cache lost before it reached the disk) can cost
//! whole records, and then the ones after a gap are not trusted either.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The bytes in front of each record's payload.
const HEADER: usize = 16;

/// No record is this long: a length field past it is damage, not a record.
const MAX_PAYLOAD: usize = 64 * 1024 * 1024;

/// How much the active file holds before the other one takes over.
const TURN_BYTES: u64 = 4 * 1024 * 1024;

/// A file that grew past this (its turn came while the database refused
/// its postings) is shortened when it is written again from its beginning.
const KEEP_BYTES: u64 = 4 * TURN_BYTES;

/// A record of the journal: its sequence number and payload.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Logged {
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
    /// The sequence number of its last record; 0 when it holds none.
    last_seq: u64,
    /// The most it was ever written to.
    high_water: u64,
}

impl Journal {
    /// Opens (creating) the journal of the database at `db` and reads
    /// back every whole record of both files, in sequence order.
    pub(super) fn open(db: &Path) -> io::Result<(Journal, Vec<Logged>)> {
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
            let last_seq = found.iter().map(|record| record.seq).max().unwrap_or(0);
            records.extend(found);
            parts.push(Part {
                high_water: file.metadata()?.len(),
                file,
                len,
                last_seq,
            });
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
    pub(super) fn read(db: &Path) -> io::Result<Vec<Logged>> {
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

    /// Appends one record; the database has every record up to `posted`.
    /// On failure nothing of it counts: the next record is written where
    /// this one began, and a crash before then leaves what was written of
    /// it to read as a record cut short.
    pub(super) fn append(&mut self, seq: u64, payload: &[u8], posted: u64) -> io::Result<()> {
        self.turn_if_full(posted)?;
        let length = u32::try_from(payload.len())
            .ok()
            .filter(|_| payload.len() <= MAX_PAYLOAD)
            .ok_or_else(|| io::Error::other("a journal record too long to write"))?;
        let mut bytes = Vec::with_capacity(HEADER + payload.len());
        bytes.extend_from_slice(&length.to_le_bytes());
        bytes.extend_from_slice(&checksum(seq, payload).to_le_bytes());
        bytes.extend_from_slice(&seq.to_le_bytes());
        bytes.extend_from_slice(payload);
        let part = &mut self.parts[self.active];
        part.file.write_all_at(&bytes, part.len)?;
        part.len += bytes.len() as u64;
        part.high_water = part.high_water.max(part.len);
        part.last_seq = seq;
        Ok(())
    }

    /// Hands over to the other file once the active one is full, if every
    /// record of the other is posted.
    fn turn_if_full(&mut self, posted: u64) -> io::Result<()> {
        if self.parts[self.active].len < TURN_BYTES {
            return Ok(());
        }
        let other = &mut self.parts[1 - self.active];
        if other.last_seq > posted {
            return Ok(());
        }
        if other.high_water > KEEP_BYTES {
            other.file.set_len(0)?;
            other.high_water = 0;
        }
        other.len = 0;
        other.last_seq = 0;
        self.active = 1 - self.active;
        Ok(())
    }

    /// Empties both files, every record of which is posted, and shortens
    /// them: what a new run appends is then all they hold.
    pub(super) fn empty_all(&mut self) -> io::Result<()> {
        for part in &mut self.parts {
            part.file.set_len(0)?;
            part.len = 0;
            part.last_seq = 0;
            part.high_water = 0;
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
fn read_part(file: &mut File) -> io::Result<(Vec<Logged>, u64)> {
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
fn parse(bytes: &[u8], at: usize) -> Option<(Logged, usize)> {
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
            Logged {
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
pub(super) fn unposted(records: Vec<Logged>, posted: u64) -> (Vec<Logged>, usize) {
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

    fn seqs(records: &[Logged]) -> Vec<u64> {
        records.iter().map(|record| record.seq).collect()
    }

    /// A payload that fills the active file in two records.
    fn half_a_file() -> Vec<u8> {
        vec![7; usize::try_from(TURN_BYTES / 2).unwrap()]
    }

    #[test]
    fn records_appended_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let (mut journal, found) = Journal::open(&db(&dir)).unwrap();
        assert!(found.is_empty());
        journal.append(1, b"one", 0).unwrap();
        journal.append(2, b"two", 0).unwrap();
        drop(journal);

        let (_, found) = Journal::open(&db(&dir)).unwrap();
        assert_eq!(seqs(&found), [1, 2]);
        assert_eq!(found[1].payload, b"two");
    }

    /// Once the active file is full, the other one is written again from
    /// its beginning if all it holds is posted; its older records read
    /// back, and `unposted` leaves them out.
    #[test]
    fn a_full_file_hands_over_to_the_other_once_that_one_is_posted() {
        let dir = tempfile::tempdir().unwrap();
        let path = db(&dir);
        let (mut journal, _) = Journal::open(&path).unwrap();
        let big = half_a_file();
        journal.append(1, &big, 0).unwrap();
        journal.append(2, &big, 0).unwrap();
        // The first file is full; the second holds nothing: it takes over.
        journal.append(3, b"three", 0).unwrap();
        journal.append(4, &big, 0).unwrap();
        journal.append(5, &big, 0).unwrap();
        // The second is full, but the first holds records not yet posted.
        journal.append(6, b"six", 1).unwrap();
        assert_eq!(journal.active, 1);
        // Once they are, the first is written again from its beginning.
        journal.append(7, b"seven", 2).unwrap();
        assert_eq!(journal.active, 0);
        drop(journal);
        let (kept, left) = unposted(Journal::read(&path).unwrap(), 2);
        assert_eq!((seqs(&kept), left), (vec![3, 4, 5, 6, 7], 0));
    }

    #[test]
    fn a_record_cut_short_ends_its_file_and_the_next_append_overwrites_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = db(&dir);
        let (mut journal, _) = Journal::open(&path).unwrap();
        journal.append(1, b"whole", 0).unwrap();
        journal.append(2, b"cut short", 0).unwrap();
        drop(journal);
        let part = &paths(&path)[0];
        let len = std::fs::metadata(part).unwrap().len();
        let file = OpenOptions::new().write(true).open(part).unwrap();
        file.set_len(len - 3).unwrap();
        drop(file);

        let (mut journal, found) = Journal::open(&path).unwrap();
        assert_eq!(seqs(&found), [1]);
        journal.append(2, b"again", 0).unwrap();
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
            journal.append(seq, b"payload", 0).unwrap();
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
        let records = |seqs: &[u64]| -> Vec<Logged> {
            seqs.iter()
                .map(|&seq| Logged {
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
}
