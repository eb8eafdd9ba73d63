//! The `usageMetadata` of the Gemini API and of Vertex AI's Gemini models,
//! and what one `GenerateContentResponse` carries besides: the generated
//! text it streams (measured, never kept), its grounding with Google
//! Search, and which candidates it finishes.
//!
//! Google counts differently from the other shapes: `promptTokenCount`
//! includes `cachedContentTokenCount`, while `toolUsePromptTokenCount` (the
//! results of tools fed back to the model, billed as input) and
//! `thoughtsTokenCount` (billed as output) are counted beside the prompt
//! and the candidates, not inside them. So:
//!
//! - `input = promptTokenCount − cachedContentTokenCount + toolUsePromptTokenCount`
//! - `cached_input = cachedContentTokenCount`
//! - `output = candidatesTokenCount + thoughtsTokenCount`
//!
//! and no cache writes (Google bills cache storage, not writes).
//! `totalTokenCount` is the sum of prompt, tool-use prompt, candidates and
//! thoughts; tokens it counts beyond them are of a class not read here,
//! and are charged as output, the dearer side, rather than not at all.
//!
//! As in `crate::usage`, a count no call can have makes the whole report
//! an [`crate::usage::AbsurdUsage`] naming the field, and a missing or
//! `null` count reads 0.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

use crate::usage::count::Count;
use crate::usage::{Reported, Usage};

mod measure;

use measure::{sum, CandidateIndex, FinishReason, ItemCount, JsonLen, Summed, TextBytes, TextLen};

/// Grounding with Google Search in a response: Gemini 2.x models bill it
/// per grounded prompt, newer models per search query.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Grounding {
    /// Web search queries run, over every candidate's
    /// `groundingMetadata.webSearchQueries`.
    pub queries: u64,
    /// Some candidate carries `groundingMetadata`, even with no query in
    /// it: the prompt may be billed as grounded all the same.
    pub grounded: bool,
}

/// What one streamed chunk (a `GenerateContentResponse`) carries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChunkSeen {
    /// Decoded UTF-8 bytes of generated text: every part's `text` (thoughts
    /// included), `executableCode.code`, `codeExecutionResult.output`, and
    /// the length of function and tool call arguments written as compact
    /// JSON: the same length however the stream is framed or indented.
    pub text_bytes: u64,
    /// The chunk's `usageMetadata`, if it has one.
    pub usage: Option<Reported>,
    pub grounding: Grounding,
    /// The candidates (by `index`, 0 when absent) this chunk gives a
    /// `finishReason`.
    pub finished: Vec<u32>,
}

/// The usage of a non-streamed response body and its grounding; `None`
/// when the body is not a JSON object or carries no `usageMetadata` (an
/// error body, for one).
pub fn body_usage(body: &[u8]) -> Option<(Reported, Grounding)> {
    let body: Body = serde_json::from_slice(json_object(body)?).ok()?;
    let usage = body.usage_metadata?.to_usage();
    let grounding = body
        .candidates
        .map_or_else(Grounding::default, |c| c.0.grounding);
    Some((usage, grounding))
}

/// What one streamed chunk carries; `None` when it is not a JSON object
/// of the expected shape. Unknown fields are skipped unread.
pub fn read_chunk(json: &[u8]) -> Option<ChunkSeen> {
    let chunk: Chunk = serde_json::from_slice(json_object(json)?).ok()?;
    let candidates = chunk.candidates.map(|c| c.0).unwrap_or_default();
    Some(ChunkSeen {
        text_bytes: candidates.text_bytes,
        usage: chunk.usage_metadata.map(|usage| usage.to_usage()),
        grounding: candidates.grounding,
        finished: candidates.finished,
    })
}

/// `json` if it is an object: a derived struct would also read a JSON
/// array, field by field in order, which no response is.
fn json_object(json: &[u8]) -> Option<&[u8]> {
    json.trim_ascii_start().starts_with(b"{").then_some(json)
}

// === usageMetadata ===

/// `usageMetadata`; the `*TokensDetails` split by modality is not read.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct UsageMetadata {
    prompt_token_count: Option<Count>,
    cached_content_token_count: Option<Count>,
    tool_use_prompt_token_count: Option<Count>,
    candidates_token_count: Option<Count>,
    thoughts_token_count: Option<Count>,
    total_token_count: Option<Count>,
}

impl UsageMetadata {
    fn to_usage(&self) -> Reported {
        let prompt = Count::read("promptTokenCount", self.prompt_token_count.as_ref())?;
        let cached = Count::read(
            "cachedContentTokenCount",
            self.cached_content_token_count.as_ref(),
        )?;
        let tool_use = Count::read(
            "toolUsePromptTokenCount",
            self.tool_use_prompt_token_count.as_ref(),
        )?;
        let candidates = Count::read("candidatesTokenCount", self.candidates_token_count.as_ref())?;
        let thoughts = Count::read("thoughtsTokenCount", self.thoughts_token_count.as_ref())?;
        let total = Count::read("totalTokenCount", self.total_token_count.as_ref())?;
        let output = candidates.saturating_add(thoughts);
        let classed = prompt.saturating_add(tool_use).saturating_add(output);
        Ok(Usage {
            input: prompt.saturating_sub(cached).saturating_add(tool_use),
            cached_input: cached,
            cache_write: 0,
            output: output.saturating_add(total.saturating_sub(classed)),
            ..Usage::default()
        })
    }
}

// === Response shapes ===

/// A non-streamed `GenerateContentResponse`: its usage, and of its
/// candidates only their grounding (their text is skipped unread).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Body {
    candidates: Option<Candidates<GroundedCandidate>>,
    usage_metadata: Option<UsageMetadata>,
}

