//! The instant upstream: the provider of the throughput and latency modes
//! unless `--upstream mock` says otherwise. It answers every
//! `POST /v1/chat/completions` with the same OpenAI chat completion, usage
//! included, and a streamed request with a short event stream ending in
//! its usage chunk (when `stream_options.include_usage` asks for it) and
//! `data: [DONE]`, as OpenAI sends them.
//!
//! It exists because `tollgate mock-upstream` counts the tokens of every
//! call with a real tokenizer and so spends more CPU per call than any
//! proxy it serves: on two cores the mock saturates first and the ratios
//! measure the mock. This one counts nothing. Its replies are serialized
//! once at start-up and sent as shared bytes; a request body is parsed
//! only when it mentions `"stream"`; sockets are kept alive and written
//! without Nagle's delay; it runs on a single-threaded runtime, the
//! cheapest per call, in its own process so that its CPU is read apart
//! from the proxy's and the client's.
//!
//! It runs as this benchmark's own binary started with `--serve-instant`,
//! logs `listening on ADDR` on stderr, and exits when its stdin closes,
//! like the pass-through proxy.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use crate::child::accept_until_stdin_closes;
use crate::drive::CHAT_PATH;
use crate::error::BenchError;
use crate::run::INSTANT_REPLY_TOKENS;
use crate::setup::INSTANT_MODEL;

/// What `tollgate mock-upstream` counts in the benchmark's instant call
/// (system prompt, user message with a five-digit ticket, and the chat
/// format's per-message tokens), so that a gateway charges the same for a
/// call whichever upstream answers it. The books check compares a
/// gateway's spending with the charges its responses reported, so it
/// holds for any fixed count.
const PROMPT_TOKENS: u64 = 118;

/// The reply's text; streamed, one chunk per piece. Its usage says
/// `INSTANT_REPLY_TOKENS` output tokens, as nothing here counts them.
const REPLY_PIECES: [&str; 4] = [
    "Your parcel is",
    " not lost yet;",
    " we will check",
    " with the carrier.",
];

/// Fixed, like everything else in the replies: nothing reads them.
const REPLY_ID: &str = "chatcmpl-bench-instant";
const CREATED: u64 = 1_767_225_600;

/// The replies, built once.
struct Replies {
    completion: Bytes,
    stream: Bytes,
    stream_with_usage: Bytes,
}

/// Serves until stdin closes.
pub fn serve() -> Result<(), BenchError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let replies = Arc::new(Replies::build());
    runtime.block_on(async move {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        eprintln!("instant upstream listening on {}", listener.local_addr()?);
        let builder = http1::Builder::new();
        accept_until_stdin_closes(listener, |stream| {
            let replies = replies.clone();
            let service = service_fn(move |request| {
                let replies = replies.clone();
                async move { Ok::<_, Infallible>(answer(&replies, request).await) }
            });
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::spawn(async move {
                let _ = connection.await;
            });
        })
        .await;
        Ok(())
    })
}

async fn answer(replies: &Replies, request: Request<Incoming>) -> Response<ReplyBody> {
    if request.method() != Method::POST || request.uri().path() != CHAT_PATH {
        return status(StatusCode::NOT_FOUND);
    }
    let Ok(body) = request.into_body().collect().await else {
        return status(StatusCode::BAD_REQUEST);
    };
    match Ask::read(&body.to_bytes()) {
        Some(Ask::Completion) => reply(
            replies.completion.clone(),
            true,
            HeaderValue::from_static("application/json"),
        ),
        Some(Ask::Stream { usage }) => {
            let events = if usage {
                &replies.stream_with_usage
            } else {
                &replies.stream
            };
            let mut response = reply(
                events.clone(),
                false,
                HeaderValue::from_static("text/event-stream"),
            );
            response
                .headers_mut()
                .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            response
        }
        None => status(StatusCode::BAD_REQUEST),
    }
}

fn reply(bytes: Bytes, sized: bool, content_type: HeaderValue) -> Response<ReplyBody> {
    let mut response = Response::new(ReplyBody {
        bytes: Some(bytes),
        sized,
    });
    response.headers_mut().insert(CONTENT_TYPE, content_type);
    response
}

