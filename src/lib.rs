//! tollgate: an LLM API gateway that enforces a hard spending cap per key
//! and per org, exactly, under any concurrency.
//!
//! An agent points its unmodified OpenAI or Anthropic SDK at the gateway.
//! For every call the gateway estimates an upper bound of the cost, reserves
//! it atomically against every cap that applies, streams the call through
//! to the provider, reads the token usage from the response and settles the
//! actual cost before the client sees the end.
//!
//! # Layout
//!
//! - [`server`] accepts connections and routes requests; [`proxy`] is the
//!   path of one proxied call, from authentication to settlement.
//! - [`api`] knows each provider API shape: request checks, output limits,
//!   error bodies. [`usage`] reads token usage from bodies and SSE events;
//!   [`sse`] splits an event stream in one pass.
//! - [`estimate`] bounds a call's cost before it is sent, counting OpenAI
//!   models' tokens with [`tokenizer`]; [`money`] and [`prices`] price
//!   tokens exactly in integer micro-USD.
//! - [`budget`] is the reserve/settle protocol and its stores.
//! - [`settle`] holds the ticket that settles each call exactly once;
//!   [`metered`] is the streaming response body that reads usage on the way.
//! - [`metrics`] counts reserves, settlements and store calls for
//!   `GET /metrics`.
//! - [`config`] loads and checks the TOML config; [`auth`] finds the key.
//! - [`upstream`] is the shared pooled client to the providers.

pub mod api;
pub mod auth;
pub mod budget;
pub mod config;
pub mod error;
pub mod estimate;
pub mod metered;
pub mod metrics;
pub mod money;
pub mod prices;
pub mod proxy;
pub mod server;
pub mod settle;
pub mod sse;
pub mod tokenizer;
pub mod upstream;
pub mod usage;
