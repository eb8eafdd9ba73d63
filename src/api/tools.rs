//! The hosted tools a request declares, and the most uses the provider may
//! make of them: the types every family reads its tools into, and the
//! pieces of reading a `tools` array that the families share. Each family
//! reads its own tool types and sets the limits they lack (OpenAI's
//! `max_tool_calls`, Anthropic's `max_uses`), so the reserved bound holds
//! at the provider. Tools that cannot be bounded before the call, and tool
//! types the gateway does not know, are refused: any of them may be billed
//! outside tokens.

use serde_json::{Map, Value};

use super::bad;
use crate::error::GatewayError;
use crate::hosted::HostedTool;

/// The refusal code of a tool the gateway cannot bound.
pub(crate) const NOT_SUPPORTED: &str = "tool_not_supported";

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
}

impl DeclaredTool {
    pub(crate) fn new(tool: HostedTool, name: &str, index: Option<usize>) -> DeclaredTool {
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
pub(crate) enum ToolKind {
    Hosted(HostedTool),
    /// Run by the client (functions, shells, editors) or by the provider
    /// at token prices only: nothing to bound beyond the tokens.
    TokensOnly,
    /// Billed in a way no limit bounds before the call.
    Unbounded(&'static str),
    Unknown,
}

/// One entry of `tools`: its index, its fields and its type (`None`: a
/// tool without one, which Anthropic reads as a custom tool).
pub(crate) type ToolEntry<'a> = (usize, &'a Map<String, Value>, Option<&'a str>);

/// The entries of `tools`.
pub(crate) fn tool_entries(body: &Map<String, Value>) -> Result<Vec<ToolEntry<'_>>, GatewayError> {
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

pub(crate) fn refuse(kind: &str, why: &str, param: &'static str) -> GatewayError {
    GatewayError::BadRequest {
        message: format!("the tool `{kind}` {why}; remove it"),
        param: Some(param),
        code: Some(NOT_SUPPORTED),
    }
}

pub(crate) fn unknown(kind: &str) -> GatewayError {
    refuse(
        kind,
        "is not known to this gateway: it may be billed outside tokens, beyond what the \
         call reserved",
        "tools",
    )
}

/// A count a tool or the request sets: a non-negative integer.
pub(crate) fn count(
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
