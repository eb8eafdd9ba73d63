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
//! Reading a file takes its records from the beginning up to the first
//! bytes that are not a whole record: an append a crash cut short, which
//! was never answered, or, in a file written again from its beginning
//! (it is not shortened: that would cost a metadata change and a page
//! cache purge at every turn), older records, posted already, which the
//! sequence numbers tell apart. Past those bytes the rest of the file is
//! searched for whole records too: one that the file lacks means the
//! bytes before it were damaged, and calls were answered that cannot be
//! posted (`damage` decides what start-up does about it). Only a crash of
//! the machine (the page cache lost before it reached the disk) or a
//! damaged disk can cost whole records.
//!
//! Since the files carry a header (the id of the store they belong to,
//! so a journal copied from another store is recognised), a file starts
//! with [`MAGIC`]; a file of an earlier version has none, and its records
//! start at its first byte.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The bytes in front of each record's payload.
const HEADER: usize = 16;

/// What a journal file opens with. Read as a record's length by an
/// earlier binary it is past [`MAX_PAYLOAD`], so that binary reads no
/// record from the file rather than a wrong one.
const MAGIC: [u8; 8] = *b"tgjrnl\x01\n";

/// The id of the store a file belongs to, after [`MAGIC`].
pub(super) type StoreId = [u8; 16];

/// [`MAGIC`] and the store's id: where a file's first record goes.
const FILE_HEADER: u64 = (MAGIC.len() + 16) as u64;

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
    /// Bytes the disk has left for appends (`None`: as many as it has), so
    /// a test can fill the disk between two appends.
    #[cfg(test)]
    room: Option<u64>,
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

/// What one journal file holds, read without changing it.
#[derive(Debug)]
pub(super) struct Scanned {
    pub path: PathBuf,
    /// The file does not exist.
    pub missing: bool,
    /// The store it belongs to, from its header; `None` for a file with
    /// no header (written by an earlier version, or empty).
    pub owner: Option<StoreId>,
    /// Its whole records from the beginning, then those found past bytes
    /// that are not one.
    pub records: Vec<Logged>,
    /// The bytes after its first run of records read as the start of the
    /// next one, cut short: an append a crash interrupted.
    pub torn: bool,
    /// The sequence number (as its header says) of a last record that
    /// fills the file to its end, so was written whole, but fails its
    /// checksum: damaged after its call was answered.
    pub damaged_last: Option<u64>,
}

/// Reads both journal files of the database at `db`, creating nothing.
pub(super) fn scan(db: &Path) -> io::Result<[Scanned; 2]> {
    let [first, second] = paths(db);
    Ok([scan_part(first)?, scan_part(second)?])
}

fn scan_part(path: PathBuf) -> io::Result<Scanned> {
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Ok(Scanned {
                path,
                missing: true,
                owner: None,
                records: Vec::new(),
                torn: false,
                damaged_last: None,
            })
        }
        Err(error) => return Err(error),
    };
    let (owner, from) = match bytes.get(..FILE_HEADER as usize) {
        Some(header) if header.starts_with(&MAGIC) => {
            let mut id = StoreId::default();
            id.copy_from_slice(&header[MAGIC.len()..]);
            (Some(id), FILE_HEADER as usize)
        }
        _ => (None, 0),
    };
    let (records, torn, damaged_last) = read_part(&bytes, from);
    Ok(Scanned {
        path,
        missing: false,
        owner,
        records,
        torn,
        damaged_last,
    })
}

impl Journal {
    /// Opens (creating) the two journal files of the store `owner` whose
    /// database is at `db`, emptied, each with its header: every record
    /// they held is posted by then.
    pub(super) fn create(db: &Path, owner: StoreId) -> io::Result<Journal> {
        let mut header = MAGIC.to_vec();
        header.extend_from_slice(&owner);
        let [first, second] = paths(db).map(|path| {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(path)?;
            file.write_all_at(&header, 0)?;
            Ok::<_, io::Error>(Part {
                file,
                len: FILE_HEADER,
                last_seq: 0,
                high_water: FILE_HEADER,
            })
        });
        Ok(Journal {
            parts: [first?, second?],
            active: 0,
            #[cfg(test)]
            room: None,
        })
    }

