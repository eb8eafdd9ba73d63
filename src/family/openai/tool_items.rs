//! The hosted tool calls among a Responses API response's `output` items:
//! each `web_search_call`, `file_search_call`, `code_interpreter_call`,
//! `image_generation_call` or `mcp_call` item is one billed use. Items are
//! counted as they are parsed; only their `type` is read.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

use crate::hosted::{HostedTool, ToolCalls};

/// The hosted tool an output item of this type records a use of.
///
/// A `web_search_call` item reads as [`HostedTool::WebSearch`] whichever
/// of OpenAI's web search tools made it; the call's bound knows which one
/// the request declared.
pub(super) fn tool_of_item(kind: &str) -> Option<HostedTool> {
    Some(match kind {
        "web_search_call" => HostedTool::WebSearch,
        "file_search_call" => HostedTool::FileSearch,
        "code_interpreter_call" => HostedTool::CodeInterpreter,
        "image_generation_call" => HostedTool::ImageGeneration,
        "mcp_call" => HostedTool::Mcp,
        _ => return None,
    })
}

/// The counts of an `output` array, folded as it is parsed.
#[derive(Debug, Default)]
pub(super) struct ToolItems(pub ToolCalls);

#[derive(Deserialize)]
struct Item<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
}

impl<'de> Deserialize<'de> for ToolItems {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_seq(ItemsVisitor)
    }
}

struct ItemsVisitor;

impl<'de> Visitor<'de> for ItemsVisitor {
    type Value = ToolItems;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of output items")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ToolItems, A::Error> {
        let mut calls = ToolCalls::default();
        while let Some(item) = seq.next_element::<Item<'de>>()? {
            if let Some(tool) = item.kind.as_deref().and_then(tool_of_item) {
                calls.add(tool, 1);
            }
        }
        Ok(ToolItems(calls))
    }
}
