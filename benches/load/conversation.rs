//! The conversations of the conversation mode: what a coding agent sends.
//! An agent resends its whole conversation on every turn — the system
//! prompt, every exchange so far, one new message — so a turn 128k tokens
//! deep carries half a megabyte that the gateway has already seen, byte
//! for byte, on the turn before.
//!
//! Each agent has a conversation of its own, grown exchange by exchange
//! from its system prompt to each depth in turn (the shallower depths are
//! prefixes of the deeper ones, as an agent's turns are). At a depth, the
//! measured turns come in sessions of [`SESSION_TURNS`]: the first turn is
//! the conversation so far and a new user message, and each next turn is
//! the previous turn's messages, the assistant's reply to it and one new
//! user message, so every turn's body is the previous one's with an
//! exchange added before the closing brackets. A new session starts from
//! the depth's conversation again with new messages, so every measured
//! turn stays within a few hundred tokens of its depth and no two bodies
//! are the same (no cache of whole requests answers one).
//!
//! The text is generated from a fixed seed: sentences of varied English
//! words and the identifiers, paths, numbers and code of a coding session,
//! which OpenAI's tokenizer counts at about 4.3 bytes a token, as it does
//! real chat, rather than one repeated word, which it would take whole.
//! Depths are counted with the gateway's own tokenizer (o200k_base, exact
//! for `gpt-4o-mini`) as OpenAI counts a chat prompt: each message's
//! role and content and 3 tokens framing it, and 3 priming the reply. The
//! reply appended to a turn is the conversation's own text rather than the
//! upstream's fixed one, so every configuration is sent the same bytes.

use bytes::Bytes;
use serde::Serialize;
use tollgate::tokenizer::Tokenizer;

use crate::error::BenchError;
use crate::setup::INSTANT_MODEL;

/// Turns of one session: the depth's conversation and a new message, then
/// an exchange more each turn.
pub const SESSION_TURNS: usize = 4;

/// Output limit of a turn: bounds its reservation.
const MAX_TOKENS: u64 = 16;

/// Tokens framing each message and priming the reply (OpenAI's count).
const TOKENS_PER_MESSAGE: u64 = 3;
const TOKENS_PER_REPLY: u64 = 3;

/// Where the conversation's history stops short of its depth: about what
/// a session's turns add on average, so that the turns' mean is the depth.
const SESSION_MEAN_TOKENS: u64 = 200;

const SYSTEM_PROMPT: &str = "You are a coding agent working in a Rust repository on the user's machine. Read the files you need before you change them, run the tests after every change, and explain what you did in a few sentences. Never invent file names, test results or command output; when a command fails, show its error and say what you will try next.";

/// One depth of the conversation mode, and how many turns are measured
/// there per configuration, loop and round.
#[derive(Clone, Copy, Debug)]
pub struct Depth {
    pub label: &'static str,
    /// The books check after this depth's turns.
    pub phase: &'static str,
    /// The mean prompt tokens of the measured turns.
    pub tokens: u64,
    pub turns: usize,
}

/// The full run's depths. The deepest turns, with their session's growth
/// and the reply, fit gpt-4o-mini's window of 128,000 tokens. Fewer turns
/// the deeper it goes, as each costs more: enough that each gateway's CPU
/// over three rounds spans dozens of /proc's 10 ms ticks at every depth.
pub const DEPTHS: [Depth; 4] = [
    Depth {
        label: "1k",
        phase: "1k turns",
        tokens: 1_000,
        turns: 400,
    },
    Depth {
        label: "8k",
        phase: "8k turns",
        tokens: 8_000,
        turns: 200,
    },
    Depth {
        label: "32k",
        phase: "32k turns",
        tokens: 32_000,
        turns: 150,
    },
    Depth {
        label: "128k",
        phase: "128k turns",
        tokens: 127_500,
        turns: 80,
    },
];

/// The smoke run's: shallow, a session each, for a debug build.
pub const SMOKE_DEPTHS: [Depth; 2] = [
    Depth {
        label: "1k",
        phase: "1k turns",
        tokens: 1_000,
        turns: SESSION_TURNS,
    },
    Depth {
        label: "4k",
        phase: "4k turns",
        tokens: 4_000,
        turns: SESSION_TURNS,
    },
];

/// One message as the chat API takes it, role first.
#[derive(Serialize)]
struct Message<'a> {
    role: &'a str,
    content: &'a str,
}

/// A message serialized once, with its tokens.
struct Said {
    json: String,
    tokens: u64,
}

