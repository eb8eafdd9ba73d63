//! Settlements no request waits for any more: a [`Settling`] dropped or
//! kept waiting past [`SETTLE_WAIT`], and [`Unabandoned`] work whose caller
//! left, go on to their end in the background, counted in
//! [`BackgroundSettles`] so that a shutting-down gateway waits for them.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::budget::SettleOutcome;

pub(super) type SettleFuture = Pin<Box<dyn Future<Output = Option<SettleOutcome>> + Send>>;

/// How long a response waits for its settlement. A store that is down or
/// full (a settle retried for two reservation TTLs) must not hold the
/// client for as long: past this the response goes on, answered as not
/// settled, and the settlement finishes in the background, the call's
/// reservation holding its whole bound meanwhile, so nothing is
/// overspent.
const SETTLE_WAIT: Duration = Duration::from_secs(5);

/// A settlement in flight. Dropped before it is done, it is not lost: it
/// finishes in the background. Awaited, it answers within [`SETTLE_WAIT`]:
/// `None` when the settlement had to go on in the background.
pub struct Settling {
    pub(super) future: Option<SettleFuture>,
    pub(super) background: BackgroundSettles,
    /// Set on the first poll, which always happens on the runtime (a
    /// `Settling` may be made and dropped outside it).
    pub(super) patience: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Future for Settling {
    type Output = Option<SettleOutcome>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(future) = self.future.as_mut() else {
            return Poll::Ready(None);
        };
        if let Poll::Ready(outcome) = future.as_mut().poll(cx) {
            self.future = None;
            return Poll::Ready(outcome);
        }
        let patience = self
            .patience
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(SETTLE_WAIT)));
        std::task::ready!(patience.as_mut().poll(cx));
        if let Some(future) = self.future.take() {
            tracing::warn!(
                waited_secs = SETTLE_WAIT.as_secs(),
                "the budget store has not taken a settlement yet; the response goes on, and \
                 the settlement is retried in the background (the reservation holds the \
                 call's bound meanwhile)"
            );
            self.background.finish(future);
        }
        Poll::Ready(None)
    }
}

impl Drop for Settling {
    fn drop(&mut self) {
        if let Some(future) = self.future.take() {
            self.background.finish(future);
        }
    }
}

// === impl Unabandoned ===

/// Work its caller drives, finished in the background if the caller goes
/// (see [`Settler::unabandoned`](super::Settler::unabandoned)).
pub struct Unabandoned<T: Send + 'static> {
    pub(super) work: Option<Pin<Box<dyn Future<Output = T> + Send>>>,
    pub(super) background: BackgroundSettles,
}

impl<T: Send + 'static> Future for Unabandoned<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let Some(work) = self.work.as_mut() else {
            // Polled after it completed: a caller's bug, never ours.
            return Poll::Pending;
        };
        let output = std::task::ready!(work.as_mut().poll(cx));
        self.work = None;
        Poll::Ready(output)
    }
}

impl<T: Send + 'static> Drop for Unabandoned<T> {
    fn drop(&mut self) {
        if let Some(work) = self.work.take() {
            self.background.finish(Box::pin(async move {
                work.await;
                None
            }));
        }
    }
}

// === impl BackgroundSettles ===

/// Settlements no request waits for any more, counted so that shutdown can
/// wait for them.
#[derive(Clone, Default)]
pub struct BackgroundSettles {
    shared: Arc<Pending>,
}

#[derive(Default)]
struct Pending {
    count: AtomicUsize,
    idle: Notify,
}

