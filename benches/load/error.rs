//! What can stop a load run.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("cannot start {name}: {source}")]
    Spawn {
        name: String,
        source: std::io::Error,
    },
    #[error("{name} did not start; its last log lines:\n{log}")]
    NotStarted { name: String, log: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    #[error("HTTP request: {0}")]
    Request(#[from] http::Error),
    #[error("{what} answered {status}: {body}")]
    Status {
        what: String,
        status: u16,
        body: String,
    },
    #[error("{0} did not finish within {1:?}")]
    Timeout(&'static str, Duration),
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("{0}")]
    Invalid(String),
}
