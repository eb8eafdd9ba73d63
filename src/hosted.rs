//! Hosted tools: tools a provider runs itself in the middle of a call (web
//! search, file search, code execution, image generation, MCP calls,
//! Google Search grounding) and bills per use, outside the token counts.
//!
//! Each provider names its tools its own way (`web_search_20250305`,
//! `web_search_preview`, `file_search_call`, `google_search`, …); the API
//! modules map those names onto the small fixed set here, which is what
//! the price table prices (`tool_call_usd`) and what [`ToolCalls`] counts.
//! A leaf: it imports nothing of ours.

use std::fmt;

/// A tool billed per use, by the price table's name for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HostedTool {
    /// OpenAI's `web_search` (and its dated versions), Anthropic's
    /// `web_search_*`: one unit per search.
    WebSearch,
    /// OpenAI's earlier `web_search_preview` tool, and Chat Completions'
    /// `web_search_options` (the search models search once per request):
    /// priced apart because OpenAI bills it differently on non-reasoning
    /// models.
    WebSearchPreview,
    /// Anthropic's `web_fetch_*`: one unit per page fetched.
    WebFetch,
    /// OpenAI's `file_search`: one unit per call.
    FileSearch,
    /// OpenAI's `code_interpreter`: one unit per container session, not
    /// per call.
    CodeInterpreter,
    /// OpenAI's `image_generation`: one unit per image.
    ImageGeneration,
    /// OpenAI's remote `mcp` tool: one unit per call.
    Mcp,
    /// Grounding with Google Search on Gemini and Vertex AI's Gemini models
    /// (the `google_search` tool): one unit per grounded request, as Google
    /// bills Gemini 2.x models (per grounded prompt, however many searches
    /// it ran). Newer models (Gemini 3 and later) are billed per search
    /// query, and one request may run several: their unit is one query,
    /// and the operator prices it accordingly (Google's price per query).
    GoogleSearch,
}

impl HostedTool {
    pub const ALL: [HostedTool; 8] = [
        HostedTool::WebSearch,
        HostedTool::WebSearchPreview,
        HostedTool::WebFetch,
        HostedTool::FileSearch,
        HostedTool::CodeInterpreter,
        HostedTool::ImageGeneration,
        HostedTool::Mcp,
        HostedTool::GoogleSearch,
    ];

    /// The name the price table and messages use.
    pub fn name(self) -> &'static str {
        match self {
            HostedTool::WebSearch => "web_search",
            HostedTool::WebSearchPreview => "web_search_preview",
            HostedTool::WebFetch => "web_fetch",
            HostedTool::FileSearch => "file_search",
            HostedTool::CodeInterpreter => "code_interpreter",
            HostedTool::ImageGeneration => "image_generation",
            HostedTool::Mcp => "mcp",
            HostedTool::GoogleSearch => "google_search",
        }
    }

    pub fn from_name(name: &str) -> Option<HostedTool> {
        HostedTool::ALL.into_iter().find(|tool| tool.name() == name)
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for HostedTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Billed uses of each hosted tool in one call (or a bound on them).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolCalls([u64; HostedTool::ALL.len()]);

impl ToolCalls {
    /// No use of any tool.
    pub const NONE: ToolCalls = ToolCalls([0; HostedTool::ALL.len()]);

    pub fn get(&self, tool: HostedTool) -> u64 {
        self.0[tool.index()]
    }

    pub fn set(&mut self, tool: HostedTool, count: u64) {
        self.0[tool.index()] = count;
    }

    pub fn add(&mut self, tool: HostedTool, count: u64) {
        let slot = &mut self.0[tool.index()];
        *slot = slot.saturating_add(count);
    }

    /// The larger count of each tool.
    pub fn max(self, other: ToolCalls) -> ToolCalls {
        let mut max = self;
        for (mine, theirs) in max.0.iter_mut().zip(other.0) {
            *mine = (*mine).max(theirs);
        }
        max
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|count| *count == 0)
    }

    /// Every tool used at least once, with its count.
    pub fn iter(&self) -> impl Iterator<Item = (HostedTool, u64)> + '_ {
        HostedTool::ALL
            .into_iter()
            .map(|tool| (tool, self.get(tool)))
            .filter(|(_, count)| *count > 0)
    }
}

impl fmt::Debug for ToolCalls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|(tool, count)| (tool.name(), count)))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for tool in HostedTool::ALL {
            assert_eq!(HostedTool::from_name(tool.name()), Some(tool));
        }
        assert_eq!(HostedTool::from_name("code_execution"), None);
        assert_eq!(
            HostedTool::from_name("google_search"),
            Some(HostedTool::GoogleSearch)
        );
    }

    #[test]
    fn all_lists_every_tool_at_its_index() {
        // `ToolCalls` keeps a tool's count at its index in `ALL`.
        for (index, tool) in HostedTool::ALL.into_iter().enumerate() {
            assert_eq!(tool.index(), index, "{tool}");
        }
    }

    #[test]
    fn counts_add_saturate_and_take_the_max() {
        let mut calls = ToolCalls::default();
        assert!(calls.is_empty());
        calls.add(HostedTool::WebSearch, 2);
        calls.add(HostedTool::WebSearch, u64::MAX);
        assert_eq!(calls.get(HostedTool::WebSearch), u64::MAX);
        let mut other = ToolCalls::default();
        other.set(HostedTool::FileSearch, 3);
        let max = calls.max(other);
        assert_eq!(
            max.iter().collect::<Vec<_>>(),
            [
                (HostedTool::WebSearch, u64::MAX),
                (HostedTool::FileSearch, 3)
            ]
        );
        assert_eq!(format!("{other:?}"), r#"{"file_search": 3}"#);
    }
}
