//! What a streamed response has shown so far: the usage its provider
//! reported, the text it carried and the counts no call can have. Each
//! family's stream reader (the `family` modules) fills it in, event by event;
//! the metered body settles from it.

use super::{AbsurdUsage, Reported, ServiceTier, Usage};

/// What to do with an event after the meter has seen it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventAction {
    /// Pass it to the client.
    Forward,
    /// Keep it from the client: the usage chunk the gateway asked for.
    Drop,
    /// The event that ends the stream; the caller settles BEFORE forwarding
    /// it, so the client never sees the end of a call that is not paid for.
    Terminal,
}

/// Output tokens counted from text the client has seen: a conservative
/// count, ceil(bytes / 3).
///
/// The providers' tokenizers average about four bytes of English or code
/// per token, and about one token per three-byte character of CJK text.
/// Three bytes per token therefore overcounts usual text a little, which is
/// the side to err on: this count settles a stream that was cut before the
/// provider reported its usage, and undercounting would let such a stream
/// spend past the cap unbilled.
pub fn count_output_tokens(text_bytes: u64) -> u64 {
    text_bytes.div_ceil(3)
}

/// The usage and text one stream has shown so far.
#[derive(Clone, Debug, Default)]
pub struct StreamSeen {
    /// Latest counts the provider reported; fields not yet reported are 0.
    pub usage: Usage,
    /// Input counts were reported (Anthropic sends them first, in
    /// `message_start`; Gemini in every chunk).
    pub input_reported: bool,
    /// The final output count was reported.
    pub output_reported: bool,
    /// Decoded UTF-8 bytes of generated text seen, reasoning and tool-call
    /// arguments included.
    text_bytes: u64,
    /// The first count the provider reported that no call can have: its
    /// report is then not believed at all, however the stream ends.
    absurd: Option<AbsurdUsage>,
    /// The latest tier a chunk reported (every OpenAI chunk carries it).
    pub service_tier: Option<ServiceTier>,
}

impl StreamSeen {
    /// Provider-reported usage if the stream carried it in full, else
    /// `None`; an absurd count anywhere in the stream's reports makes it
    /// that, complete or not.
    pub fn reported_usage(&self) -> Option<Reported> {
        if let Some(absurd) = &self.absurd {
            return Some(Err(absurd.clone()));
        }
        (self.input_reported && self.output_reported).then_some(Ok(self.with_tier(self.usage)))
    }

    /// `usage` with the tier the chunks reported, if it names none itself.
    fn with_tier(&self, usage: Usage) -> Usage {
        Usage {
            service_tier: usage.service_tier.or(self.service_tier),
            ..usage
        }
    }

    /// The first absurd count the provider reported, if any: a stream cut
    /// after one is charged its bound, not what was seen.
    pub fn absurd_usage(&self) -> Option<&AbsurdUsage> {
        self.absurd.as_ref()
    }

    /// What the stream showed, for one that was cut: the input counts
    /// reported so far and, as output, the larger of the latest reported
    /// output count and the tokens counted from the text seen.
    pub fn partial_usage(&self) -> Usage {
        self.with_tier(Usage {
            output: self.usage.output.max(count_output_tokens(self.text_bytes)),
            ..self.usage
        })
    }

    /// Decoded UTF-8 bytes of generated text seen so far.
    pub fn output_text_bytes(&self) -> u64 {
        self.text_bytes
    }

    pub fn count_text(&mut self, bytes: u64) {
        self.text_bytes = self.text_bytes.saturating_add(bytes);
    }

    /// A complete report: every count, final.
    pub fn report(&mut self, usage: Reported) {
        match usage {
            Ok(usage) => {
                self.usage = usage;
                self.input_reported = true;
                self.output_reported = true;
            }
            Err(absurd) => self.note_absurd(absurd),
        }
    }

    pub fn note_absurd(&mut self, absurd: AbsurdUsage) {
        self.absurd.get_or_insert(absurd);
    }
}