/// One agent's conversation so far.
pub struct Agent {
    tokenizer: &'static Tokenizer,
    words: Words,
    /// Its messages, serialized and comma-separated, without the brackets.
    history: String,
    /// OpenAI's count of those messages, without the reply's priming.
    history_tokens: u64,
    /// Sessions started, so that each one's messages are new.
    sessions: u64,
    index: u64,
}

/// The turns of one loop at one depth: a list of bodies per agent, to be
/// sent in order, each after the last is answered.
pub struct Script {
    pub agents: Vec<Vec<Bytes>>,
    /// Over every turn: prompt tokens and body bytes.
    pub tokens: u64,
    pub bytes: u64,
    pub turns: u64,
}

impl Agent {
    /// Agent `index`'s conversation: its system prompt alone.
    pub fn new(index: u64) -> Result<Agent, BenchError> {
        let tokenizer = Tokenizer::o200k_base()
            .ok_or_else(|| BenchError::Invalid("the o200k_base tokenizer is missing".to_owned()))?;
        let mut agent = Agent {
            tokenizer,
            words: Words::new(0x636f_6e76 ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            history: String::new(),
            history_tokens: 0,
            sessions: 0,
            index,
        };
        let system = agent.say("system", SYSTEM_PROMPT);
        agent.append(&system);
        Ok(agent)
    }

    /// Adds exchanges until the conversation's turns will average `depth`
    /// tokens. Where a whole exchange (one with code and a command's output
    /// runs to several hundred tokens) would take it past the depth, a
    /// brief one comes instead if that takes it nearer, else none.
    pub fn grow_to(&mut self, depth: Depth) {
        let history = depth.tokens.saturating_sub(SESSION_MEAN_TOKENS);
        loop {
            let now = self.history_tokens + TOKENS_PER_REPLY;
            let grown = |exchange: &(Said, Said)| now + exchange.0.tokens + exchange.1.tokens;
            let nearer = |exchange: &(Said, Said)| {
                grown(exchange).saturating_sub(history) < history.saturating_sub(now)
            };
            let (task, reply) = (self.words.task(), self.words.reply());
            let mut exchange = (self.say("user", &task), self.say("assistant", &reply));
            if grown(&exchange) > history {
                let (task, reply) = (self.words.brief(), self.words.brief());
                exchange = (self.say("user", &task), self.say("assistant", &reply));
                if !nearer(&exchange) {
                    return;
                }
            }
            self.append(&exchange.0);
            self.append(&exchange.1);
        }
    }

    /// The agent's next `turns` turns, in sessions from the conversation so
    /// far. Each session's messages are new: seeded by the agent and the
    /// session, the same for every configuration that is sent them.
    pub fn turns(&mut self, turns: usize) -> (Vec<Bytes>, u64) {
        let mut bodies = Vec::with_capacity(turns);
        let mut tokens = 0;
        while bodies.len() < turns {
            self.sessions += 1;
            let mut words = Words::new((self.index << 32) ^ self.sessions ^ 0x7365_7373);
            let mut tail: Vec<Said> = Vec::with_capacity(2 * SESSION_TURNS);
            for turn in 0..SESSION_TURNS.min(turns - bodies.len()) {
                if turn > 0 {
                    let reply = words.short_reply();
                    tail.push(self.say("assistant", &reply));
                }
                let ask = words.follow_up(self.sessions, turn);
                tail.push(self.say("user", &ask));
                let (body, body_tokens) = self.body(&tail);
                bodies.push(body);
                tokens += body_tokens;
            }
        }
        (bodies, tokens)
    }

    /// The body of a turn: the conversation so far and `tail`, and the
    /// prompt tokens OpenAI counts in it.
    fn body(&self, tail: &[Said]) -> (Bytes, u64) {
        let head =
            format!("{{\"model\":\"{INSTANT_MODEL}\",\"max_tokens\":{MAX_TOKENS},\"messages\":[");
        let tail_len: usize = tail.iter().map(|said| said.json.len() + 1).sum();
        let mut body = String::with_capacity(head.len() + self.history.len() + tail_len + 2);
        body.push_str(&head);
        body.push_str(&self.history);
        let mut tokens = self.history_tokens + TOKENS_PER_REPLY;
        for said in tail {
            body.push(',');
            body.push_str(&said.json);
            tokens += said.tokens;
        }
        body.push_str("]}");
        (Bytes::from(body), tokens)
    }

    fn say(&self, role: &str, content: &str) -> Said {
        let message = Message { role, content };
        Said {
            // A struct of two strings always serializes.
            json: serde_json::to_string(&message).unwrap_or_default(),
            tokens: TOKENS_PER_MESSAGE + self.tokenizer.count(role) + self.tokenizer.count(content),
        }
    }

    fn append(&mut self, said: &Said) {
        if !self.history.is_empty() {
            self.history.push(',');
        }
        self.history.push_str(&said.json);
        self.history_tokens += said.tokens;
    }
}

/// The turns of one loop at the agents' current depth: `turns` in all,
/// shared out over `agents` agents (the first ones take the remainder).
pub fn script(agents: &mut [Agent], turns: usize) -> Script {
    let count = agents.len().max(1);
    let mut script = Script {
        agents: Vec::with_capacity(count),
        tokens: 0,
        bytes: 0,
        turns: 0,
    };
    for (index, agent) in agents.iter_mut().enumerate() {
        let share = turns / count + usize::from(index < turns % count);
        let (bodies, tokens) = agent.turns(share);
        script.tokens += tokens;
        script.bytes += bodies.iter().map(|body| body.len() as u64).sum::<u64>();
        script.turns += bodies.len() as u64;
        script.agents.push(bodies);
    }
    script
}

// === the text ===

/// Frequent short words, drawn about half the time, as in English prose.
const COMMON: &[&str] = &[
    "the", "a", "an", "of", "to", "in", "and", "that", "is", "it", "for", "on", "with", "as",
    "this", "be", "are", "was", "at", "by", "not", "or", "from", "but", "have", "we", "you",
    "they", "which", "when", "if", "so", "can", "will", "would", "should", "there", "then", "than",
    "all", "each", "one", "its", "our", "their", "into", "only", "also", "after", "before",
    "because", "while", "what", "how", "no", "more", "any", "some", "other", "same", "first",
    "still", "just", "now", "here", "every", "both", "does", "did", "has", "had", "been", "these",
    "those", "where", "who", "out", "up", "about", "over", "between",
];

/// Words of a coding session, and of English at large.
const CONTENT: &[&str] = &[
    "request",
    "response",
    "budget",
    "gateway",
    "reservation",
    "ledger",
    "counter",
    "token",
    "error",
    "test",
    "file",
    "module",
    "function",
    "change",
    "branch",
    "commit",
    "value",
    "limit",
    "store",
    "cache",
    "key",
    "call",
    "stream",
    "event",
    "header",
    "body",
    "message",
    "reply",
    "user",
    "agent",
    "model",
    "price",
    "cost",
    "charge",
    "refund",
    "period",
    "window",
    "thread",
    "lock",
    "queue",
    "worker",
    "client",
    "server",
    "proxy",
    "upstream",
    "connection",
    "socket",
    "timeout",
    "retry",
    "config",
    "setting",
    "field",
    "record",
    "entry",
    "table",
    "index",
    "query",
    "result",
    "output",
    "input",
    "batch",
    "line",
    "column",
    "number",
    "string",
    "byte",
    "buffer",
    "parser",
    "schema",
    "version",
    "release",
    "build",
    "check",
    "run",
    "start",
    "stop",
    "read",
    "write",
    "send",
    "receive",
    "open",
    "close",
    "handle",
    "return",
    "count",
    "measure",
    "compare",
    "expect",
    "assume",
    "fail",
    "pass",
    "replace",
    "remove",
    "add",
    "update",
    "fix",
    "break",
    "keep",
    "move",
    "split",
    "merge",
    "wrap",
    "parse",
    "encode",
    "decode",
    "reserve",
    "settle",
    "expire",
    "allow",
    "refuse",
    "reject",
    "accept",
    "log",
    "print",
    "report",
    "explain",
    "describe",
    "notice",
    "suggest",
    "prefer",
    "decide",
    "follow",
    "quick",
    "slow",
    "small",
    "large",
    "long",
    "short",
    "old",
    "new",
    "exact",
    "rough",
    "safe",
    "empty",
    "full",
    "late",
    "early",
    "hidden",
    "visible",
    "simple",
    "careful",
    "broken",
    "stale",
    "fresh",
    "clear",
    "strange",
    "obvious",
    "likely",
    "probably",
    "actually",
    "already",
    "instead",
    "almost",
    "usually",
    "rarely",
    "quietly",
    "twice",
    "again",
    "morning",
    "afternoon",
    "week",
    "people",
    "team",
    "customer",
    "invoice",
    "order",
    "shipment",
    "warehouse",
    "carrier",
    "parcel",
    "address",
    "country",
    "weather",
    "garden",
    "kitchen",
    "coffee",
    "journey",
    "station",
    "platform",
    "ticket",
    "museum",
    "library",
    "history",
    "question",
    "answer",
    "reason",
    "example",
    "problem",
    "solution",
    "idea",
    "detail",
    "summary",
    "document",
    "page",
    "section",
    "paragraph",
    "sentence",
    "word",
    "picture",
    "color",
    "sound",
    "voice",
    "music",
    "river",
    "mountain",
    "village",
    "market",
    "bridge",
    "harbour",
    "engine",
    "machine",
    "signal",
    "pattern",
    "shape",
    "surface",
    "distance",
    "moment",
    "minute",
    "hour",
    "season",
    "winter",
    "summer",
    "remember",
    "forget",
    "understand",
    "believe",
    "wonder",
    "happen",
    "appear",
    "seem",
    "become",
    "choose",
    "carry",
    "bring",
    "build",
    "grow",
    "learn",
    "teach",
    "travel",
    "wait",
    "watch",
    "listen",
    "speak",
    "honest",
    "gentle",
    "bright",
    "heavy",
    "narrow",
    "wide",
    "quiet",
    "loud",
    "warm",
    "cold",
];

/// Longer and rarer words, which the tokenizer splits and merges.
const RARE: &[&str] = &[
    "idempotent",
    "reconciliation",
    "serialization",
    "deduplicate",
    "concurrency",
    "throughput",
    "latency",
    "backpressure",
    "amortized",
    "invariant",
    "monotonic",
    "asynchronous",
    "deterministic",
    "heuristic",
    "granularity",
    "provenance",
    "observability",
    "misconfiguration",
    "checkpointing",
    "tokenizer",
    "preallocated",
    "unreachable",
    "overcommitted",
    "linearizable",
    "quiescent",
    "contention",
    "fragmentation",
    "saturation",
    "regression",
    "bisecting",
    "flakiness",
    "reproducible",
    "instrumentation",
    "acknowledgement",
    "retransmission",
    "compaction",
    "denormalized",
    "extrapolate",
    "underestimate",
    "circumstances",
    "Wednesday",
    "September",
    "Lisbon",
    "Kyoto",
    "Nairobi",
];

/// Names for identifiers, paths and types.
const NAMES: &[&str] = &[
    "budget",
    "ledger",
    "reserve",
    "settle",
    "estimate",
    "usage",
    "meter",
    "stream",
    "store",
    "redis",
    "sqlite",
    "memory",
    "config",
    "price",
    "tokens",
    "window",
    "sweep",
    "drain",
    "reconcile",
    "alerts",
    "admin",
    "directory",
    "family",
    "upstream",
    "proxy",
    "admit",
    "forward",
    "journal",
    "record",
    "scope",
    "period",
    "charge",
    "refund",
    "cap",
    "key",
    "org",
];

/// A splitmix64 generator: small, fast, the same text on every machine.
struct Words {
    state: u64,
}

impl Words {
    fn new(seed: u64) -> Words {
        Words { state: seed }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `low..=high`.
    fn between(&mut self, low: usize, high: usize) -> usize {
        low + (self.next() % (high - low + 1) as u64) as usize
    }

    /// True once in `n` draws.
    fn one_in(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
    }

    fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
        words[(self.next() % words.len() as u64) as usize]
    }

