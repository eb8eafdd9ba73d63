//! The ledger drain: on a gateway with a Redis store and a ledger sink
//! (`store.ledger_sink_path`), a task that moves the raw ledger out of
//! Redis continuously, so Redis holds per-call history for seconds, not
//! weeks.
//!
//! For each tag the store knows, in turn: read a page from the start of
//! the tag's stream, commit it to the sink ([`sink`]), then fold and trim
//! exactly the entries up to the page's last id (`drain.lua`). A crash or
//! an error between the commit and the fold leaves the page in Redis, to
//! be written again and dropped by the sink as duplicates: at least once
//! into the sink, exactly once into the folded sums.
//!
//! While the sink cannot be opened or written, nothing is trimmed: the
//! entries wait in Redis, each failure is counted
//! (`tollgate_ledger_sink_errors_total`), the age of the oldest waiting
//! entry is a gauge, and a warning is logged when the trouble starts and
//! then once a minute, not once per entry. Entries still waiting after
//! `store.ledger_buffer_hours` are folded by the sweep without the sink,
//! so Redis stays bounded. The calls themselves never wait on the sink.
//!
//! Several gateways may drain the same Redis: each writes what it reads to
//! its own sink (or a shared one), and the fold only folds entries still
//! in the stream, so the counters stay exact; an entry drained by two
//! gateways into two files is in both.

pub mod sink;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::time::MissedTickBehavior;

use crate::budget::redis::StreamEntry;
use crate::budget::{RedisStore, StoreError, SweeperGuard};
use crate::metrics::{Metrics, StoreOp};
use sink::{LedgerSink, SinkError};

/// Entries per page: one sink transaction and one `drain.lua` call, small
/// enough that the fold never blocks Redis for long, and the calls
/// waiting behind it are few.
const PAGE: usize = 250;

/// How often a pass starts (at once again while one left pages behind):
/// often, so each pass moves a few pages rather than a second's worth at
/// once, which stalls the calls behind it (their p99, not their median).
pub const DRAIN_EVERY: Duration = Duration::from_millis(200);
/// Pages one tag drains per pass before the next tag's turn.
const PAGES_PER_TAG: usize = 20;
/// Tags one pass visits, as in the sweep: the rest wait for the next.
const TAGS_PER_PASS: usize = 256;
/// While the sink or Redis keeps failing, a reminder this often.
const REMIND_EVERY: Duration = Duration::from_secs(60);

/// Starts the drain on the current Tokio runtime: a pass every `every`,
/// or at once while a pass left pages behind; it stops when the guard
/// drops.
pub fn spawn(
    store: RedisStore,
    sink_path: PathBuf,
    metrics: Arc<Metrics>,
    every: Duration,
) -> SweeperGuard {
    tracing::info!(
        sink = %sink_path.display(),
        "ledger: drained from Redis to the sink continuously"
    );
    let drain = Drain {
        store,
        sink_path,
        sink: None,
        metrics,
        next_tag: 0,
        oldest: HashMap::new(),
        sink_trouble: Trouble::default(),
        store_trouble: Trouble::default(),
    };
    let task = tokio::spawn(drain.run(every.max(Duration::from_millis(1))));
    SweeperGuard::new(task.abort_handle())
}

struct Drain {
    store: RedisStore,
    sink_path: PathBuf,
    /// Open while it works; dropped on a failure, so the file is opened
    /// afresh (it may have been moved, replaced or repaired).
    sink: Option<LedgerSink>,
    metrics: Arc<Metrics>,
    next_tag: usize,
    /// Per tag, when its oldest entry still in Redis was booked (ms), for
    /// the undrained-age gauge; absent when the tag was last seen drained.
    oldest: HashMap<String, i64>,
    sink_trouble: Trouble,
    store_trouble: Trouble,
}

/// How a pass ended.
enum Pass {
    /// Every visited tag drained.
    Done,
    /// A tag had more pages than its turn: go again without waiting.
    More,
    /// The sink or Redis failed; wait for the next tick.
    Failed,
}

