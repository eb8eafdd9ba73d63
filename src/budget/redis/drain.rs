//! The store's side of draining the ledger stream to a durable sink: a
//! page of raw entries from the start of a tag's stream, and, once the
//! sink has committed that page, `drain.lua` folding and trimming exactly
//! the entries up to its last id.
//!
//! The drain is at least once: a page the sink committed but whose fold
//! never ran (the gateway died, Redis was unreachable) is read and written
//! again, and the sink drops the duplicates (unique exec id and status).
//! The fold itself is exactly once, whoever calls it: an entry is folded
//! in the script that trims it, and a retried call finds it gone.

use super::connection::Request;
use super::scripts::{self, TagKeys};
use super::RedisStore;
use crate::budget::StoreError;
use crate::money::{UsdMicros, UsdMicrosDelta};

/// One ledger entry as the stream holds it (fields in `lua/common.lua`),
/// with the id that orders it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamEntry {
    /// The stream id, `<ms>-<seq>`.
    pub id: String,
    pub exec_id: String,
    pub key: String,
    pub org: Option<String>,
    /// The agent run the call belonged to, in entries that name one.
    pub run: Option<String>,
    /// The customer the call was for, in entries that name one.
    pub customer: Option<String>,
    pub model: String,
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub cache_write_tokens: u64,
    pub output_tokens: u64,
    pub reserved: UsdMicros,
    /// What the entry moved its counters by (signed).
    pub actual: UsdMicrosDelta,
    /// `ok`, `overrun`, `estimated`, `late`, `expired` or `adjustment`, as
    /// the stream spells it.
    pub status: String,
    /// An adjustment's note.
    pub note: Option<String>,
    /// When it was booked, in ms on the store's clock.
    pub at_ms: i64,
    pub key_period: String,
    pub org_period: Option<String>,
}

impl StreamEntry {
    fn parse(id: String, fields: Vec<String>) -> Result<StreamEntry, StoreError> {
        let unreadable =
            |what: &str| StoreError::Unavailable(format!("unreadable ledger entry {id}: {what}"));
        // Each field by name, in one pass (a page is hundreds of entries).
        let mut text: [Option<String>; FIELDS.len()] = Default::default();
        let mut pairs = fields.into_iter();
        while let (Some(name), Some(value)) = (pairs.next(), pairs.next()) {
            if let Some(at) = FIELDS.iter().position(|field| *field == name) {
                text[at] = Some(value);
            }
        }
        let [exec, key, org, run, cust, model, input, cached, written, output, reserved, act, st, note, at, kp, op] =
            text;
        let required = |value: Option<String>, name: &str| value.ok_or_else(|| unreadable(name));
        let number = |value: Option<String>, name: &str| {
            required(value, name)
                .and_then(|value| value.parse::<u64>().map_err(|_| unreadable(name)))
        };
        Ok(StreamEntry {
            exec_id: required(exec, "exec")?,
            key: required(key, "key")?,
            model: required(model, "model")?,
            status: required(st, "st")?,
            key_period: required(kp, "kp")?,
            input_tokens: number(input, "in")?,
            cached_input_tokens: number(cached, "cin")?,
            cache_write_tokens: number(written, "cw")?,
            output_tokens: number(output, "out")?,
            reserved: number(reserved, "res")?,
            actual: required(act, "act")?
                .parse()
                .map_err(|_| unreadable("act"))?,
            at_ms: required(at, "at")?.parse().map_err(|_| unreadable("at"))?,
            org,
            run,
            customer: cust,
            note,
            org_period: op,
            id,
        })
    }
}

/// An entry's fields as the stream names them (see `lua/common.lua`).
const FIELDS: [&str; 17] = [
    "exec", "key", "org", "run", "cust", "model", "in", "cin", "cw", "out", "res", "act", "st",
    "note", "at", "kp", "op",
];

impl RedisStore {
    /// Up to `limit` of the tag's ledger entries, oldest first: the page a
    /// drain hands its sink.
    pub async fn ledger_page(
        &self,
        tag: &str,
        limit: usize,
    ) -> Result<Vec<StreamEntry>, StoreError> {
        let keys = TagKeys::new(tag);
        let mut xrange = ::redis::cmd("XRANGE");
        xrange
            .arg(keys.ledger())
            .arg("-")
            .arg("+")
            .arg("COUNT")
            .arg(limit);
        let page: Vec<(String, Vec<String>)> = self
            .inner
            .connection
            .call(
                self.inner.policy,
                "read a ledger page",
                Request::Command(&xrange),
            )
            .await?;
        page.into_iter()
            .map(|(id, fields)| StreamEntry::parse(id, fields))
            .collect()
    }

    /// Folds into their counters' folded sums, and trims from the stream,
    /// the tag's entries of `page` that are still there, in one
    /// `drain.lua` call; returns how many it folded. `page` must be an
    /// unbroken run of entries from the stream's start, as
    /// [`RedisStore::ledger_page`] reads it (or the first part of one):
    /// while the page is whole in the stream, the script adds the sums
    /// taken here and trims every entry up to its last, without reading
    /// them again. Call it only once the sink has committed the page.
    pub async fn fold_drained(&self, tag: &str, page: &[StreamEntry]) -> Result<usize, StoreError> {
        let args = scripts::drain_args(page);
        let reply = self
            .run(
                &self.inner.scripts.drain,
                "fold a drained page",
                &TagKeys::new(tag),
                &args,
            )
            .await?;
        scripts::drain_reply(&reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<String> {
        pairs
            .iter()
            .flat_map(|(name, value)| [name.to_string(), value.to_string()])
            .collect()
    }

    const CALL: [(&str, &str); 13] = [
        ("exec", "e1"),
        ("key", "alice"),
        ("model", "gpt-4o-mini"),
        ("in", "10"),
        ("cin", "2"),
        ("cw", "0"),
        ("out", "5"),
        ("res", "900"),
        ("act", "-40"),
        ("st", "late"),
        ("kp", "2026-11-30"),
        ("at", "1764500000123"),
        ("org", "acme"),
    ];

    #[test]
    fn an_entry_reads_with_or_without_its_optional_fields() {
        let mut with_run = CALL.to_vec();
        with_run.push(("op", "2026-11"));
        with_run.push(("run", "run-7"));
        let entry = StreamEntry::parse("1-0".to_owned(), fields(&with_run)).unwrap();
        assert_eq!(entry.actual, -40);
        assert_eq!(entry.run.as_deref(), Some("run-7"));
        assert_eq!(entry.org_period.as_deref(), Some("2026-11"));
        assert_eq!(entry.at_ms, 1_764_500_000_123);
        let plain = StreamEntry::parse("1-0".to_owned(), fields(&CALL[..12])).unwrap();
        assert_eq!((plain.org, plain.run, plain.note), (None, None, None));
    }

    #[test]
    fn an_entry_missing_a_field_is_refused_naming_it() {
        let error = StreamEntry::parse("1-0".to_owned(), fields(&CALL[1..])).unwrap_err();
        assert!(error.to_string().contains("exec"), "{error}");
        let mut bad = CALL.to_vec();
        bad[3] = ("in", "ten");
        let error = StreamEntry::parse("1-0".to_owned(), fields(&bad)).unwrap_err();
        assert!(error.to_string().contains("in"), "{error}");
    }
}