    fn word(&mut self) -> String {
        match self.next() % 100 {
            0..=43 => self.pick(COMMON).to_owned(),
            44..=83 => self.pick(CONTENT).to_owned(),
            84..=89 => self.pick(RARE).to_owned(),
            90..=95 => format!("`{}`", self.identifier()),
            _ => self.number(),
        }
    }

    fn identifier(&mut self) -> String {
        match self.next() % 4 {
            0 => format!("{}_{}", self.pick(NAMES), self.pick(NAMES)),
            1 => format!(
                "{}{}",
                capitalized(self.pick(NAMES)),
                capitalized(self.pick(NAMES))
            ),
            2 => format!("src/{}/{}.rs", self.pick(NAMES), self.pick(NAMES)),
            _ => format!("{}::{}()", self.pick(NAMES), self.pick(NAMES)),
        }
    }

    fn number(&mut self) -> String {
        match self.next() % 4 {
            0 => self.between(2, 999).to_string(),
            1 => format!("{},{:03}", self.between(1, 99), self.between(0, 999)),
            2 => format!("{}.{} ms", self.between(0, 40), self.between(0, 9)),
            _ => format!("line {}", self.between(10, 2_000)),
        }
    }

    fn sentence(&mut self) -> String {
        let words = self.between(5, 22);
        let mut text = String::new();
        for n in 0..words {
            let word = self.word();
            if n == 0 {
                text.push_str(&capitalized(&word));
            } else {
                text.push(' ');
                text.push_str(&word);
            }
            if n + 1 < words && self.one_in(9) {
                text.push(',');
            }
        }
        text.push(if self.one_in(8) { '?' } else { '.' });
        text
    }

