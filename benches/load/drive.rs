//! The ways load is generated.
//!
//! - Closed loop: N connections, each sending its next request as soon as
//!   the last one is answered. It finds the most a configuration carries,
//!   and with N = 1 the latency of one call on an idle system.
//! - Open loop: requests start at a fixed rate whatever happens to the
//!   earlier ones, and each latency is measured from the request's
//!   *intended* start. A configuration that stalls for 10 ms is charged
//!   those 10 ms on every request that should have started meanwhile —
//!   the coordinated omission a closed loop hides.
//! - Scripted: each connection sends its own list of bodies in order, each
//!   once its last call is answered — an agent resending its conversation.
//!   Bounded by the bodies' count, so every configuration is sent the same.
//!
//! The open loop is paced by a plain OS thread: tokio's timer rounds every
//! sleep up to the next millisecond, which would add up to 1 ms to each
//! latency, while a thread sleeping in the kernel wakes within tens of
//! microseconds. That lag is measured and reported beside the results.

use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::calls::Calls;
use crate::client::{Conn, Reply, Target};
use crate::error::BenchError;

/// The proxied route every call goes to.
pub const CHAT_PATH: &str = "/v1/chat/completions";

/// Upper bound on requests of one closed-loop connection, so the loop is
/// bounded in count as well as in time.
const MAX_REQUESTS_PER_CONNECTION: u64 = 50_000_000;

/// Longest a phase may overrun its duration (stuck calls) before it is
/// abandoned.
const OVERRUN: Duration = Duration::from_secs(30);

