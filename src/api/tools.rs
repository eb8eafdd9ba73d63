//! The hosted tools a request declares, and the most uses the provider may
//! make of them.
//!
//! - Responses: hosted entries of `tools` (`web_search`,
//!   `web_search_preview`, `file_search`, `code_interpreter`,
//!   `image_generation`, `mcp`); `max_tool_calls` bounds the calls of all
//!   of them together.
//! - Messages: Anthropic's server tools (`web_search_*`, `web_fetch_*`),
//!   each bounded by its own `max_uses`.
//! - Chat Completions: `web_search_options`, one search per request.
//!
//! A request that declares hosted tools without a limit gets one
//! ([`Call::bound_tool_uses`]): `max_tool_calls` =
//! [`DEFAULT_MAX_TOOL_CALLS`] on Responses, `max_uses` =
//! [`DEFAULT_MAX_USES`] on each Anthropic server tool, so the reserved
//! bound holds at the provider. Tools that cannot be bounded before the
//! call (Anthropic's code execution, billed by container time; its MCP
//! connector), and tool types the gateway does not know, are refused: any
//! of them may be billed outside tokens.

use serde_json::{Map, Value};

use super::{bad, Api, Call};
use crate::error::GatewayError;
use crate::hosted::HostedTool;

/// `max_tool_calls` set on a Responses request that declares hosted tools
/// without one. Five calls answer most questions that need a search at
/// all; a client that wants a smaller reservation sets a lower limit.
pub const DEFAULT_MAX_TOOL_CALLS: u64 = 5;

/// `max_uses` set on an Anthropic server tool declared without one: the
/// value Anthropic's own examples use.
pub const DEFAULT_MAX_USES: u64 = 5;

/// The refusal code of a tool the gateway cannot bound.
const NOT_SUPPORTED: &str = "tool_not_supported";

/// The hosted tools of one request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostedTools {
    /// Each hosted tool declared, in order.
    pub declared: Vec<DeclaredTool>,
    /// The most calls of all hosted tools together (Responses'
    /// `max_tool_calls`).
    pub max_calls: Option<u64>,
}

/// One hosted tool as a request declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclaredTool {
    pub tool: HostedTool,
    /// The provider's name for it (`web_search_20250305`,
    /// `web_search_options`), for messages.
    pub name: String,
    /// Where it is in the request's `tools` (none for Chat Completions'
    /// `web_search_options`).
    pub index: Option<usize>,
    /// The most uses of this tool alone (Anthropic's `max_uses`).
    pub max_uses: Option<u64>,
    /// Units billed once per request whatever the model does, if the tool
    /// is billed so: a code interpreter container session (one unit per
    /// GB of its memory limit), a search model's search (one).
    pub per_request: Option<u64>,
    /// What bounds one use's result, when the request says: Anthropic web
    /// fetch's `max_content_tokens`, file search's `max_num_results`.
    pub result_limit: Option<u64>,
}

impl HostedTools {
    pub fn is_empty(&self) -> bool {
        self.declared.is_empty()
    }

    /// Reads the hosted tools of a request body, refusing tools that cannot
    /// be bounded or are not known, and limits that are not counts.
    pub fn of(api: Api, body: &Map<String, Value>) -> Result<HostedTools, GatewayError> {
        match api {
            Api::Responses => responses(body),
            Api::Messages => messages(body),
            Api::ChatCompletions => chat(body),
            // Gemini's tools are read by its family (the gemini family).
            Api::Completions | Api::Embeddings | Api::GenerateContent => Ok(HostedTools::default()),
        }
    }
}

impl Call {
    /// Sets the limit the provider honours wherever the request declares
    /// hosted tools without one, so the call's bound holds upstream.
    pub(super) fn bound_tool_uses(&mut self) {
        if self.api == Api::Responses && stored_prompt(&self.body) {
            // Its hosted tools, unseen, are allowed no call.
            if self.body.get("max_tool_calls") != Some(&Value::from(0)) {
                self.body.insert("max_tool_calls".to_owned(), 0.into());
                self.changed = true;
            }
            return;
        }
        if self.tools.is_empty() {
            return;
        }
        match self.api {
            Api::Responses if self.tools.max_calls.is_none() => {
                self.body
                    .insert("max_tool_calls".to_owned(), DEFAULT_MAX_TOOL_CALLS.into());
                self.tools.max_calls = Some(DEFAULT_MAX_TOOL_CALLS);
                self.changed = true;
            }
            Api::Messages => {
                let Some(Value::Array(tools)) = self.body.get_mut("tools") else {
                    return;
                };
                for declared in &mut self.tools.declared {
                    let entry = declared.index.and_then(|index| tools.get_mut(index));
                    if let (None, Some(Value::Object(entry))) = (declared.max_uses, entry) {
                        entry.insert("max_uses".to_owned(), DEFAULT_MAX_USES.into());
                        declared.max_uses = Some(DEFAULT_MAX_USES);
                        self.changed = true;
                    }
                }
            }
            _ => {}
        }
    }
}

impl DeclaredTool {
    fn new(tool: HostedTool, name: &str, index: Option<usize>) -> DeclaredTool {
        DeclaredTool {
            tool,
            name: name.to_owned(),
            index,
            max_uses: None,
            per_request: None,
            result_limit: None,
        }
    }