    fn paragraph(&mut self, sentences: usize) -> String {
        let mut text = String::new();
        for n in 0..sentences {
            if n > 0 {
                text.push(' ');
            }
            text.push_str(&self.sentence());
        }
        text
    }

    fn code(&mut self) -> String {
        let mut text = String::from("```rust\n");
        let name = format!("{}_{}", self.pick(NAMES), self.pick(NAMES));
        text.push_str(&format!(
            "fn {name}(&self, {}: &{}) -> Result<u64, Error> {{\n",
            self.pick(NAMES),
            capitalized(self.pick(NAMES))
        ));
        for _ in 0..self.between(2, 8) {
            let line = match self.next() % 4 {
                0 => format!(
                    "    let {} = self.{}(&{})?;\n",
                    self.pick(NAMES),
                    self.pick(NAMES),
                    self.pick(NAMES)
                ),
                1 => format!(
                    "    if {}.len() > {} {{\n        return Err(Error::{}({}));\n    }}\n",
                    self.pick(NAMES),
                    self.between(1, 4_096),
                    capitalized(self.pick(NAMES)),
                    self.pick(NAMES)
                ),
                2 => format!(
                    "    // {}\n",
                    self.sentence().trim_end_matches('.').to_lowercase()
                ),
                _ => format!(
                    "    {}.{}({}, {});\n",
                    self.pick(NAMES),
                    self.pick(NAMES),
                    self.between(0, 100),
                    self.pick(NAMES)
                ),
            };
            text.push_str(&line);
        }
        text.push_str(&format!("    Ok({})\n}}\n```", self.pick(NAMES)));
        text
    }