    /// Every whole record of the journal of the store `owner` whose
    /// database is at `db`, in sequence order, read without creating or
    /// changing anything; a file of another store is an error.
    pub(super) fn read(db: &Path, owner: Option<StoreId>) -> io::Result<Vec<Logged>> {
        let parts = scan(db)?;
        let foreign = |part: &Scanned| part.owner.is_some_and(|id| Some(id) != owner);
        if let Some(part) = parts.iter().find(|part| foreign(part)) {
            return Err(io::Error::other(format!(
                "{} belongs to another store",
                part.path.display()
            )));
        }
        let mut records: Vec<Logged> = parts.into_iter().flat_map(|part| part.records).collect();
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
        #[cfg(test)]
        self.use_room(&bytes)?;
        let part = &mut self.parts[self.active];
        part.file.write_all_at(&bytes, part.len)?;
        part.len += bytes.len() as u64;
        part.high_water = part.high_water.max(part.len);
        part.last_seq = seq;
        Ok(())
    }

    /// Leaves the disk `room` bytes for appends (`None`: no limit).
    #[cfg(test)]
    pub(super) fn set_room(&mut self, room: Option<u64>) {
        self.room = room;
    }

    /// Takes `bytes` from the room left, or, as a full disk does, writes
    /// what fits and fails with `ENOSPC`.
    #[cfg(test)]
    fn use_room(&mut self, bytes: &[u8]) -> io::Result<()> {
        let Some(room) = self.room else {
            return Ok(());
        };
        let len = bytes.len() as u64;
        if len <= room {
            self.room = Some(room - len);
            return Ok(());
        }
        let part = &mut self.parts[self.active];
        part.file.write_all_at(&bytes[..room as usize], part.len)?;
        part.high_water = part.high_water.max(part.len + room);
        self.room = Some(0);
        Err(io::Error::from_raw_os_error(28))
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
            other.file.set_len(FILE_HEADER)?;
            other.high_water = FILE_HEADER;
        }
        other.len = FILE_HEADER;
        other.last_seq = 0;
        self.active = 1 - self.active;
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

/// The whole records of one file's bytes from `from` on: those up to the
/// first bytes that are not a record, then any found after them (searched
/// for byte by byte: this runs once, at start-up); whether those bytes
/// look like a record cut short; and the sequence number of a last record
/// written whole that fails its checksum.
fn read_part(bytes: &[u8], from: usize) -> (Vec<Logged>, bool, Option<u64>) {
    let mut records = Vec::new();
    let mut at = from;
    while let Some((record, next)) = parse(bytes, at) {
        records.push(record);
        at = next;
    }
    let last = records.last().map(|record| record.seq);
    let whole = records.len();
    let mut probe = at + 1;
    while probe + HEADER <= bytes.len() {
        match parse(bytes, probe) {
            Some((record, next)) => {
                records.push(record);
                probe = next;
            }
            None => probe += 1,
        }
    }
    // Newer records past those bytes mean they were damaged, not cut
    // short by the last append.
    let newer = records[whole..]
        .iter()
        .any(|record| last.is_none_or(|last| record.seq > last));
    let damaged_last = if newer {
        None
    } else {
        filled_to_the_end(bytes, at)
    };
    let torn = damaged_last.is_none() && !newer && cut_short(bytes, at, last);
    (records, torn, damaged_last)
}

/// The sequence number in the header at `at`, if the record it begins
/// (which failed its checksum) ends exactly where the file does: one
/// `pwrite` writes a whole record, so this one was written whole, and its
/// call answered, before its bytes changed.
fn filled_to_the_end(bytes: &[u8], at: usize) -> Option<u64> {
    let header = bytes.get(at..at.checked_add(HEADER)?)?;
    let length = u32::from_le_bytes(header[0..4].try_into().ok()?) as usize;
    let seq = u64::from_le_bytes(header[8..16].try_into().ok()?);
    (length <= MAX_PAYLOAD && at + HEADER + length == bytes.len()).then_some(seq)
}

/// Whether the bytes at `at` (where the whole records end) read as the
/// start of the record after `last`: too few for a header, a header with
/// the next sequence number, or one whose payload would run past the end.
fn cut_short(bytes: &[u8], at: usize, last: Option<u64>) -> bool {
    let Some(rest) = bytes.get(at..).filter(|rest| !rest.is_empty()) else {
        return false;
    };
    let Some(header) = rest.get(..HEADER) else {
        return true;
    };
    let mut word = [0; 4];
    word.copy_from_slice(&header[0..4]);
    let length = u32::from_le_bytes(word) as usize;
    let mut seq = [0; 8];
    seq.copy_from_slice(&header[8..16]);
    let seq = u64::from_le_bytes(seq);
    last.is_some_and(|last| seq == last + 1)
        || (length <= MAX_PAYLOAD && HEADER + length > rest.len())
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

    const OWNER: StoreId = [9; 16];

    #[test]
    fn records_appended_read_back_in_order_under_their_store_id() {
        let dir = tempfile::tempdir().unwrap();
        let mut journal = Journal::create(&db(&dir), OWNER).unwrap();
        assert!(Journal::read(&db(&dir), Some(OWNER)).unwrap().is_empty());
        journal.append(1, b"one", 0).unwrap();
        journal.append(2, b"two", 0).unwrap();
        drop(journal);

        let found = Journal::read(&db(&dir), Some(OWNER)).unwrap();
        assert_eq!(seqs(&found), [1, 2]);
        assert_eq!(found[1].payload, b"two");
        let [first, second] = scan(&db(&dir)).unwrap();
        assert_eq!((first.owner, second.owner), (Some(OWNER), Some(OWNER)));
        assert!(!first.torn && !first.missing);
        let other = Journal::read(&db(&dir), Some([1; 16])).unwrap_err();
        assert!(other.to_string().contains("another store"), "{other}");
    }

    /// A file an earlier version wrote has no header: its records start
    /// at its first byte, and still read.
    #[test]
    fn a_file_without_a_header_reads_as_an_earlier_version_wrote_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = db(&dir);
        let mut bytes = Vec::new();
        for (seq, payload) in [(1u64, &b"one"[..]), (2, b"two")] {
            bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&checksum(seq, payload).to_le_bytes());
            bytes.extend_from_slice(&seq.to_le_bytes());
            bytes.extend_from_slice(payload);
        }
        std::fs::write(&paths(&path)[0], bytes).unwrap();
        let [first, second] = scan(&path).unwrap();
        assert_eq!((first.owner, seqs(&first.records)), (None, vec![1, 2]));
        assert!(second.missing);
    }

    /// Once the active file is full, the other one is written again from
    /// its beginning if all it holds is posted; its older records read
    /// back, and `unposted` leaves them out.
    #[test]
    fn a_full_file_hands_over_to_the_other_once_that_one_is_posted() {
        let dir = tempfile::tempdir().unwrap();
        let path = db(&dir);
        let mut journal = Journal::create(&path, OWNER).unwrap();
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
        let (kept, left) = unposted(Journal::read(&path, Some(OWNER)).unwrap(), 2);
        assert_eq!((seqs(&kept), left), (vec![3, 4, 5, 6, 7], 0));
    }

    #[test]
    fn a_record_cut_short_ends_its_file_and_reads_as_torn() {
        let dir = tempfile::tempdir().unwrap();
        let path = db(&dir);
        let mut journal = Journal::create(&path, OWNER).unwrap();
        journal.append(1, b"whole", 0).unwrap();
        journal.append(2, b"cut short", 0).unwrap();
        drop(journal);
        let part = &paths(&path)[0];
        let len = std::fs::metadata(part).unwrap().len();
        let file = OpenOptions::new().write(true).open(part).unwrap();
        file.set_len(len - 3).unwrap();
        drop(file);

        let [first, _] = scan(&path).unwrap();
        assert_eq!(seqs(&first.records), [1]);
        assert!(first.torn);
    }

    /// A damaged record is not read, but the whole records after it are
    /// found: they tell damage from a record cut short.
    #[test]
    fn a_damaged_record_is_not_read_and_the_records_after_it_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let path = db(&dir);
        let mut journal = Journal::create(&path, OWNER).unwrap();
        for seq in 1..=3 {
            journal.append(seq, b"payload", 0).unwrap();
        }
        drop(journal);
        let part = &paths(&path)[0];
        let mut bytes = std::fs::read(part).unwrap();
        // The second record's payload, one bit flipped.
        bytes[FILE_HEADER as usize + (HEADER + 7) + HEADER + 2] ^= 1;
        std::fs::write(part, bytes).unwrap();
        let [first, _] = scan(&path).unwrap();
        assert_eq!(seqs(&first.records), [1, 3]);
        assert!(!first.torn);
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