/// Latencies are recorded in nanoseconds, from 1 ns to 2 minutes, to
/// three significant digits.
pub fn histogram() -> Histogram<u64> {
    match Histogram::new_with_bounds(1, 120_000_000_000, 3) {
        Ok(histogram) => histogram,
        Err(error) => unreachable!("fixed histogram bounds are valid: {error}"),
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// What one phase measured.
pub struct Sample {
    pub latency: Histogram<u64>,
    pub ok: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// From the first start to the last completion.
    pub elapsed: Duration,
    /// Σ `x-tollgate-cost-usd-micros` of the answered calls.
    pub charged: u64,
    /// Open loop: how late the pacer started requests.
    pub pacer_lag: Histogram<u64>,
}

impl Sample {
    pub fn empty() -> Sample {
        Sample {
            latency: histogram(),
            ok: 0,
            errors: 0,
            first_error: None,
            elapsed: Duration::ZERO,
            charged: 0,
            pacer_lag: histogram(),
        }
    }

    pub fn rps(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn record(&mut self, outcome: Result<Reply, BenchError>, latency: Duration) {
        match outcome {
            Ok(reply) if reply.status == 200 => {
                self.ok += 1;
                self.charged = self.charged.saturating_add(reply.cost.unwrap_or(0));
                self.latency.saturating_record(nanos(latency));
            }
            Ok(reply) => {
                // A 502 or 504 after the request may have reached the
                // provider is charged, and says what.
                self.charged = self.charged.saturating_add(reply.cost.unwrap_or(0));
                let body: String = String::from_utf8_lossy(&reply.body)
                    .chars()
                    .take(300)
                    .collect();
                self.fail(format!("status {}: {body}", reply.status));
            }
            Err(error) => self.fail(error.to_string()),
        }
    }

    fn fail(&mut self, error: String) {
        self.errors += 1;
        self.first_error.get_or_insert(error);
    }

    /// Adds `other`'s counts to this one; `elapsed` is left to the caller.
    pub fn merge(&mut self, other: &Sample) {
        self.ok += other.ok;
        self.errors += other.errors;
        self.charged = self.charged.saturating_add(other.charged);
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
        // Same bounds on both sides: adding cannot fail.
        let _ = self.latency.add(&other.latency);
        let _ = self.pacer_lag.add(&other.pacer_lag);
    }
}

async fn call(conn: &mut Conn, target: &Target, calls: &Calls) -> Result<Reply, BenchError> {
    conn.call(target.post(CHAT_PATH, calls.next_body())?).await
}

/// `connections` connections, each calling back to back for `duration`.
pub async fn closed_loop(
    target: &Target,
    calls: &Arc<Calls>,
    connections: usize,
    duration: Duration,
) -> Result<Sample, BenchError> {
    // Connections are opened before the clock starts: the measured window
    // is requests only.
    let mut conns = Vec::with_capacity(connections);
    for _ in 0..connections {
        conns.push(Conn::open(target.addr).await?);
    }
    let started = Instant::now();
    let deadline = started + duration;
    let mut workers = JoinSet::new();
    for conn in conns {
        let (target, calls) = (target.clone(), calls.clone());
        workers.spawn(async move { closed_loop_worker(conn, &target, &calls, deadline).await });
    }
    joined(workers, started, duration + OVERRUN, "a closed-loop phase").await
}

/// Every worker's sample merged, timed from `started`; a timeout past
/// `limit`.
async fn joined(
    mut workers: JoinSet<Sample>,
    started: Instant,
    limit: Duration,
    phase: &'static str,
) -> Result<Sample, BenchError> {
    let mut total = Sample::empty();
    let collect = async {
        while let Some(done) = workers.join_next().await {
            if let Ok(sample) = done {
                total.merge(&sample);
            }
        }
    };
    tokio::time::timeout(limit, collect)
        .await
        .map_err(|_| BenchError::Timeout(phase, limit))?;
    total.elapsed = started.elapsed();
    Ok(total)
}

/// A connection the last call closed replaced by a fresh one; false
/// (the failure recorded) when none can be opened.
async fn reopened(conn: &mut Conn, target: &Target, sample: &mut Sample) -> bool {
    if conn.is_open() {
        return true;
    }
    match Conn::open(target.addr).await {
        Ok(fresh) => {
            *conn = fresh;
            true
        }
        Err(error) => {
            sample.fail(error.to_string());
            false
        }
    }
}

async fn closed_loop_worker(
    mut conn: Conn,
    target: &Target,
    calls: &Calls,
    deadline: Instant,
) -> Sample {
    let mut sample = Sample::empty();
    for _ in 0..MAX_REQUESTS_PER_CONNECTION {
        let start = Instant::now();
        if start >= deadline {
            break;
        }
        let outcome = call(&mut conn, target, calls).await;
        sample.record(outcome, start.elapsed());
        if !reopened(&mut conn, target, &mut sample).await {
            break;
        }
    }
    sample
}

/// Each script on a connection of its own, its bodies sent in order, each
/// once the last one is answered; abandoned after `limit`.
pub async fn scripted(
    target: &Target,
    scripts: Vec<Vec<Bytes>>,
    limit: Duration,
) -> Result<Sample, BenchError> {
    let mut conns = Vec::with_capacity(scripts.len());
    for _ in &scripts {
        conns.push(Conn::open(target.addr).await?);
    }
    let started = Instant::now();
    let mut workers = JoinSet::new();
    for (conn, bodies) in conns.into_iter().zip(scripts) {
        let target = target.clone();
        workers.spawn(async move { scripted_worker(conn, &target, bodies).await });
    }
    joined(workers, started, limit, "a scripted phase").await
}

async fn scripted_worker(mut conn: Conn, target: &Target, bodies: Vec<Bytes>) -> Sample {
    let mut sample = Sample::empty();
    for body in bodies {
        let start = Instant::now();
        let outcome = match target.post(CHAT_PATH, body) {
            Ok(request) => conn.call(request).await,
            Err(error) => Err(error),
        };
        sample.record(outcome, start.elapsed());
        if !reopened(&mut conn, target, &mut sample).await {
            break;
        }
    }
    sample
}

/// What the open loop's requests share: idle connections, the cap on
/// requests in flight, and where results go.
struct OpenLoop {
    target: Target,
    calls: Arc<Calls>,
    idle: Mutex<Vec<Conn>>,
    in_flight: Semaphore,
    tally: Arc<Mutex<Sample>>,
}

/// `rate` requests per second for `duration`, each timed from its intended
/// start; at most `max_in_flight` at once (the rest wait, and the wait
/// counts in their latency).
pub async fn open_loop(
    target: &Target,
    calls: &Arc<Calls>,
    rate: u32,
    duration: Duration,
    max_in_flight: usize,
) -> Result<Sample, BenchError> {
    let tally = Arc::new(Mutex::new(Sample::empty()));
    let elapsed = open_loop_into(target, calls, rate, duration, max_in_flight, &tally).await?;
    let mut sample = take(&tally);
    sample.elapsed = elapsed;
    Ok(sample)
}

/// The open loop of [`open_loop`], recording each completed call and each
/// pacer lag into `tally` as they happen, so that another thread can take
/// the results part way (the soak's interval lines). Returns the time from
/// the first intended start to the last completion.
pub async fn open_loop_into(
    target: &Target,
    calls: &Arc<Calls>,
    rate: u32,
    duration: Duration,
    max_in_flight: usize,
    tally: &Arc<Mutex<Sample>>,
) -> Result<Duration, BenchError> {
    let rate = rate.max(1);
    let count = ((f64::from(rate) * duration.as_secs_f64()).ceil() as u64).max(1);
    let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
    let shared = Arc::new(OpenLoop {
        target: target.clone(),
        calls: calls.clone(),
        idle: Mutex::new(Vec::new()),
        in_flight: Semaphore::new(max_in_flight.max(1)),
        tally: tally.clone(),
    });
    // A few warm connections so the first requests do not all pay a
    // connect; more are opened as load requires.
    for _ in 0..max_in_flight.clamp(1, 4) {
        let conn = Conn::open(target.addr).await?;
        lock(&shared.idle).push(conn);
    }
    let runtime = tokio::runtime::Handle::current();
    let start = Instant::now() + Duration::from_millis(5);
    // Requests are awaited as they are started rather than gathered until
    // the end: a finished task's memory stays allocated until its handle
    // goes, which over a long soak would grow the client by every call.
    let (started, mut requests) = tokio::sync::mpsc::unbounded_channel();
    let pacer_shared = shared.clone();
    let pacer = thread::spawn(move || {
        for n in 0..count {
            let intended = start + interval.mul_f64(n as f64);
            let now = Instant::now();
            if intended > now {
                thread::sleep(intended - now);
            }
            lock(&pacer_shared.tally)
                .pacer_lag
                .saturating_record(nanos(intended.elapsed()));
            let request = runtime.spawn(open_loop_request(pacer_shared.clone(), intended));
            if started.send(request).is_err() {
                break;
            }
        }
    });
    let wait_all = async {
        while let Some(request) = requests.recv().await {
            let _ = request.await;
        }
    };
    let waited = tokio::time::timeout(duration + OVERRUN, wait_all).await;
    // The pacer has returned by now (its last request was due at
    // `duration`), or panicked: joining does not wait.
    pacer
        .join()
        .map_err(|_| BenchError::Invalid("the pacer thread panicked".to_owned()))?;
    waited.map_err(|_| BenchError::Timeout("an open-loop phase", duration + OVERRUN))?;
    Ok(start.elapsed())
}

/// Takes the results recorded so far, leaving an empty sample in their
/// place.
pub fn take(tally: &Mutex<Sample>) -> Sample {
    std::mem::replace(&mut *lock(tally), Sample::empty())
}

async fn open_loop_request(shared: Arc<OpenLoop>, intended: Instant) {
    let Ok(_permit) = shared.in_flight.acquire().await else {
        return;
    };
    // A connection left idle past the gateway's keep-alive timeout (a
    // soak's quiet spell after a burst) has been closed by the gateway;
    // sending on it would fail the call for the client's sake.
    let pooled = {
        let mut idle = lock(&shared.idle);
        std::iter::from_fn(|| idle.pop()).find(Conn::is_open)
    };
    let conn = match pooled {
        Some(conn) => Ok(conn),
        None => Conn::open(shared.target.addr).await,
    };
    let (outcome, conn) = match conn {
        Ok(mut conn) => (
            call(&mut conn, &shared.target, &shared.calls).await,
            Some(conn),
        ),
        Err(error) => (Err(error), None),
    };
    let latency = intended.elapsed();
    lock(&shared.tally).record(outcome, latency);
    if let Some(conn) = conn.filter(Conn::is_open) {
        lock(&shared.idle).push(conn);
    }
}

/// The results stay readable after a panicking task poisoned a lock.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
