//! Closing client connections that hold a slot without using it: one whose
//! request head does not arrive within the header-read timeout (a client
//! trickling its headers, or sending nothing), and a keep-alive connection
//! idle longer than the idle timeout. A connection with a call in flight
//! is never closed here, however quiet its provider.
//!
//! hyper's own header-read timeout also runs while a keep-alive connection
//! waits for its next request, so it cannot tell the two apart; this watch
//! does, from the connection's bytes ([`Watched`]) and its calls
//! ([`Watch::call`], held until the response body is dropped).
//!
//! When the process runs out of file descriptors or connection slots,
//! [`Open::shed_silent`] closes the connections that have sent nothing,
//! longest open first, so that a real call is not left waiting behind
//! them for their header-read timeout.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::{sleep_until, Instant};

/// How long a connection may be slow or idle.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub header_read: Duration,
    pub idle: Duration,
}

/// One connection's state, shared by its bytes, its calls and its timer.
///
/// Plain atomics, and no wake-ups: the bytes and the calls only record
/// what happened, and the timer reads it when it wakes. It wakes at the
/// next deadline the state gives, and at least once per the shorter of the
/// two timeouts: any deadline an event sets is at least that far after the
/// event, so the timer always looks again before it and closes the
/// connection at the deadline itself.
/// A request costs the connection a few atomic stores, not a timer re-arm.
#[derive(Clone)]
pub struct Watch(Arc<Shared>);

struct Shared {
    /// The times below are milliseconds after this.
    opened: Instant,
    /// Calls whose response has not been sent in full.
    in_flight: AtomicUsize,
    /// When the request head now awaited began to arrive (or the
    /// connection opened); [`NO_HEAD`] while no head is on its way.
    head_since: AtomicU64,
    /// When the connection's last response ended.
    idle_since: AtomicU64,
    /// Whether the client has sent a byte.
    read_any: AtomicBool,
    /// Wakes the timer to close the connection now.
    shed: Notify,
}

const NO_HEAD: u64 = u64::MAX;

impl Watch {
    /// A new connection: it must send a request head in time.
    pub fn new() -> Self {
        Watch(Arc::new(Shared {
            opened: Instant::now(),
            in_flight: AtomicUsize::new(0),
            head_since: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            read_any: AtomicBool::new(false),
            shed: Notify::new(),
        }))
    }

    /// Now, in milliseconds since the connection opened.
    fn now(&self) -> u64 {
        u64::try_from(self.0.opened.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }

    fn at(&self, millis: u64) -> Instant {
        self.0.opened + Duration::from_millis(millis)
    }

    fn on_read(&self) {
        let shared = &self.0;
        shared.read_any.store(true, Ordering::Release);
        if shared.in_flight.load(Ordering::Acquire) == 0
            && shared.head_since.load(Ordering::Acquire) == NO_HEAD
        {
            let _ = shared.head_since.compare_exchange(
                NO_HEAD,
                self.now(),
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }

    /// A call has begun (its head was read); it lasts as long as the
    /// returned guard.
    pub fn call(&self) -> Call {
        self.0.in_flight.fetch_add(1, Ordering::AcqRel);
        self.0.head_since.store(NO_HEAD, Ordering::Release);
        Call(self.clone())
    }

    /// When the connection is due to close, and why; `None` while a call
    /// is in flight.
    fn deadline(&self, limits: Limits) -> Option<(Instant, &'static str)> {
        let shared = &self.0;
        if shared.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(match shared.head_since.load(Ordering::Acquire) {
            NO_HEAD => (
                self.at(shared.idle_since.load(Ordering::Acquire)) + limits.idle,
                "idle",
            ),
            since => (
                self.at(since) + limits.header_read,
                "request head not received in time",
            ),
        })
    }

    /// Completes once the connection should be closed, with the reason.
    pub async fn expired(&self, limits: Limits) -> &'static str {
        let timed_out = async {
            loop {
                let now = Instant::now();
                let next_look = now + limits.header_read.min(limits.idle);
                match self.deadline(limits) {
                    Some((deadline, reason)) if deadline <= now => return reason,
                    Some((deadline, _)) => sleep_until(deadline.min(next_look)).await,
                    None => sleep_until(next_look).await,
                }
            }
        };
        tokio::select! {
            reason = timed_out => reason,
            () = self.0.shed.notified() => "closed to free a descriptor: it had sent nothing",
        }
    }
}

impl Shared {
    /// Open, and not a byte from the client yet.
    fn sent_nothing(&self) -> bool {
        !self.read_any.load(Ordering::Acquire) && self.in_flight.load(Ordering::Acquire) == 0
    }
}

/// The connections open, in the order they were accepted.
#[derive(Default)]
pub struct Open {
    // A std mutex: held only to walk the list, never across an await.
    connections: Mutex<VecDeque<Weak<Shared>>>,
}

impl Open {
    /// Records a connection just accepted.
    pub fn add(&self, watch: &Watch) {
        let mut connections = self.lock();
        // Closed connections are forgotten as the list is walked; those at
        // its front, the oldest, go at once.
        while connections.front().is_some_and(|c| c.strong_count() == 0) {
            connections.pop_front();
        }
        connections.push_back(Arc::downgrade(&watch.0));
        if connections.len().is_power_of_two() {
            connections.retain(|connection| connection.strong_count() > 0);
        }
    }

    /// Closes up to `most` connections that have sent nothing, longest
    /// open first; returns how many.
    pub fn shed_silent(&self, most: usize) -> usize {
        let mut connections = self.lock();
        let mut shed = 0;
        connections.retain(|connection| {
            let Some(shared) = connection.upgrade() else {
                return false;
            };
            if shed < most && shared.sent_nothing() {
                shared.shed.notify_one();
                shed += 1;
                return false;
            }
            true
        });
        shed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Weak<Shared>>> {
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// A call in flight on a watched connection.
pub struct Call(Watch);

impl Drop for Call {
    fn drop(&mut self) {
        let Call(watch) = self;
        if watch.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            watch.0.idle_since.store(watch.now(), Ordering::Release);
        }
    }
}

/// A response body that keeps its call in flight until it is sent or
/// dropped.
pub struct Tracked<B> {
    inner: B,
    _call: Call,
}

impl<B> Tracked<B> {
    pub fn new(inner: B, call: Call) -> Self {
        Tracked { inner, _call: call }
    }
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A connection's socket, telling its [`Watch`] when request bytes arrive.
pub struct Watched<T> {
    inner: T,
    watch: Watch,
}

impl<T> Watched<T> {
    pub fn new(inner: T, watch: Watch) -> Self {
        Watched { inner, watch }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.watch.on_read();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
