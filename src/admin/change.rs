//! Writing one key or org document: made only under a free id, changed
//! only at the revision it was read at, each write with its audit entry.
//! When another admin changed the document between the read and the
//! write, it is read again and the change applied afresh.

use serde::Serialize;

use super::{audit, AdminError, Call, WRITE_ATTEMPTS};
use crate::budget::records::RecordKind;
use crate::directory::documents::{KeyDoc, OrgDoc};
use crate::directory::{Snapshot, Stored};

/// A document the admin API writes, and where a snapshot holds it.
pub trait Doc: Clone + Serialize {
    const KIND: RecordKind;

    /// `None` when there is no such entry; `Some(None)` when it comes from
    /// the config file.
    fn find<'s>(snapshot: &'s Snapshot, id: &str) -> Option<Option<&'s Stored<Self>>>;
}

impl Doc for KeyDoc {
    const KIND: RecordKind = RecordKind::Key;

    fn find<'s>(snapshot: &'s Snapshot, id: &str) -> Option<Option<&'s Stored<Self>>> {
        snapshot.keys.get(id).map(|entry| entry.api.as_ref())
    }
}

impl Doc for OrgDoc {
    const KIND: RecordKind = RecordKind::Org;

    fn find<'s>(snapshot: &'s Snapshot, id: &str) -> Option<Option<&'s Stored<Self>>> {
        snapshot.orgs.get(id).map(|entry| entry.api.as_ref())
    }
}

/// Writes a new document under `id`; returns its revision, or 409 when
/// the id is taken (also by a deleted document: ids are never reused).
pub async fn create<D: Doc>(call: &Call<'_>, id: &str, doc: &D) -> Result<u64, AdminError> {
    let taken = || {
        AdminError::conflict(
            "id_taken",
            format!(
                "the id `{id}` is taken (ids of deleted {kind}s stay taken): choose another",
                kind = D::KIND
            ),
        )
    };
    if D::find(&call.gateway.directory.snapshot(), id).is_some() {
        return Err(taken());
    }
    let entry = audit::entry("create", D::KIND, id, None, serde_json::to_value(doc).ok());
    call.write(D::KIND, id, None, doc, entry)
        .await?
        .ok_or_else(taken)
}

/// Applies `edit` to the document of `id` and writes it; returns the
/// document written and its revision.
pub async fn change<D: Doc>(
    call: &Call<'_>,
    id: &str,
    action: &str,
    edit: impl Fn(&mut D),
) -> Result<(D, u64), AdminError> {
    checked_change(call, id, action, |doc: &mut D| {
        edit(doc);
        Ok(())
    })
    .await
}

/// As [`change`], for an edit that checks the document it makes (a field
/// whose meaning depends on another the document already holds): its
/// error is answered and nothing is written.
pub async fn checked_change<D: Doc>(
    call: &Call<'_>,
    id: &str,
    action: &str,
    edit: impl Fn(&mut D) -> Result<(), AdminError>,
) -> Result<(D, u64), AdminError> {
    for _ in 0..WRITE_ATTEMPTS {
        let snapshot = call.gateway.directory.snapshot();
        let stored = D::find(&snapshot, id)
            .ok_or_else(|| AdminError::no_such(D::KIND, id))?
            .ok_or_else(|| AdminError::config_managed(D::KIND, id))?;
        let mut doc = stored.doc.clone();
        edit(&mut doc)?;
        let old = serde_json::to_value(&stored.doc).ok();
        let new = serde_json::to_value(&doc).ok();
        let entry = audit::entry(action, D::KIND, id, old, new);
        if let Some(revision) = call
            .write(D::KIND, id, Some(stored.revision), &doc, entry)
            .await?
        {
            return Ok((doc, revision));
        }
    }
    Err(AdminError::busy(D::KIND, id))
}
