//! The hosted tools of an OpenAI request, and the most uses the provider
//! may make of them.
//!
//! - Responses: hosted entries of `tools` (`web_search`,
//!   `web_search_preview`, `file_search`, `code_interpreter`,
//!   `image_generation`, `mcp`); `max_tool_calls` bounds the calls of all
//!   of them together, set to [`DEFAULT_MAX_TOOL_CALLS`] when the request
//!   declares hosted tools without it.
//! - Chat Completions: `web_search_options`, one search per request; its
//!   `tools` are the client's functions.

use serde_json::{Map, Value};

use crate::api::{
    bad, count, refuse, tool_entries, unknown, Api, Call, DeclaredTool, HostedTools, ToolKind,
    NOT_SUPPORTED,
};
use crate::error::GatewayError;
use crate::hosted::HostedTool;

/// `max_tool_calls` set on a Responses request that declares hosted tools
/// without one. Five calls answer most questions that need a search at
/// all; a client that wants a smaller reservation sets a lower limit.
pub const DEFAULT_MAX_TOOL_CALLS: u64 = 5;

/// Reads the hosted tools of a request body, refusing tools that cannot be
/// bounded or are not known, and limits that are not counts.
pub(super) fn of(api: Api, body: &Map<String, Value>) -> Result<HostedTools, GatewayError> {
    match api {
        Api::Responses => responses(body),
        Api::ChatCompletions => chat(body),
        _ => Ok(HostedTools::default()),
    }
}

/// Sets `max_tool_calls` where a Responses request declares hosted tools
/// without it, so the call's bound holds upstream.
pub(super) fn bound_uses(call: &mut Call) {
    if call.api != Api::Responses {
        return;
    }
    if stored_prompt(&call.body) {
        // Its hosted tools, unseen, are allowed no call.
        if call.body.get("max_tool_calls") != Some(&Value::from(0)) {
            call.body.insert("max_tool_calls".to_owned(), 0.into());
            call.touch("max_tool_calls");
        }
        return;
    }
    if !call.tools.is_empty() && call.tools.max_calls.is_none() {
        call.body
            .insert("max_tool_calls".to_owned(), DEFAULT_MAX_TOOL_CALLS.into());
        call.tools.max_calls = Some(DEFAULT_MAX_TOOL_CALLS);
        call.touch("max_tool_calls");
    }
}

fn responses_kind(kind: &str) -> ToolKind {
    match kind {
        "function"
        | "custom"
        | "computer_use_preview"
        | "computer_use"
        | "local_shell"
        | "shell"
        | "apply_patch" => ToolKind::TokensOnly,
        "file_search" => ToolKind::Hosted(HostedTool::FileSearch),
        "code_interpreter" => ToolKind::Hosted(HostedTool::CodeInterpreter),
        "image_generation" => ToolKind::Hosted(HostedTool::ImageGeneration),
        "mcp" => ToolKind::Hosted(HostedTool::Mcp),
        // `web_search_preview_2025_03_11`, `web_search_2025_08_26`, …
        _ if kind.starts_with("web_search_preview") => {
            ToolKind::Hosted(HostedTool::WebSearchPreview)
        }
        _ if kind.starts_with("web_search") => ToolKind::Hosted(HostedTool::WebSearch),
        _ => ToolKind::Unknown,
    }
}