impl Drain {
    async fn run(mut self, every: Duration) {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let pass = self.pass().await;
            self.report_age();
            if !matches!(pass, Pass::More) {
                ticks.tick().await;
            }
        }
    }

    async fn pass(&mut self) -> Pass {
        // A handle of its own, so a call on it can run while `self` logs.
        let store = self.store.clone();
        let tags = store.tags();
        self.oldest.retain(|tag, _| tags.contains(tag));
        let batch = next_tags(&tags, &mut self.next_tag).to_vec();
        if self.sink.is_none() {
            if let Err(error) = self.open_sink().await {
                self.sink_failed(&error);
                // Still read each stream's oldest entry, so the gauge
                // says how long the entries have been waiting.
                for tag in &batch {
                    match self.store_call(store.ledger_page(tag, 1)).await {
                        Some(page) => self.saw_oldest(tag, page.first()),
                        None => return Pass::Failed,
                    }
                }
                return Pass::Failed;
            }
        }
        let mut more = false;
        for tag in &batch {
            for page_number in 0..PAGES_PER_TAG {
                let Some(page) = self.store_call(store.ledger_page(tag, PAGE)).await else {
                    return Pass::Failed;
                };
                self.saw_oldest(tag, page.first());
                if page.is_empty() {
                    break;
                }
                let count = page.len();
                let page = match self.write(tag, page).await {
                    Ok((added, page)) => {
                        self.sink_worked();
                        self.metrics.count_drained(added);
                        page
                    }
                    Err(error) => {
                        self.sink_failed(&error);
                        return Pass::Failed;
                    }
                };
                let fold = store.fold_drained(tag, &page);
                if self.store_call(fold).await.is_none() {
                    return Pass::Failed;
                }
                if count < PAGE {
                    // The stream held no more than this page when read;
                    // what came since is younger than this pass.
                    self.oldest.remove(tag);
                    break;
                }
                if page_number + 1 == PAGES_PER_TAG {
                    more = true;
                }
            }
        }
        if more {
            Pass::More
        } else {
            Pass::Done
        }
    }

    async fn open_sink(&mut self) -> Result<(), SinkError> {
        let path = self.sink_path.clone();
        let opened = tokio::task::spawn_blocking(move || LedgerSink::open(&path))
            .await
            .map_err(|error| SinkError::Open {
                path: self.sink_path.clone(),
                reason: error.to_string(),
            })??;
        self.sink = Some(opened);
        Ok(())
    }

    /// Commits `page` to the sink on a blocking thread; returns how many
    /// entries were new to it, and the page, for its fold.
    async fn write(
        &mut self,
        tag: &str,
        page: Vec<StreamEntry>,
    ) -> Result<(usize, Vec<StreamEntry>), SinkError> {
        let Some(mut sink) = self.sink.take() else {
            return Err(SinkError::Open {
                path: self.sink_path.clone(),
                reason: "not open".to_owned(),
            });
        };
        let tag = tag.to_owned();
        let written = tokio::task::spawn_blocking(move || {
            let written = sink.write(&tag, &page);
            (sink, written, page)
        })
        .await;
        match written {
            Ok((sink, Ok(added), page)) => {
                self.sink = Some(sink);
                Ok((added, page))
            }
            Ok((_, Err(error), _)) => Err(error),
            Err(error) => Err(SinkError::Write {
                path: self.sink_path.clone(),
                reason: error.to_string(),
            }),
        }
    }

    /// Runs a Redis call of the drain, timed and counted as `drain`; `None`
    /// when it failed (logged).
    async fn store_call<T>(
        &mut self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Option<T> {
        match self.metrics.time(StoreOp::Drain, call).await {
            Ok(value) => {
                if let Some(since) = self.store_trouble.recovered() {
                    tracing::info!(
                        after_secs = since.as_secs(),
                        "ledger drain reaches Redis again"
                    );
                }
                Some(value)
            }
            Err(error) => {
                match self.store_trouble.failed() {
                    Some(Log::Start) => {
                        tracing::warn!(%error, "ledger drain cannot read or trim the Redis ledger")
                    }
                    Some(Log::Remind(since)) => tracing::warn!(
                        %error,
                        failing_secs = since.as_secs(),
                        "ledger drain still cannot read or trim the Redis ledger"
                    ),
                    None => {}
                }
                None
            }
        }
    }

    fn sink_failed(&mut self, error: &SinkError) {
        self.sink = None;
        self.metrics.count_sink_error();
        let oldest_secs = self.oldest_age_secs();
        match self.sink_trouble.failed() {
            Some(Log::Start) => tracing::warn!(
                %error,
                oldest_entry_secs = oldest_secs,
                "ledger sink failing: entries stay in Redis until it works again, at most \
                 store.ledger_buffer_hours, then are folded without it"
            ),
            Some(Log::Remind(since)) => tracing::warn!(
                %error,
                failing_secs = since.as_secs(),
                oldest_entry_secs = oldest_secs,
                "ledger sink still failing"
            ),
            None => {}
        }
    }

    fn sink_worked(&mut self) {
        if let Some(since) = self.sink_trouble.recovered() {
            tracing::info!(
                sink = %self.sink_path.display(),
                after_secs = since.as_secs(),
                "ledger sink works again; draining what waited"
            );
        }
    }

    fn saw_oldest(&mut self, tag: &str, first: Option<&StreamEntry>) {
        match first {
            Some(entry) => {
                self.oldest.insert(tag.to_owned(), entry.at_ms);
            }
            None => {
                self.oldest.remove(tag);
            }
        }
    }

    fn oldest_age_secs(&self) -> u64 {
        let now = chrono::Utc::now().timestamp_millis();
        self.oldest
            .values()
            .map(|at| u64::try_from(now.saturating_sub(*at)).unwrap_or(0) / 1_000)
            .max()
            .unwrap_or(0)
    }

    fn report_age(&self) {
        self.metrics.set_undrained_age(self.oldest_age_secs());
    }
}

