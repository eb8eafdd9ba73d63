//! Many concurrent SSE streams through one configuration: streams start at
//! a fixed rate (so all of them are open at once near the end of the ramp)
//! on connections of their own, and each one is read to its end.
//!
//! Measured per stream: time to first event from its intended start, the
//! events it carried, and the usage its provider reported — which prices
//! what the gateway must have charged, to check that every stream settled.
//! Meanwhile the resident memory of the proxying process is sampled, for
//! its growth per open stream.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::BodyExt;
use tollgate::api::Api;
use tollgate::family::body_usage;
use tollgate::prices::ModelPrice;
use tollgate::sse::{parse_event, SseSplitter};

use crate::calls::Calls;
use crate::client::{Conn, Target};
use crate::drive::{histogram, CHAT_PATH};
use crate::error::BenchError;
use crate::procs::{self, ProcessTree};

/// Upper bound on body frames read from one stream.
const MAX_FRAMES_PER_STREAM: usize = 1_000_000;

/// How often the proxy's memory is sampled while streams run.
const RSS_EVERY: Duration = Duration::from_millis(20);

/// What a streaming phase measured.
pub struct StreamRun {
    pub streams: usize,
    /// Streams that ended with `[DONE]` after reporting their usage.
    pub completed: usize,
    pub errors: usize,
    pub first_error: Option<String>,
    /// Time to first event, from each stream's intended start, in ns.
    pub ttft: Histogram<u64>,
    pub events: u64,
    /// From the first intended start to the end of the last stream.
    pub elapsed: Duration,
    /// What the completed streams cost at the gateway's prices, by the
    /// usage their provider reported.
    pub cost: u64,
    /// Most streams open at once.
    pub peak_open: usize,
    /// Highest resident memory of the watched process while streams ran.
    pub peak_rss_kib: Option<u64>,
}

impl StreamRun {
    pub fn events_per_sec(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// How one stream ended.
struct Outcome {
    ttft: Option<Duration>,
    events: u64,
    /// µUSD the provider's reported usage costs; set once `[DONE]` came.
    cost: Option<u64>,
}

/// Runs `streams` streams started `rate` per second, watching the memory of
/// the processes `watch` (the proxy) meanwhile.
pub async fn run(
    target: &Target,
    calls: &Arc<Calls>,
    streams: usize,
    rate: u32,
    price: &ModelPrice,
    watch: Option<ProcessTree>,
    limit: Duration,
) -> Result<StreamRun, BenchError> {
    let open = Arc::new(AtomicUsize::new(0));
    let peak_open = Arc::new(AtomicUsize::new(0));
    let running = Arc::new(AtomicBool::new(true));
    let sampler = watch.map(|tree| {
        let running = running.clone();
        // Found once: nginx's worker lives as long as its master.
        let pids = tree.pids();
        thread::spawn(move || {
            let mut peak = procs::rss_kib_sum(&pids);
            let stop_by = Instant::now() + limit;
            while running.load(Ordering::Relaxed) && Instant::now() < stop_by {
                peak = peak.max(procs::rss_kib_sum(&pids));
                thread::sleep(RSS_EVERY);
            }
            peak
        })
    });

    let interval = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
    let start = Instant::now() + Duration::from_millis(5);
    let runtime = tokio::runtime::Handle::current();
    let (target_c, calls_c, price_c) = (target.clone(), calls.clone(), price.clone());
    let (open_c, peak_c) = (open.clone(), peak_open.clone());
    // Paced by a thread for the same reason as the open loop (drive.rs).
    let pacer = thread::spawn(move || {
        let mut handles = Vec::with_capacity(streams);
        for n in 0..streams {
            let intended = start + interval.mul_f64(n as f64);
            let now = Instant::now();
            if intended > now {
                thread::sleep(intended - now);
            }
            let (target, body, price) = (target_c.clone(), calls_c.next_body(), price_c.clone());
            let (open, peak) = (open_c.clone(), peak_c.clone());
            handles.push(runtime.spawn(async move {
                let now_open = open.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now_open, Ordering::SeqCst);
                let outcome = one_stream(&target, body, &price, intended).await;
                open.fetch_sub(1, Ordering::SeqCst);
                outcome
            }));
        }
        handles
    });
    let handles = tokio::task::spawn_blocking(move || pacer.join())
        .await
        .map_err(|e| BenchError::Invalid(format!("stream pacer task: {e}")))?
        .map_err(|_| BenchError::Invalid("the stream pacer thread panicked".to_owned()))?;

    let mut run = StreamRun {
        streams,
        completed: 0,
        errors: 0,
        first_error: None,
        ttft: histogram(),
        events: 0,
        elapsed: Duration::ZERO,
        cost: 0,
        peak_open: 0,
        peak_rss_kib: None,
    };
    let collect = async {
        for handle in handles {
            match handle.await {
                Ok(Ok(outcome)) => {
                    run.events += outcome.events;
                    if let Some(ttft) = outcome.ttft {
                        run.ttft
                            .saturating_record(u64::try_from(ttft.as_nanos()).unwrap_or(u64::MAX));
                    }
                    match outcome.cost {
                        Some(cost) => {
                            run.completed += 1;
                            run.cost = run.cost.saturating_add(cost);
                        }
                        None => {
                            run.errors += 1;
                            run.first_error.get_or_insert_with(|| {
                                "stream ended without [DONE] and usage".to_owned()
                            });
                        }
                    }
                }
                Ok(Err(error)) => {
                    run.errors += 1;
                    run.first_error.get_or_insert(error.to_string());
                }
                Err(join) => {
                    run.errors += 1;
                    run.first_error.get_or_insert(join.to_string());
                }
            }
        }
    };
    let finished = tokio::time::timeout(limit, collect).await;
    running.store(false, Ordering::Relaxed);
    run.elapsed = start.elapsed();
    run.peak_open = peak_open.load(Ordering::SeqCst);
    run.peak_rss_kib = sampler.and_then(|s| s.join().ok()).flatten();
    finished.map_err(|_| BenchError::Timeout("a streaming phase", limit))?;
    Ok(run)
}

/// Opens a connection, starts the stream and reads it to its end.
async fn one_stream(
    target: &Target,
    body: Bytes,
    price: &ModelPrice,
    intended: Instant,
) -> Result<Outcome, BenchError> {
    let mut conn = Conn::open(target.addr).await?;
    let response = conn.send(target.post(CHAT_PATH, body)?).await?;
    let status = response.status().as_u16();
    let mut body = response.into_body();
    if status != 200 {
        let text = body.collect().await?.to_bytes();
        return Err(BenchError::Status {
            what: format!("{} stream", target.label),
            status,
            body: String::from_utf8_lossy(&text).chars().take(300).collect(),
        });
    }
    let mut outcome = Outcome {
        ttft: None,
        events: 0,
        cost: None,
    };
    let mut splitter = SseSplitter::new();
    let mut usage = None;
    for _ in 0..MAX_FRAMES_PER_STREAM {
        let Some(frame) = body.frame().await else {
            break;
        };
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        if outcome.ttft.is_none() {
            outcome.ttft = Some(intended.elapsed());
        }
        splitter.push(&data);
        while let Some(event) = splitter.next_event() {
            outcome.events += 1;
            let event = parse_event(&event);
            let data = event.data.trim_ascii();
            if data == b"[DONE]" {
                outcome.cost = usage.map(|usage| price.cost(&usage));
            } else if usage.is_none() {
                // The mock's usage is always sane: an absurd one reads as none.
                usage = body_usage(Api::ChatCompletions, data).and_then(Result::ok);
            }
        }
    }
    Ok(outcome)
}
