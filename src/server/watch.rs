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

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
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
#[derive(Clone)]
pub struct Watch(Arc<Shared>);

struct Shared {
    state: Mutex<State>,
    /// Woken when a deadline may have come nearer: the last call in
    /// flight ended, or a request head began to arrive.
    changed: Notify,
}

struct State {
    /// Calls whose response has not been sent in full.
    in_flight: usize,
    /// When the request head now awaited began to arrive (or the
    /// connection opened); `None` while no head is on its way.
    head_since: Option<Instant>,
    /// When the connection's last response ended.
    idle_since: Instant,
}

impl Watch {
    /// A new connection: it must send a request head in time.
    pub fn new() -> Self {
        let now = Instant::now();
        Watch(Arc::new(Shared {
            state: Mutex::new(State {
                in_flight: 0,
                head_since: Some(now),
                idle_since: now,
            }),
            changed: Notify::new(),
        }))
    }

    // A std mutex: held only to update a few fields, never across an await.
    fn state(&self) -> MutexGuard<'_, State> {
        self.0
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn on_read(&self) {
        let mut state = self.state();
        if state.in_flight == 0 && state.head_since.is_none() {
            state.head_since = Some(Instant::now());
            drop(state);
            self.0.changed.notify_one();
        }
    }

    /// A call has begun (its head was read); it lasts as long as the
    /// returned guard.
    pub fn call(&self) -> Call {
        let mut state = self.state();
        state.in_flight += 1;
        state.head_since = None;
        Call(self.clone())
    }

    /// When the connection is due to close, and why; `None` while a call
    /// is in flight.
    fn deadline(&self, limits: Limits) -> Option<(Instant, &'static str)> {
        let state = self.state();
        if state.in_flight > 0 {
            return None;
        }
        Some(match state.head_since {
            Some(since) => (
                since + limits.header_read,
                "request head not received in time",
            ),
            None => (state.idle_since + limits.idle, "idle"),
        })
    }

    /// Completes once the connection should be closed, with the reason.
    pub async fn expired(&self, limits: Limits) -> &'static str {
        loop {
            match self.deadline(limits) {
                None => self.0.changed.notified().await,
                Some((deadline, reason)) if deadline <= Instant::now() => return reason,
                Some((deadline, _)) => {
                    tokio::select! {
                        () = sleep_until(deadline) => {}
                        () = self.0.changed.notified() => {}
                    }
                }
            }
        }
    }
}

/// A call in flight on a watched connection.
pub struct Call(Watch);

impl Drop for Call {
    fn drop(&mut self) {
        let Call(watch) = self;
        let mut state = watch.state();
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0 {
            state.idle_since = Instant::now();
            drop(state);
            watch.0.changed.notify_one();
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