/// One streamed `GenerateContentResponse`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Chunk {
    candidates: Option<Candidates<Candidate>>,
    usage_metadata: Option<UsageMetadata>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GroundedCandidate {
    grounding_metadata: Option<GroundingMetadata>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate {
    content: Option<Content>,
    finish_reason: Option<FinishReason>,
    index: Option<CandidateIndex>,
    grounding_metadata: Option<GroundingMetadata>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GroundingMetadata {
    web_search_queries: Option<ItemCount>,
}

#[derive(Deserialize)]
struct Content {
    parts: Option<Summed<Part>>,
}

/// One part of a candidate's content. `inlineData` (generated images and
/// audio) is not text and is priced by its tokens alone; a
/// `thoughtSignature` is an opaque check on the thinking, not generated.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part {
    /// Answer or, with `thought: true`, thinking: both are output.
    text: Option<TextLen>,
    executable_code: Option<ExecutableCode>,
    code_execution_result: Option<CodeExecutionResult>,
    function_call: Option<FunctionCall>,
    /// A call of a server-side tool the model predicted.
    tool_call: Option<ToolCall>,
}

#[derive(Deserialize)]
struct ExecutableCode {
    code: Option<TextLen>,
}

#[derive(Deserialize)]
struct CodeExecutionResult {
    output: Option<TextLen>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FunctionCall {
    args: Option<JsonLen>,
    /// Vertex AI's arguments streamed piece by piece
    /// (`streamFunctionCallArguments`).
    partial_args: Option<Summed<PartialArg>>,
}

#[derive(Deserialize)]
struct ToolCall {
    args: Option<JsonLen>,
}

/// One piece of a streamed argument; its `jsonPath` only says where the
/// piece goes.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PartialArg {
    string_value: Option<TextLen>,
    number_value: Option<JsonLen>,
    bool_value: Option<JsonLen>,
}

// === Folding candidates ===

/// What a response's candidates carry, folded as they are parsed.
#[derive(Debug, Default)]
struct CandidatesSeen {
    text_bytes: u64,
    grounding: Grounding,
    finished: Vec<u32>,
}

/// A candidate, as read from a body or a chunk.
trait FoldCandidate {
    fn fold_into(self, seen: &mut CandidatesSeen);
}

impl GroundingMetadata {
    fn fold_into(self, grounding: &mut Grounding) {
        grounding.grounded = true;
        let queries = self.web_search_queries.map_or(0, |q| q.0);
        grounding.queries = grounding.queries.saturating_add(queries);
    }
}

impl FoldCandidate for GroundedCandidate {
    fn fold_into(self, seen: &mut CandidatesSeen) {
        if let Some(grounding) = self.grounding_metadata {
            grounding.fold_into(&mut seen.grounding);
        }
    }
}

impl FoldCandidate for Candidate {
    fn fold_into(self, seen: &mut CandidatesSeen) {
        let text = self.content.and_then(|c| c.parts).map_or(0, |p| p.0);
        seen.text_bytes = seen.text_bytes.saturating_add(text);
        if let Some(grounding) = self.grounding_metadata {
            grounding.fold_into(&mut seen.grounding);
        }
        if self.finish_reason.is_some_and(|reason| reason.0) {
            // Proto3 JSON leaves out an index of 0; one that is no index
            // at all names no candidate.
            match self.index {
                None => seen.finished.push(0),
                Some(CandidateIndex(Some(index))) => seen.finished.push(index),
                Some(CandidateIndex(None)) => {}
            }
        }
    }
}

/// `candidates`, folded as the array is parsed; no candidate is kept.
struct Candidates<C>(CandidatesSeen, PhantomData<C>);

impl<'de, C: Deserialize<'de> + FoldCandidate> Deserialize<'de> for Candidates<C> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_seq(CandidatesVisitor(PhantomData))
    }
}

struct CandidatesVisitor<C>(PhantomData<C>);

impl<'de, C: Deserialize<'de> + FoldCandidate> Visitor<'de> for CandidatesVisitor<C> {
    type Value = Candidates<C>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of candidates")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Candidates<C>, A::Error> {
        let mut seen = CandidatesSeen::default();
        while let Some(candidate) = seq.next_element::<C>()? {
            candidate.fold_into(&mut seen);
        }
        Ok(Candidates(seen, PhantomData))
    }
}

// === Generated text ===

fn len<T: TextBytes>(piece: Option<&T>) -> u64 {
    piece.map_or(0, TextBytes::text_bytes)
}

impl TextBytes for Part {
    fn text_bytes(&self) -> u64 {
        sum([
            len(self.text.as_ref()),
            len(self.executable_code.as_ref()),
            len(self.code_execution_result.as_ref()),
            len(self.function_call.as_ref()),
            len(self.tool_call.as_ref()),
        ])
    }
}

impl TextBytes for ExecutableCode {
    fn text_bytes(&self) -> u64 {
        len(self.code.as_ref())
    }
}

impl TextBytes for CodeExecutionResult {
    fn text_bytes(&self) -> u64 {
        len(self.output.as_ref())
    }
}

impl TextBytes for FunctionCall {
    fn text_bytes(&self) -> u64 {
        len(self.args.as_ref()).saturating_add(self.partial_args.as_ref().map_or(0, |p| p.0))
    }
}

impl TextBytes for ToolCall {
    fn text_bytes(&self) -> u64 {
        len(self.args.as_ref())
    }
}

impl TextBytes for PartialArg {
    fn text_bytes(&self) -> u64 {
        sum([
            len(self.string_value.as_ref()),
            len(self.number_value.as_ref()),
            len(self.bool_value.as_ref()),
        ])
    }
}

#[cfg(test)]
mod tests;
