//! OpenAI's embeddings (`POST /v1/embeddings`): one deterministic vector
//! per input, billed its input tokens; Azure OpenAI's the same, naming its
//! deployment's model.

use serde_json::{json, Value};

use super::handler::{Answer, ApiError};
use super::openai::{inputs, last_text_directives, Host, Input};
use super::reply::{u64_field, Tally};

/// Embedding length when the request names no `dimensions`: short, since
/// tests only need vectors that are deterministic.
const DEFAULT_DIMENSIONS: u64 = 8;

/// The longest embedding the mock produces.
const MAX_DIMENSIONS: u64 = 4096;

/// `POST /v1/embeddings`: one deterministic vector per input, as floats or
/// as base64 of little-endian f32s (what the Python SDK asks for by default).
pub(crate) fn embeddings(body: &Value, host: &Host) -> Result<Answer, ApiError> {
    let model = host.model(body)?;
    let inputs = body
        .get("input")
        .and_then(inputs)
        .ok_or_else(|| ApiError::invalid("Missing required parameter: 'input'.", "input"))?;
    let dimensions = u64_field(body, "dimensions")
        .unwrap_or(DEFAULT_DIMENSIONS)
        .clamp(1, MAX_DIMENSIONS);
    let base64 = body.get("encoding_format").and_then(Value::as_str) == Some("base64");
    let directives = last_text_directives(&inputs);
    let tally = Tally {
        prompt: inputs.iter().map(Input::tokens).sum(),
        ..Tally::default()
    };
    if let Some(answer) = host.directed_answer(&directives, false, tally) {
        return answer;
    }
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, input)| {
            let vector = embedding(input, dimensions);
            let embedding = if base64 {
                json!(base64_f32(&vector))
            } else {
                json!(vector)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    let body = json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tally.prompt, "total_tokens": tally.prompt},
    });
    Ok(Answer::Json { body, tally })
}

/// A vector that depends only on the input, with components in [-1, 1)
/// that print exactly (multiples of 1/1024).
fn embedding(input: &Input<'_>, dimensions: u64) -> Vec<f32> {
    let mut state = match input {
        Input::Text(text) => fnv1a(text.as_bytes()),
        Input::Tokens(tokens) => fnv1a(Value::Array(tokens.to_vec()).to_string().as_bytes()),
    };
    (0..dimensions)
        .map(|_| {
            state = splitmix64(state);
            let step = (state >> 53) as i32 - 1024;
            step as f32 / 1024.0
        })
        .collect()
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn splitmix64(state: u64) -> u64 {
    let mut z = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Standard padded base64 of the vector's little-endian f32 bytes.
pub(crate) fn base64_f32(vector: &[f32]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let packed = group.iter().enumerate().fold(0u32, |acc, (i, byte)| {
            acc | u32::from(*byte) << (16 - 8 * i)
        });
        for i in 0..4 {
            if i <= group.len() {
                let sextet = (packed >> (18 - 6 * i)) & 0x3f;
                out.push(char::from(ALPHABET[sextet as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}