impl BackgroundSettles {
    /// Drives `future` to its end. A store that answers at once (the memory
    /// store) finishes here and now; otherwise it goes on in a task.
    pub(super) fn finish(&self, mut future: SettleFuture) {
        let mut cx = Context::from_waker(Waker::noop());
        if future.as_mut().poll(&mut cx).is_ready() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!("no runtime to finish a settlement on; the reservation will expire");
            return;
        };
        self.shared.count.fetch_add(1, Ordering::SeqCst);
        let shared = self.shared.clone();
        runtime.spawn(async move {
            future.await;
            if shared.count.fetch_sub(1, Ordering::SeqCst) == 1 {
                shared.idle.notify_waiters();
            }
        });
    }

    /// How many settlements are running in the background.
    pub fn pending(&self) -> usize {
        self.shared.count.load(Ordering::SeqCst)
    }

    /// Waits until no settlement runs in the background, or `limit` passes;
    /// returns how many are still running.
    pub async fn drained(&self, limit: Duration) -> usize {
        let deadline = Instant::now() + limit;
        loop {
            let idle = self.shared.idle.notified();
            if self.pending() == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return self.pending();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::super::Settler;
    use super::*;
    use crate::budget::{BudgetStore, MemoryStore, Rules};
    use crate::metrics::Metrics;

    /// A settlement dropped while its store has not answered yet goes on in
    /// the background until it is done, and shutdown can wait for it.
    #[tokio::test]
    async fn a_dropped_settling_finishes_in_the_background() {
        let background = BackgroundSettles::default();
        let (answer, answered) = tokio::sync::oneshot::channel::<()>();
        let done = Arc::new(AtomicBool::new(false));
        let finished = done.clone();
        let settling = Settling {
            future: Some(Box::pin(async move {
                let _ = answered.await;
                finished.store(true, Ordering::SeqCst);
                None
            })),
            background: background.clone(),
            patience: None,
        };
        drop(settling);
        assert_eq!(background.pending(), 1);
        assert_eq!(background.drained(Duration::from_millis(20)).await, 1);
        answer.send(()).unwrap();
        assert_eq!(background.drained(Duration::from_secs(5)).await, 0);
        assert!(done.load(Ordering::SeqCst));
    }

    /// Unabandoned work its caller drives to the end answers the caller; work
    /// whose caller is dropped midway goes on to its end in the background,
    /// and shutdown waits for it.
    #[tokio::test]
    async fn unabandoned_work_outlives_its_caller() {
        let settler = Settler::new(
            BudgetStore::Memory(MemoryStore::new(Rules::default())),
            Arc::new(Metrics::new()),
            Duration::from_secs(60),
        );
        assert_eq!(settler.unabandoned(async { 7 }).await, 7);

        let (answer, answered) = tokio::sync::oneshot::channel::<()>();
        let done = Arc::new(AtomicBool::new(false));
        let finished = done.clone();
        let work = settler.unabandoned(async move {
            let _ = answered.await;
            finished.store(true, Ordering::SeqCst);
        });
        // The caller gives up before the work is done.
        assert!(tokio::time::timeout(Duration::from_millis(20), work)
            .await
            .is_err());
        assert_eq!(settler.drained(Duration::from_millis(20)).await, 1);
        answer.send(()).unwrap();
        assert_eq!(settler.drained(Duration::from_secs(5)).await, 0);
        assert!(done.load(Ordering::SeqCst));
    }

    /// A store that does not take a settlement keeps the response waiting
    /// only [`SETTLE_WAIT`]: then the settlement goes on in the background.
    #[tokio::test]
    async fn a_settlement_the_store_does_not_take_goes_on_in_the_background() {
        let background = BackgroundSettles::default();
        let (answer, answered) = tokio::sync::oneshot::channel::<()>();
        let settling = Settling {
            future: Some(Box::pin(async move {
                let _ = answered.await;
                None
            })),
            background: background.clone(),
            patience: None,
        };
        let started = tokio::time::Instant::now();
        assert_eq!(settling.await, None);
        let waited = started.elapsed();
        assert!(
            super::SETTLE_WAIT <= waited && waited < super::SETTLE_WAIT * 2,
            "{waited:?}"
        );
        assert_eq!(background.pending(), 1);
        answer.send(()).unwrap();
        assert_eq!(background.drained(Duration::from_secs(5)).await, 0);
    }

    /// One that can finish at once (the memory store) does so on the spot.
    #[tokio::test]
    async fn a_ready_settling_finishes_on_drop() {
        let background = BackgroundSettles::default();
        let done = Arc::new(AtomicBool::new(false));
        let finished = done.clone();
        drop(Settling {
            future: Some(Box::pin(async move {
                finished.store(true, Ordering::SeqCst);
                None
            })),
            background: background.clone(),
            patience: None,
        });
        assert!(done.load(Ordering::SeqCst));
        assert_eq!(background.pending(), 0);
    }

    // === Usage no call can have ===
}