    /// What a command printed: test results, or a compiler's error.
    fn command_output(&mut self) -> String {
        let mut text = String::from("```\n");
        for _ in 0..self.between(3, 12) {
            let line = match self.next() % 3 {
                0 | 1 => format!(
                    "test {}::{}::{}_{} ... {}\n",
                    self.pick(NAMES),
                    self.pick(NAMES),
                    self.pick(NAMES),
                    self.pick(NAMES),
                    if self.one_in(6) { "FAILED" } else { "ok" }
                ),
                _ => format!(
                    "error[E0{}]: {}\n  --> src/{}/{}.rs:{}:{}\n",
                    self.between(100, 799),
                    self.sentence().trim_end_matches(['.', '?']).to_lowercase(),
                    self.pick(NAMES),
                    self.pick(NAMES),
                    self.between(1, 900),
                    self.between(1, 99)
                ),
            };
            text.push_str(&line);
        }
        text.push_str(&format!(
            "test result: ok. {} passed; {} failed; finished in {}.{:02}s\n```",
            self.between(1, 400),
            self.between(0, 3),
            self.between(0, 30),
            self.between(0, 99)
        ));
        text
    }

    /// A user's message in the history: a task, with a command's output
    /// now and then, as an agent's tool results come back.
    fn task(&mut self) -> String {
        let paragraphs = self.between(1, 3);
        let mut parts = Vec::with_capacity(paragraphs + 1);
        for _ in 0..paragraphs {
            let sentences = self.between(1, 4);
            parts.push(self.paragraph(sentences));
        }
        if self.one_in(3) {
            let output = self.command_output();
            parts.push(output);
        }
        parts.join("\n\n")
    }

    /// An assistant's reply in the history: explanation, sometimes code.
    fn reply(&mut self) -> String {
        let paragraphs = self.between(1, 4);
        let mut parts = Vec::with_capacity(paragraphs + 1);
        for _ in 0..paragraphs {
            let sentences = self.between(2, 6);
            parts.push(self.paragraph(sentences));
        }
        if self.one_in(2) {
            let at = self.between(0, parts.len());
            let code = self.code();
            parts.insert(at, code);
        }
        parts.join("\n\n")
    }

    /// A session's user message, numbered so that none repeats.
    fn follow_up(&mut self, session: u64, turn: usize) -> String {
        let sentences = self.between(1, 2);
        format!("Step {session}.{}: {}", turn + 1, self.paragraph(sentences))
    }

    /// A message of a sentence or two.
    fn brief(&mut self) -> String {
        let sentences = self.between(1, 2);
        self.paragraph(sentences)
    }

    /// A session's assistant reply: a few sentences.
    fn short_reply(&mut self) -> String {
        let sentences = self.between(2, 4);
        self.paragraph(sentences)
    }
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}
