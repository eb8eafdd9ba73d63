//! The process's log output: lines on stderr, filtered by `RUST_LOG`
//! (default `info`), as plain text until the config says otherwise
//! (`server.log_format`). The format is switched in place once the config
//! is read, so that what is logged before (a config error) is still
//! written.
//!
//! Lines go to stderr through `tracing-appender`'s non-blocking writer, so
//! that logging a line per call costs the call a copy into a channel, not
//! a write to a pipe: a thread of its own writes them out, in order, each
//! whole, in batches (a [`BufWriter`] it flushes once the channel is
//! empty). It is lossless: when stderr stalls and the channel fills, the
//! thread that logs waits rather than drop a line. [`Logs`], dropped at
//! exit, writes out what is still waiting.

use std::io::BufWriter;

use tracing_appender::non_blocking::{NonBlocking, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::fmt;
use tracing_subscriber::layer::{Layered, SubscriberExt};
use tracing_subscriber::reload;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use crate::config::LogFormat;

type Filtered = Layered<EnvFilter, Registry>;
type Output = Box<dyn Layer<Filtered> + Send + Sync>;

/// The installed log output, whose format can be switched. Held for the
/// life of the process: dropped (at exit), it writes out the lines still
/// waiting.
pub struct Logs {
    output: reload::Handle<Output, Filtered>,
    writer: NonBlocking,
    /// Dropping it hands the writing thread its last lines and waits for
    /// them to reach stderr.
    _flush_at_exit: WorkerGuard,
}

/// Installs the process's log output, plain for now.
pub fn init() -> Logs {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(false)
        .thread_name("log-writer")
        .finish(BufWriter::new(std::io::stderr()));
    let (output, handle) = reload::Layer::new(output(LogFormat::Plain, &writer));
    tracing_subscriber::registry()
        .with(filter)
        .with(output)
        .init();
    Logs {
        output: handle,
        writer,
        _flush_at_exit: guard,
    }
}

impl Logs {
    /// Writes every line from now on in `format`.
    pub fn use_format(&self, format: LogFormat) {
        if format == LogFormat::Plain {
            return;
        }
        if let Err(error) = self.output.reload(output(format, &self.writer)) {
            tracing::error!(%error, "cannot switch the log format");
        }
    }
}

fn output(format: LogFormat, writer: &NonBlocking) -> Output {
    match format {
        LogFormat::Plain => fmt::layer()
            .with_writer(writer.clone())
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .boxed(),
        // One JSON object a line, the event's fields at its top level
        // (`request_id`, `key`, …) beside `timestamp`, `level`, `target`
        // and, inside a request, its `span`.
        LogFormat::Json => fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(writer.clone())
            .boxed(),
    }
}
