//! The cases about the admin API's keys and orgs (`budget::records`): a
//! write applies only at the revision its writer read, moves the version
//! on and leaves one audit entry, all or nothing; `RecordBook` is the
//! reference every store is compared with.
//!
//! Each fixture's store holds only its own case's documents (on Redis,
//! under a tag of the fixture's own), so versions are counted from 0.

use super::*;
use crate::budget::records::{
    AuditEntry, RecordBook, RecordKind, RecordSet, RecordWrite, StoredRecord, WriteOutcome,
};
use crate::budget::Records;

fn write(kind: RecordKind, id: &str, expect: Option<u64>, body: &str) -> RecordWrite {
    RecordWrite {
        kind,
        id: id.to_owned(),
        expect,
        body: body.to_owned(),
        audit: format!(r#"{{"{kind}":"{id}","body":{body}}}"#),
    }
}

async fn apply(store: &BudgetStore, write: &RecordWrite) -> WriteOutcome {
    store.write_record(write).await.unwrap()
}

fn written(revision: u64, version: u64) -> WriteOutcome {
    WriteOutcome::Written { revision, version }
}

fn conflict(current: Option<u64>) -> WriteOutcome {
    WriteOutcome::Conflict { current }
}

fn seqs(entries: &[AuditEntry]) -> Vec<u64> {
    entries.iter().map(|entry| entry.seq).collect()
}

pub(super) async fn a_new_record_is_revision_1_and_its_id_stays_taken(f: &impl Fixture) {
    let store = f.store();
    assert_eq!(store.records_version().await.unwrap(), 0);
    assert_eq!(store.records().await.unwrap(), RecordSet::default());
    assert!(store.audit(None, 10).await.unwrap().is_empty());

    let create = write(RecordKind::Key, "k1", None, r#"{"name":"first"}"#);
    assert_eq!(apply(&store, &create).await, written(1, 1));
    assert_eq!(store.records_version().await.unwrap(), 1);

    // A second create of the id, and a create over a deleted document
    // (which the store keeps like any other), both find it taken.
    let again = write(RecordKind::Key, "k1", None, r#"{"name":"second"}"#);
    assert_eq!(apply(&store, &again).await, conflict(Some(1)));
    let delete = write(RecordKind::Key, "k1", Some(1), r#"{"deleted":true}"#);
    assert_eq!(apply(&store, &delete).await, written(2, 2));
    assert_eq!(apply(&store, &again).await, conflict(Some(2)));

    let set = store.records().await.unwrap();
    assert_eq!(set.version, 2);
    assert_eq!(
        set.records,
        [StoredRecord {
            kind: RecordKind::Key,
            id: "k1".to_owned(),
            revision: 2,
            body: r#"{"deleted":true}"#.to_owned(),
        }]
    );
    let audit = store.audit(None, 10).await.unwrap();
    assert_eq!(
        audit,
        [
            AuditEntry {
                seq: 2,
                body: delete.audit.clone()
            },
            AuditEntry {
                seq: 1,
                body: create.audit.clone()
            },
        ]
    );
}

pub(super) async fn a_stale_write_conflicts_and_changes_nothing(f: &impl Fixture) {
    let store = f.store();
    let org = |expect, body| write(RecordKind::Org, "acme", expect, body);
    assert_eq!(
        apply(&store, &org(None, r#"{"cap":1}"#)).await,
        written(1, 1)
    );
    assert_eq!(
        apply(&store, &org(Some(1), r#"{"cap":2}"#)).await,
        written(2, 2)
    );

    // Another admin read revision 1 before that write landed.
    assert_eq!(
        apply(&store, &org(Some(1), r#"{"cap":3}"#)).await,
        conflict(Some(2))
    );
    // One that expects a revision not reached yet, or a document that
    // does not exist.
    assert_eq!(
        apply(&store, &org(Some(7), r#"{"cap":4}"#)).await,
        conflict(Some(2))
    );
    let absent = write(RecordKind::Org, "nobody", Some(1), "{}");
    assert_eq!(apply(&store, &absent).await, conflict(None));

    assert_eq!(store.records_version().await.unwrap(), 2);
    let set = store.records().await.unwrap();
    assert_eq!(set.version, 2);
    assert_eq!(set.records.len(), 1);
    assert_eq!(
        (set.records[0].revision, set.records[0].body.as_str()),
        (2, r#"{"cap":2}"#)
    );
    assert_eq!(seqs(&store.audit(None, 10).await.unwrap()), [2, 1]);

    // Read again, the write applies.
    assert_eq!(
        apply(&store, &org(Some(2), r#"{"cap":3}"#)).await,
        written(3, 3)
    );
}

pub(super) async fn a_key_and_an_org_of_one_id_are_separate_records(f: &impl Fixture) {
    let store = f.store();
    let key = write(RecordKind::Key, "acme", None, r#"{"is":"key"}"#);
    let org = write(RecordKind::Org, "acme", None, r#"{"is":"org"}"#);
    assert_eq!(apply(&store, &key).await, written(1, 1));
    assert_eq!(apply(&store, &org).await, written(1, 2));
    let update = write(RecordKind::Org, "acme", Some(1), r#"{"is":"org, again"}"#);
    assert_eq!(apply(&store, &update).await, written(2, 3));

    let set = store.records().await.unwrap();
    let revisions: Vec<_> = set
        .records
        .iter()
        .map(|record| (record.kind, record.id.as_str(), record.revision))
        .collect();
    assert_eq!(
        revisions,
        [(RecordKind::Key, "acme", 1), (RecordKind::Org, "acme", 2)]
    );
    assert_eq!(set.records[0].body, r#"{"is":"key"}"#);
}

pub(super) async fn records_lists_every_document_at_its_version(f: &impl Fixture) {
    let store = f.store();
    let mut expected = Vec::new();
    for (kind, id) in [
        (RecordKind::Org, "beta"),
        (RecordKind::Key, "zed"),
        (RecordKind::Org, "alpha"),
        (RecordKind::Key, "k-1"),
        (RecordKind::Key, "k.2"),
    ] {
        let body = format!(r#"{{"id":"{id}","note":"spaces and \"quotes\" kept"}}"#);
        apply(&store, &write(kind, id, None, &body)).await;
        expected.push(StoredRecord {
            kind,
            id: id.to_owned(),
            revision: 1,
            body,
        });
    }
    expected.sort_by(|a, b| (a.kind, &a.id).cmp(&(b.kind, &b.id)));
    assert_eq!(
        store.records().await.unwrap(),
        RecordSet {
            version: 5,
            records: expected
        }
    );
}

pub(super) async fn audit_pages_newest_first(f: &impl Fixture) {
    let store = f.store();
    let mut bodies = Vec::new();
    for n in 0..5u64 {
        let expect = (n > 0).then_some(n);
        let update = write(RecordKind::Key, "k", expect, &format!(r#"{{"n":{n}}}"#));
        assert_eq!(apply(&store, &update).await, written(n + 1, n + 1));
        bodies.push(update.audit);
    }
    let page = store.audit(None, 2).await.unwrap();
    assert_eq!(seqs(&page), [5, 4]);
    assert_eq!(page[0].body, bodies[4]);
    let page = store.audit(Some(4), 2).await.unwrap();
    assert_eq!(seqs(&page), [3, 2]);
    assert_eq!(page[1].body, bodies[1]);
    assert_eq!(seqs(&store.audit(Some(2), 10).await.unwrap()), [1]);
    assert!(store.audit(Some(1), 10).await.unwrap().is_empty());
    assert!(store.audit(Some(0), 10).await.unwrap().is_empty());
    assert!(store.audit(None, 0).await.unwrap().is_empty());
    assert_eq!(
        seqs(&store.audit(Some(u64::MAX), 3).await.unwrap()),
        [5, 4, 3]
    );
    assert_eq!(
        seqs(&store.audit(Some(99), 100).await.unwrap()),
        [5, 4, 3, 2, 1]
    );
}

pub(super) async fn concurrent_writes_of_one_revision_apply_once(f: &impl Fixture) {
    const WRITERS: u64 = 16;
    let store = f.store();
    apply(&store, &write(RecordKind::Org, "o", None, "{}")).await;
    let tasks: Vec<_> = (0..WRITERS)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move {
                let update = write(RecordKind::Org, "o", Some(1), &format!(r#"{{"by":{n}}}"#));
                let creates = write(RecordKind::Key, &format!("k{n}"), None, "{}");
                (apply(&store, &update).await, apply(&store, &creates).await)
            })
        })
        .collect();
    let mut updates = Vec::new();
    let mut versions = vec![1];
    for task in tasks {
        let (update, create) = task.await.unwrap();
        match create {
            WriteOutcome::Written {
                revision: 1,
                version,
            } => versions.push(version),
            other => panic!("a create of a fresh id got {other:?}"),
        }
        match update {
            WriteOutcome::Written {
                revision: 2,
                version,
            } => versions.push(version),
            WriteOutcome::Conflict { current: Some(2) } => {}
            other => panic!("an update of revision 1 got {other:?}"),
        }
        updates.push(update);
    }
    let applied = updates
        .iter()
        .filter(|update| matches!(update, WriteOutcome::Written { .. }))
        .count();
    assert_eq!(applied, 1, "{updates:?}");
    // Every applied write got a version of its own, with no gap.
    versions.sort_unstable();
    let last = WRITERS + 2;
    assert_eq!(versions, (1..=last).collect::<Vec<_>>());
    assert_eq!(store.records_version().await.unwrap(), last);
    let audit = store.audit(None, 100).await.unwrap();
    assert_eq!(seqs(&audit), (1..=last).rev().collect::<Vec<_>>());
}

pub(super) async fn writes_match_the_reference_book(f: &impl Fixture) {
    let store = f.store();
    let mut book = RecordBook::default();
    // A fixed walk over ids, kinds and expected revisions (right, stale,
    // ahead, absent), so stores are compared on the same sequence.
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    for step in 0..80 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let kind = if state.is_multiple_of(2) {
            RecordKind::Key
        } else {
            RecordKind::Org
        };
        let id = ["a", "b", "c"][usize::try_from(state / 2 % 3).unwrap()];
        let expect = match state / 6 % 4 {
            0 => None,
            1 => book
                .all()
                .records
                .iter()
                .find(|record| record.kind == kind && record.id == id)
                .map(|record| record.revision),
            n => Some(n - 1),
        };
        let update = write(kind, id, expect, &format!(r#"{{"step":{step}}}"#));
        assert_eq!(
            apply(&store, &update).await,
            book.write(&update),
            "step {step}: {update:?}"
        );
    }
    assert_eq!(store.records().await.unwrap(), book.all());
    assert_eq!(store.records_version().await.unwrap(), book.version());
    assert_eq!(
        store.audit(None, 1_000).await.unwrap(),
        book.audit(None, 1_000)
    );
    assert_eq!(
        store.audit(Some(book.version() / 2), 5).await.unwrap(),
        book.audit(Some(book.version() / 2), 5)
    );
}
