//! The calls the benchmark sends: a short support-agent chat call, instant
//! or streamed. As in real agent traffic, the system prompt is the same on
//! every call and the user's message differs (it carries a ticket number),
//! so a gateway cannot answer from a cache of whole requests.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use serde_json::json;

use crate::error::BenchError;
use crate::setup::{INSTANT_MODEL, STREAM_MODEL};

/// Output limit of an instant call: bounds its reservation.
const INSTANT_MAX_TOKENS: u64 = 16;

const SYSTEM_PROMPT: &str = "You are a support assistant for an online store. Answer in two sentences at most, politely, and never invent order numbers, prices or delivery dates. If the question is not about the store, say that you can only help with orders, returns and shipping.";

/// Where the ticket number goes in the serialized body.
const TICKET: &str = "{TICKET}";

/// Bodies of one kind of call, each with its own ticket number.
pub struct Calls {
    /// The serialized body before and after the ticket number.
    head: String,
    tail: String,
    next: AtomicU64,
}

impl Calls {
    /// A plain call with a small output limit.
    pub fn instant() -> Result<Calls, BenchError> {
        Calls::from_template(json!({
            "model": INSTANT_MODEL,
            "messages": messages(),
            "max_tokens": INSTANT_MAX_TOKENS,
            "temperature": 0.2,
        }))
    }

    /// A streamed call of `tokens` tokens that asks for its usage, so the
    /// client can price it.
    pub fn streamed(tokens: u64) -> Result<Calls, BenchError> {
        Calls::from_template(json!({
            "model": STREAM_MODEL,
            "messages": messages(),
            "max_tokens": tokens,
            "stream": true,
            "stream_options": {"include_usage": true},
        }))
    }

    fn from_template(template: serde_json::Value) -> Result<Calls, BenchError> {
        let text = template.to_string();
        let Some((head, tail)) = text.split_once(TICKET) else {
            return Err(BenchError::Invalid(
                "the call template has no ticket".to_owned(),
            ));
        };
        Ok(Calls {
            head: head.to_owned(),
            tail: tail.to_owned(),
            next: AtomicU64::new(10_000),
        })
    }

    /// The next call's body.
    pub fn next_body(&self) -> Bytes {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        let mut body = String::with_capacity(self.head.len() + self.tail.len() + 20);
        body.push_str(&self.head);
        body.push_str(&ticket.to_string());
        body.push_str(&self.tail);
        Bytes::from(body)
    }
}

fn messages() -> serde_json::Value {
    json!([
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": format!("Hello! About ticket {TICKET}: I ordered a pair of running shoes last Tuesday and the tracking page has said 'label created' for four days now. Is my parcel lost, and if it is, can I get a refund or a replacement in a different size?")}
    ])
}
