//! Log lines written to stderr in batches by a thread of their own: a
//! call's access line then costs the call a copy into a buffer, not a
//! write to a pipe that wakes its reader. Lines reach stderr within
//! [`FLUSH_EVERY`], in order, each whole; [`Batched::flush`] writes what
//! is left (at exit).

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// How long a line may wait in the buffer.
const FLUSH_EVERY: Duration = Duration::from_millis(10);

/// Past this many bytes waiting (stderr stalled), a line is written at
/// once by the thread that logs it, so the buffer stays bounded.
const MAX_BUFFERED: usize = 4 << 20;

/// The buffer the log lines go to, shared with the thread that writes it.
#[derive(Clone)]
pub struct Batched {
    buffer: Arc<Mutex<Vec<u8>>>,
    /// Whether a thread writes the buffer out; without one, every line is
    /// written at once.
    flushed: bool,
}

impl Batched {
    /// A buffer, and the thread that writes it out.
    pub fn start() -> Batched {
        let mut batched = Batched {
            buffer: Arc::new(Mutex::new(Vec::new())),
            flushed: true,
        };
        let flusher = batched.clone();
        let spawned = std::thread::Builder::new()
            .name("log-writer".to_owned())
            .spawn(move || loop {
                std::thread::sleep(FLUSH_EVERY);
                flusher.flush();
            });
        batched.flushed = spawned.is_ok();
        batched
    }

    /// Writes out what is waiting.
    pub fn flush(&self) {
        let waiting = {
            let mut buffer = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
            if buffer.is_empty() {
                return;
            }
            std::mem::take(&mut *buffer)
        };
        let _ = std::io::stderr().lock().write_all(&waiting);
    }
}

/// One log line on its way into the buffer.
pub struct Line<'a>(&'a Batched);

impl Write for Line<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let batched = self.0;
        let mut buffer = batched
            .buffer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if batched.flushed && buffer.len() + bytes.len() <= MAX_BUFFERED {
            buffer.extend_from_slice(bytes);
            return Ok(bytes.len());
        }
        // Whatever waits goes first, so the lines stay in order.
        let mut stderr = std::io::stderr().lock();
        let _ = stderr.write_all(&buffer);
        buffer.clear();
        stderr.write_all(bytes)?;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Batched {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Line<'a> {
        Line(self)
    }
}
