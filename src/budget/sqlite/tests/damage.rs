//! A damaged journal never loses an answered call silently: start-up
//! either posts every call it answered, or stops naming the file and what
//! to do (`damage`).

use super::*;

/// A store on `path` that answered reserves of `ids` (1,000 µUSD each)
/// without posting them, then crashed: the journal alone holds them.
async fn crashed_with_unposted(path: &Path, ids: &[&str]) {
    let store = open(path).unwrap();
    store.set_posting(false);
    for id in ids {
        assert!(store
            .reserve(&request(id, 1_000))
            .await
            .unwrap()
            .is_reserved());
    }
    store.crash();
}

/// Where each record of a journal file begins, past its header.
fn record_starts(bytes: &[u8]) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut at = 24;
    while at + 16 <= bytes.len() {
        starts.push(at);
        let length = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        at += 16 + length;
    }
    starts
}

fn journal_0(path: &Path) -> PathBuf {
    super::super::journal::paths(path)[0].clone()
}

/// Opening refuses with a journal error; its message.
async fn journal_refusal(path: &Path) -> String {
    let error = refusals::reopen_error(path).await;
    assert!(matches!(error, SqliteOpenError::Journal { .. }), "{error}");
    error.to_string()
}

/// Case 1: the process died mid-append. The torn record's call waited for
/// the append, so it was never answered; the calls before it are kept.
#[tokio::test]
async fn a_torn_last_record_is_left_out_and_the_calls_before_it_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    crashed_with_unposted(&path, &["a", "b", "c"]).await;
    let part = journal_0(&path);
    let len = std::fs::metadata(&part).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(&part).unwrap();
    file.set_len(len - 7).unwrap();
    drop(file);

    let store = reopen(&path).await;
    let state = store.scope_state(&key(10_000)).await.unwrap();
    assert_eq!(state.reserved, 2_000, "a and b kept, c never answered");
    assert!(store.settle(&settlement("b", 900)).await.unwrap().applied);
}

/// Case 2: bytes flipped in a record with answered calls after it: their
/// checksums hold, so they are found, and start-up stops, naming the
/// journal, what to do and how many calls giving it up costs.
#[tokio::test]
async fn a_corrupt_record_with_unposted_calls_after_it_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    crashed_with_unposted(&path, &["a", "b", "c"]).await;
    let part = journal_0(&path);
    let mut bytes = std::fs::read(&part).unwrap();
    let second = record_starts(&bytes)[1];
    bytes[second + 16 + 3] ^= 0x40;
    std::fs::write(&part, &bytes).unwrap();

    let message = journal_refusal(&path).await;
    assert!(message.contains(&part.display().to_string()), "{message}");
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("is damaged"), "{message}");
    assert!(message.contains("Restore the journal files"), "{message}");
    assert!(message.contains("3 calls would be lost"), "{message}");
    // Nothing was changed: the journal still holds what it held.
    assert_eq!(std::fs::read(&part).unwrap(), bytes);
}

/// Bytes flipped in the last record, which was written whole (so its
/// call was answered): not a record cut short, and start-up stops.
#[tokio::test]
async fn a_corrupt_last_record_written_whole_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    crashed_with_unposted(&path, &["a", "b"]).await;
    let part = journal_0(&path);
    let mut bytes = std::fs::read(&part).unwrap();
    let last = *record_starts(&bytes).last().unwrap();
    bytes[last + 16 + 3] ^= 0x40;
    std::fs::write(&part, &bytes).unwrap();

    let message = journal_refusal(&path).await;
    assert!(message.contains(&part.display().to_string()), "{message}");
    assert!(message.contains("its last record (2)"), "{message}");
    assert!(message.contains("2 calls would be lost"), "{message}");
}

/// A damaged record that is posted already costs nothing: the records
/// after it are posted and the store starts.
#[tokio::test]
async fn a_corrupt_record_already_posted_costs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let store = open(&path).unwrap();
    store.reserve(&request("a", 1_000)).await.unwrap();
    store.reserve(&request("b", 1_000)).await.unwrap();
    store.flush().await.unwrap();
    store.set_posting(false);
    store.reserve(&request("c", 1_000)).await.unwrap();
    store.crash();
    let part = journal_0(&path);
    let mut bytes = std::fs::read(&part).unwrap();
    let first = record_starts(&bytes)[0];
    bytes[first + 16 + 3] ^= 0x40;
    std::fs::write(&part, &bytes).unwrap();

    let store = reopen(&path).await;
    let state = store.scope_state(&key(10_000)).await.unwrap();
    assert_eq!(state.reserved, 3_000);
}

