//! The server tools of an Anthropic request (`web_search_*`,
//! `web_fetch_*`), each bounded by its own `max_uses`, set to
//! [`DEFAULT_MAX_USES`] when the request declares one without it. Code
//! execution (billed by container time) and the MCP connector cannot be
//! bounded before the call, and are refused.

use serde_json::{Map, Value};

use crate::api::{count, refuse, tool_entries, unknown, Call, DeclaredTool, HostedTools, ToolKind};
use crate::error::GatewayError;
use crate::hosted::HostedTool;

/// `max_uses` set on an Anthropic server tool declared without one: the
/// value Anthropic's own examples use.
pub const DEFAULT_MAX_USES: u64 = 5;

/// Sets `max_uses` on each server tool declared without it, so the call's
/// bound holds upstream.
pub(super) fn bound_uses(call: &mut Call) {
    let Some(Value::Array(tools)) = call.body.get_mut("tools") else {
        return;
    };
    let mut touched = false;
    for declared in &mut call.tools.declared {
        let entry = declared.index.and_then(|index| tools.get_mut(index));
        if let (None, Some(Value::Object(entry))) = (declared.max_uses, entry) {
            entry.insert("max_uses".to_owned(), DEFAULT_MAX_USES.into());
            declared.max_uses = Some(DEFAULT_MAX_USES);
            touched = true;
        }
    }
    if touched {
        call.touch("tools");
    }
}

fn kind_of(kind: &str) -> ToolKind {
    let family = |prefix: &str| kind.starts_with(prefix);
    if kind == "custom" {
        ToolKind::TokensOnly
    } else if family("web_search_") {
        ToolKind::Hosted(HostedTool::WebSearch)
    } else if family("web_fetch_") {
        ToolKind::Hosted(HostedTool::WebFetch)
    } else if family("code_execution_") {
        ToolKind::Unbounded("is billed by container time, which no limit bounds before the call")
    } else if family("mcp_toolset") {
        ToolKind::Unbounded(
            "calls MCP servers as often as the model likes, with results of any size",
        )
    } else if [
        "bash_",
        "text_editor_",
        "computer_",
        "memory_",
        "tool_search_tool_",
    ]
    .iter()
    .any(|prefix| family(prefix))
    {
        // Run by the client, or (tool search) over the request's own
        // tool definitions, which are counted as input.
        ToolKind::TokensOnly
    } else {
        ToolKind::Unknown
    }
}

/// Reads the server tools of a request body, refusing tools that cannot be
/// bounded or are not known, and limits that are not counts.
pub(super) fn of(body: &Map<String, Value>) -> Result<HostedTools, GatewayError> {
    if body
        .get("mcp_servers")
        .is_some_and(|servers| !servers.is_null() && servers != &Value::Array(Vec::new()))
    {
        return Err(refuse(
            "mcp_servers",
            "(Anthropic's MCP connector) calls MCP servers as often as the model likes, \
             with results of any size",
            "mcp_servers",
        ));
    }
    let mut tools = HostedTools::default();
    for (index, entry, kind) in tool_entries(body)? {
        let Some(kind) = kind else { continue };
        match kind_of(kind) {
            ToolKind::Hosted(tool) => {
                let mut declared = DeclaredTool::new(tool, kind, Some(index));
                declared.max_uses = count(entry, "max_uses", "tools")?;
                if tool == HostedTool::WebFetch {
                    declared.result_limit = count(entry, "max_content_tokens", "tools")?;
                }
                tools.declared.push(declared);
            }
            ToolKind::TokensOnly => {}
            ToolKind::Unbounded(why) => return Err(refuse(kind, why, "tools")),
            ToolKind::Unknown => return Err(unknown(kind)),
        }
    }
    Ok(tools)
}