    /// The request field that declares it.
    pub fn param(&self) -> &'static str {
        match self.index {
            Some(_) => "tools",
            None => "web_search_options",
        }
    }
}

/// What a tool type is to the gateway.
enum Kind {
    Hosted(HostedTool),
    /// Run by the client (functions, shells, editors) or by the provider
    /// at token prices only: nothing to bound beyond the tokens.
    TokensOnly,
    /// Billed in a way no limit bounds before the call.
    Unbounded(&'static str),
    Unknown,
}

fn responses_kind(kind: &str) -> Kind {
    match kind {
        "function"
        | "custom"
        | "computer_use_preview"
        | "computer_use"
        | "local_shell"
        | "shell"
        | "apply_patch" => Kind::TokensOnly,
        "file_search" => Kind::Hosted(HostedTool::FileSearch),
        "code_interpreter" => Kind::Hosted(HostedTool::CodeInterpreter),
        "image_generation" => Kind::Hosted(HostedTool::ImageGeneration),
        "mcp" => Kind::Hosted(HostedTool::Mcp),
        // `web_search_preview_2025_03_11`, `web_search_2025_08_26`, …
        _ if kind.starts_with("web_search_preview") => Kind::Hosted(HostedTool::WebSearchPreview),
        _ if kind.starts_with("web_search") => Kind::Hosted(HostedTool::WebSearch),
        _ => Kind::Unknown,
    }
}

fn anthropic_kind(kind: &str) -> Kind {
    let family = |prefix: &str| kind.starts_with(prefix);
    if kind == "custom" {
        Kind::TokensOnly
    } else if family("web_search_") {
        Kind::Hosted(HostedTool::WebSearch)
    } else if family("web_fetch_") {
        Kind::Hosted(HostedTool::WebFetch)
    } else if family("code_execution_") {
        Kind::Unbounded("is billed by container time, which no limit bounds before the call")
    } else if family("mcp_toolset") {
        Kind::Unbounded("calls MCP servers as often as the model likes, with results of any size")
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
        Kind::TokensOnly
    } else {
        Kind::Unknown
    }
}

/// One entry of `tools`: its index, its fields and its type (`None`: a
/// tool without one, which Anthropic reads as a custom tool).
type ToolEntry<'a> = (usize, &'a Map<String, Value>, Option<&'a str>);

/// The entries of `tools`.
fn tool_entries(body: &Map<String, Value>) -> Result<Vec<ToolEntry<'_>>, GatewayError> {
    let tools = match body.get("tools") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(tools)) => tools,
        Some(_) => return Err(bad("`tools` must be an array", Some("tools"))),
    };
    tools
        .iter()
        .enumerate()
        .map(|(index, tool)| {
            let Value::Object(entry) = tool else {
                return Err(bad(
                    "every item of `tools` must be an object",
                    Some("tools"),
                ));
            };
            match entry.get("type") {
                None | Some(Value::Null) => Ok((index, entry, None)),
                Some(Value::String(kind)) => Ok((index, entry, Some(kind.as_str()))),
                Some(_) => Err(bad("a tool's `type` must be a string", Some("tools"))),
            }
        })
        .collect()
}

fn refuse(kind: &str, why: &str, param: &'static str) -> GatewayError {
    GatewayError::BadRequest {
        message: format!("the tool `{kind}` {why}; remove it"),
        param: Some(param),
        code: Some(NOT_SUPPORTED),
    }
}

fn unknown(kind: &str) -> GatewayError {
    refuse(
        kind,
        "is not known to this gateway: it may be billed outside tokens, beyond what the \
         call reserved",
        "tools",
    )
}

/// A count a tool or the request sets: a non-negative integer.
fn count(
    entry: &Map<String, Value>,
    field: &str,
    param: &'static str,
) -> Result<Option<u64>, GatewayError> {
    match entry.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value.as_u64().map(Some).ok_or_else(|| {
            bad(
                &format!("`{field}` must be a non-negative integer"),
                Some(param),
            )
        }),
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
            Kind::Hosted(tool) => {
                let mut declared = DeclaredTool::new(tool, kind, Some(index));
                if tool == HostedTool::CodeInterpreter {
                    declared.per_request = Some(container_gigabytes(entry)?);
                }
                if tool == HostedTool::FileSearch {
                    declared.result_limit = count(entry, "max_num_results", "tools")?;
                }
                tools.declared.push(declared);
            }
            Kind::TokensOnly => {}
            Kind::Unbounded(why) => return Err(refuse(kind, why, "tools")),
            Kind::Unknown => return Err(unknown(kind)),
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

fn messages(body: &Map<String, Value>) -> Result<HostedTools, GatewayError> {
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
        match anthropic_kind(kind) {
            Kind::Hosted(tool) => {
                let mut declared = DeclaredTool::new(tool, kind, Some(index));
                declared.max_uses = count(entry, "max_uses", "tools")?;
                if tool == HostedTool::WebFetch {
                    declared.result_limit = count(entry, "max_content_tokens", "tools")?;
                }
                tools.declared.push(declared);
            }
            Kind::TokensOnly => {}
            Kind::Unbounded(why) => return Err(refuse(kind, why, "tools")),
            Kind::Unknown => return Err(unknown(kind)),
        }
    }
    Ok(tools)
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

#[cfg(test)]
mod tests;