fn responses(body: &Map<String, Value>) -> Result<HostedTools, GatewayError> {
    let mut tools = HostedTools {
        max_calls: count(body, "max_tool_calls", "max_tool_calls")?,
        ..HostedTools::default()
    };
    for (index, entry, kind) in tool_entries(body)? {
        let kind = kind.ok_or_else(|| bad("every tool needs a `type`", Some("tools")))?;
        match responses_kind(kind) {
            ToolKind::Hosted(tool) => {
                let mut declared = DeclaredTool::new(tool, kind, Some(index));
                if tool == HostedTool::CodeInterpreter {
                    declared.per_request = Some(container_gigabytes(entry)?);
                }
                if tool == HostedTool::FileSearch {
                    declared.result_limit = count(entry, "max_num_results", "tools")?;
                }
                tools.declared.push(declared);
            }
            ToolKind::TokensOnly => {}
            ToolKind::Unbounded(why) => return Err(refuse(kind, why, "tools")),
            ToolKind::Unknown => return Err(unknown(kind)),
        }
    }
    if stored_prompt(body) {
        // A stored prompt may declare hosted tools the gateway cannot see,
        // so cannot bound or price: they are allowed no call at all.
        if !tools.declared.is_empty() || tools.max_calls.is_some_and(|calls| calls > 0) {
            return Err(GatewayError::BadRequest {
                message: "a stored `prompt` may declare hosted tools this gateway cannot see \
                          or price: with a stored prompt, declare no hosted tools and leave \
                          `max_tool_calls` unset or 0 (function tools still work)"
                    .to_owned(),
                param: Some("prompt"),
                code: Some(NOT_SUPPORTED),
            });
        }
        tools.max_calls = Some(0);
    }
    Ok(tools)
}

/// Whether a Responses request names a prompt stored at the provider.
fn stored_prompt(body: &Map<String, Value>) -> bool {
    body.get("prompt").is_some_and(|prompt| !prompt.is_null())
}

/// The memory of the container a code interpreter opens, in GB: OpenAI
/// bills a session $0.03 per GB (1, 4, 16 or 64), whether or not the model
/// runs code in it. A container made beforehand and named by its id has a
/// size and sessions the gateway cannot see, so it is refused.
fn container_gigabytes(entry: &Map<String, Value>) -> Result<u64, GatewayError> {
    let container = match entry.get("container") {
        None | Some(Value::Null) => return Ok(1),
        Some(Value::Object(container)) => container,
        Some(Value::String(id)) => {
            return Err(GatewayError::BadRequest {
                message: format!(
                    "the code_interpreter tool names the container `{id}`, made beforehand: \
                     this gateway cannot see its size or its sessions, so it cannot bound \
                     what the call adds to its bill; use \"container\": {{\"type\": \"auto\"}}"
                ),
                param: Some("tools"),
                code: Some(NOT_SUPPORTED),
            })
        }
        Some(_) => return Err(bad("`container` must be an object or an id", Some("tools"))),
    };
    match container.get("memory_limit") {
        None | Some(Value::Null) => Ok(1),
        Some(Value::String(limit)) => {
            let limit = limit.trim().to_ascii_lowercase();
            match limit
                .strip_suffix('g')
                .and_then(|gb| gb.parse::<u64>().ok())
            {
                Some(gb @ (1 | 4 | 16 | 64)) => Ok(gb),
                _ => Err(bad(
                    "`memory_limit` of a code interpreter container must be \"1g\", \"4g\", \
                     \"16g\" or \"64g\"",
                    Some("tools"),
                )),
            }
        }
        Some(_) => Err(bad("`memory_limit` must be a string", Some("tools"))),
    }
}

/// Chat Completions' search models search once per request, billed as
/// OpenAI's web search preview. Its `tools` are the client's functions; any
/// other type is one an OpenAI-compatible provider may run and bill
/// itself, so it is refused.
fn chat(body: &Map<String, Value>) -> Result<HostedTools, GatewayError> {
    for (_, _, kind) in tool_entries(body)? {
        match kind {
            None | Some("function" | "custom") => {}
            Some(kind) => return Err(unknown(kind)),
        }
    }
    match body.get("web_search_options") {
        None | Some(Value::Null) => Ok(HostedTools::default()),
        Some(Value::Object(_)) => {
            let mut search =
                DeclaredTool::new(HostedTool::WebSearchPreview, "web_search_options", None);
            search.per_request = Some(1);
            Ok(HostedTools {
                declared: vec![search],
                max_calls: None,
            })
        }
        Some(_) => Err(bad(
            "`web_search_options` must be an object",
            Some("web_search_options"),
        )),
    }
}