/// Whether to log a failure: at its start, then every [`REMIND_EVERY`].
#[derive(Default)]
struct Trouble {
    since: Option<Instant>,
    last_log: Option<Instant>,
}

enum Log {
    Start,
    /// Still failing, for this long.
    Remind(Duration),
}

impl Trouble {
    fn failed(&mut self) -> Option<Log> {
        let now = Instant::now();
        let Some(since) = self.since else {
            self.since = Some(now);
            self.last_log = Some(now);
            return Some(Log::Start);
        };
        if self
            .last_log
            .is_none_or(|last| now.duration_since(last) >= REMIND_EVERY)
        {
            self.last_log = Some(now);
            return Some(Log::Remind(now.duration_since(since)));
        }
        None
    }

    /// How long it had failed, if it had.
    fn recovered(&mut self) -> Option<Duration> {
        self.last_log = None;
        self.since.take().map(|since| since.elapsed())
    }
}

/// The tags the next pass visits: up to [`TAGS_PER_PASS`] from `*next`,
/// which moves on past them and starts over at the end.
fn next_tags<'a>(tags: &'a [String], next: &mut usize) -> &'a [String] {
    if *next >= tags.len() {
        *next = 0;
    }
    let end = tags.len().min(*next + TAGS_PER_PASS);
    let batch = &tags[*next..end];
    *next = end;
    batch
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_logged_when_it_starts_then_once_a_minute() {
        let mut trouble = Trouble::default();
        assert!(matches!(trouble.failed(), Some(Log::Start)));
        for _ in 0..100 {
            assert!(trouble.failed().is_none());
        }
        trouble.last_log = Instant::now().checked_sub(REMIND_EVERY);
        assert!(matches!(trouble.failed(), Some(Log::Remind(_))));
        assert!(trouble.failed().is_none());
        assert!(trouble.recovered().is_some());
        assert!(trouble.recovered().is_none());
        assert!(matches!(trouble.failed(), Some(Log::Start)));
    }

    #[test]
    fn many_tags_are_drained_in_turn() {
        let tags: Vec<String> = (0..TAGS_PER_PASS + 1).map(|i| format!("t{i}")).collect();
        let mut next = 0;
        assert_eq!(next_tags(&tags, &mut next).len(), TAGS_PER_PASS);
        assert_eq!(next_tags(&tags, &mut next), &tags[TAGS_PER_PASS..]);
        assert_eq!(next_tags(&tags, &mut next).len(), TAGS_PER_PASS);
    }
}
