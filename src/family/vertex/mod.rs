//! Google Cloud Vertex AI.

pub mod token;