/// Case 3: a journal file deleted while it held answered calls the file
/// lacks stops start-up; creating it empty is the operator saying the
/// calls are given up.
#[tokio::test]
async fn a_missing_journal_after_a_crash_stops_start_up_until_created_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let store = open(&path).unwrap();
    store.reserve(&request("posted", 1_000)).await.unwrap();
    store.flush().await.unwrap();
    store.set_posting(false);
    store.reserve(&request("lost", 1_000)).await.unwrap();
    store.crash();
    let part = journal_0(&path);
    std::fs::remove_file(&part).unwrap();

    let message = journal_refusal(&path).await;
    assert!(message.contains(&part.display().to_string()), "{message}");
    assert!(message.contains("is missing"), "{message}");
    assert!(message.contains("touch"), "{message}");
    assert!(!part.exists(), "start-up created the missing file");

    std::fs::File::create(&part).unwrap();
    let store = reopen(&path).await;
    let state = store.scope_state(&key(10_000)).await.unwrap();
    assert_eq!(state.reserved, 1_000, "only the posted call");
}

/// A store that stopped cleanly (flushed, as `tollgate serve` does) left
/// nothing in its journal: the file alone starts.
#[tokio::test]
async fn a_missing_journal_after_a_clean_stop_is_no_loss() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let store = open(&path).unwrap();
    store.reserve(&request("a", 1_000)).await.unwrap();
    store.flush().await.unwrap();
    drop(store);
    for part in super::super::journal::paths(&path) {
        std::fs::remove_file(part).unwrap();
    }
    let store = reopen(&path).await;
    let state = store.scope_state(&key(10_000)).await.unwrap();
    assert_eq!(state.reserved, 1_000);
    // The next run is not clean until it stops so.
    store.set_posting(false);
    store.reserve(&request("b", 1_000)).await.unwrap();
    store.crash();
    std::fs::remove_file(journal_0(&path)).unwrap();
    journal_refusal(&path).await;
}

/// Case 4: a journal copied from another store's directory stops
/// start-up, naming both.
#[tokio::test]
async fn a_journal_of_another_store_stops_start_up_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let ours = db(&dir);
    let theirs = dir.path().join("other.db");
    crashed_with_unposted(&ours, &["a"]).await;
    crashed_with_unposted(&theirs, &["x", "y"]).await;
    let part = journal_0(&ours);
    std::fs::copy(journal_0(&theirs), &part).unwrap();

    let message = journal_refusal(&ours).await;
    assert!(message.contains(&part.display().to_string()), "{message}");
    assert!(message.contains(&ours.display().to_string()), "{message}");
    assert!(message.contains("belongs to another store"), "{message}");
}

/// A journal an earlier version wrote (no header) beside a file with no
/// store id is read as it always was, and its calls posted.
#[tokio::test]
async fn a_journal_and_file_of_the_earlier_format_still_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    crashed_with_unposted(&path, &["a", "b"]).await;
    for part in super::super::journal::paths(&path) {
        let bytes = std::fs::read(&part).unwrap();
        std::fs::write(&part, &bytes[24..]).unwrap();
    }
    Connection::open(&path)
        .unwrap()
        .execute(
            "DELETE FROM meta WHERE name IN ('store_id', 'stopped_clean_at')",
            [],
        )
        .unwrap();

    let store = reopen(&path).await;
    let state = store.scope_state(&key(10_000)).await.unwrap();
    assert_eq!(state.reserved, 2_000);
}

/// Case 7: the disk fills while a call is appended. The append writes
/// what fits and fails: that call is refused (nothing changed, nothing
/// answered), the calls answered before it are kept, a crash then loses
/// none of them (the part written is read as a torn tail), and once space
/// returns the refused call goes through.
#[tokio::test]
async fn a_full_disk_while_appending_refuses_that_call_and_keeps_every_answered_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let store = open(&path).unwrap();
    store.set_posting(false);
    for id in ["a", "b", "c"] {
        assert!(store
            .reserve(&request(id, 1_000))
            .await
            .unwrap()
            .is_reserved());
    }
    let before = std::fs::metadata(journal_0(&path)).unwrap().len();
    store.limit_journal_room(Some(20));
    let error = store.reserve(&request("d", 1_000)).await.unwrap_err();
    assert!(matches!(error, StoreError::Unavailable(_)), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("journal") && message.contains(&path.display().to_string()),
        "{message}"
    );
    assert!(message.contains("No space left"), "{message}");
    assert_eq!(
        std::fs::metadata(journal_0(&path)).unwrap().len(),
        before + 20,
        "what fitted of the append was written"
    );
    let state = store.scope_state(&key(10_000)).await.unwrap();
    assert_eq!(state.reserved, 3_000, "the refused call changed nothing");
    store.crash();

    let store = reopen(&path).await;
    let state = store.scope_state(&key(10_000)).await.unwrap();
    assert_eq!(state.reserved, 3_000, "a, b and c kept; d never answered");
    assert!(matches!(
        store.settle(&settlement("d", 900)).await,
        Err(StoreError::UnknownReservation(_))
    ));
    assert!(store
        .reserve(&request("d", 1_000))
        .await
        .unwrap()
        .is_reserved());
    assert!(store.settle(&settlement("a", 900)).await.unwrap().applied);
    store.flush().await.unwrap();
    let rows = store.reconcile().await.unwrap();
    assert!(rows.iter().all(|row| row.drift() == 0), "{rows:?}");
}