fn status(code: StatusCode) -> Response<ReplyBody> {
    let mut response = Response::new(ReplyBody {
        bytes: None,
        sized: true,
    });
    *response.status_mut() = code;
    response
}

// === what was asked ===

/// What a request asks for, as far as the reply depends on it.
#[derive(Debug, PartialEq, Eq)]
enum Ask {
    Completion,
    /// `usage`: `stream_options.include_usage` was true.
    Stream {
        usage: bool,
    },
}

#[derive(Deserialize)]
struct StreamFields {
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

impl Ask {
    /// `None` for a body that is not a JSON object.
    fn read(body: &[u8]) -> Option<Ask> {
        // The instant calls never name `stream`: they skip the parse.
        if !body.windows(8).any(|window| window == b"\"stream\"") {
            return Some(Ask::Completion);
        }
        let fields: StreamFields = serde_json::from_slice(body).ok()?;
        if fields.stream != Some(true) {
            return Some(Ask::Completion);
        }
        let usage = fields
            .stream_options
            .and_then(|options| options.include_usage)
            .unwrap_or(false);
        Some(Ask::Stream { usage })
    }
}

// === the replies ===

impl Replies {
    fn build() -> Replies {
        Replies {
            completion: Bytes::from(completion().to_string()),
            stream: events(false),
            stream_with_usage: events(true),
        }
    }
}

fn usage() -> Value {
    json!({
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": INSTANT_REPLY_TOKENS,
        "total_tokens": PROMPT_TOKENS + INSTANT_REPLY_TOKENS,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    })
}

fn completion() -> Value {
    json!({
        "id": REPLY_ID,
        "object": "chat.completion",
        "created": CREATED,
        "model": INSTANT_MODEL,
        "choices": [{
            "index": 0,
            "message": {
                "role": "assistant",
                "content": REPLY_PIECES.concat(),
                "refusal": null,
                "annotations": [],
            },
            "logprobs": null,
            "finish_reason": "stop",
        }],
        "usage": usage(),
        "service_tier": "default",
        "system_fingerprint": null,
    })
}

/// The whole event stream: the role, one chunk per piece, the finish,
/// the usage-only chunk when asked for (every chunk then carries
/// `"usage": null` before it, as OpenAI sends them), and `[DONE]`.
fn events(with_usage: bool) -> Bytes {
    let chunk = |choices: Value, usage: Value| {
        let mut chunk = json!({
            "id": REPLY_ID,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": INSTANT_MODEL,
            "service_tier": "default",
            "system_fingerprint": null,
            "choices": choices,
        });
        if with_usage {
            chunk["usage"] = usage;
        }
        format!("data: {chunk}\n\n")
    };
    let choice = |delta: Value, finish: Value| json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]);
    let mut text = chunk(
        choice(json!({"role": "assistant", "content": ""}), Value::Null),
        Value::Null,
    );
    for piece in REPLY_PIECES {
        text.push_str(&chunk(
            choice(json!({"content": piece}), Value::Null),
            Value::Null,
        ));
    }
    text.push_str(&chunk(choice(json!({}), json!("stop")), Value::Null));
    if with_usage {
        text.push_str(&chunk(json!([]), usage()));
    }
    text.push_str("data: [DONE]\n\n");
    Bytes::from(text)
}

// === the body ===

/// A reply sent in one piece: with its length for a completion, chunked
/// for an event stream (a stream's length is never known up front, and a
/// gateway that drops the usage chunk it asked for must not be handed one).
struct ReplyBody {
    bytes: Option<Bytes>,
    sized: bool,
}

impl Body for ReplyBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.get_mut().bytes.take().map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.bytes.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match (&self.bytes, self.sized) {
            (None, _) => SizeHint::with_exact(0),
            (Some(bytes), true) => SizeHint::with_exact(bytes.len() as u64),
            (Some(_), false) => SizeHint::default(),
        }
    }
}
