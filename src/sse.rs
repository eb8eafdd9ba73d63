//! Server-sent events: splitting a byte stream into whole events in one
//! pass, and reading the fields of one event.
//!
//! The proxy forwards every byte it receives unchanged, so the splitter never
//! rewrites anything: an event is handed out as the exact bytes that arrived,
//! terminating blank line included, and the events followed by the final
//! remainder concatenate back to the input. Each byte is looked at once, even
//! when an event arrives in many small chunks.
//!
//! No SSE crate does this: they (`eventsource-stream` and its kind) are
//! stream adapters that hand out parsed events, UTF-8 strings with their
//! line endings gone, while the proxy must forward, drop (the usage chunk
//! a client did not ask for) or hold back (the terminal event) each event
//! as the very bytes the provider sent. The splitter here is a plain
//! function over bytes that the metered body calls as chunks arrive, and
//! [`parse_event`] reads fields from those bytes without copying them
//! unless `data` spans several lines.

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};

/// Where the scan stands in the line structure of the buffered bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Scan {
    /// At the start of a line whose previous line ended in `\n`, or of the
    /// stream.
    #[default]
    LineStart,
    /// At the start of a line whose previous line ended in `\r`: a `\n` here
    /// completes that `\r\n` rather than making a blank line.
    LineStartAfterCr,
    /// Inside a line that has content.
    InLine,
    /// A blank line ended in `\r`: the event is complete, but if the next
    /// byte is `\n` it is the second half of that line ending and belongs to
    /// this event. Held until that byte is known, so an event never ends
    /// between the two halves of a `\r\n`.
    BlankCr,
}

/// Splits a byte stream into complete SSE events, in one pass.
///
/// Events end at a blank line; lines end in `\n`, `\r\n` or `\r`, mixed
/// freely. A blank line ended by a `\r` that is the last byte buffered holds
/// its event until the next byte arrives (or [`SseSplitter::take_rest`]).
#[derive(Debug, Default)]
pub struct SseSplitter {
    buf: BytesMut,
    /// Bytes of `buf` already scanned; the scan resumes here.
    scanned: usize,
    /// Line state at `scanned`.
    state: Scan,
}

impl SseSplitter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends bytes that arrived from upstream.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete raw event, terminating blank line included, split
    /// off the buffer without copying; `None` until one is complete.
    ///
    /// A stray blank line (an empty line between events) comes out as an
    /// event of its own, a lone line ending, so no byte is lost; its
    /// [`parse_event`] has no fields.
    pub fn next_event(&mut self) -> Option<Bytes> {
        loop {
            if self.state == Scan::InLine {
                // The rest of a line cannot end an event: skip to its end.
                let rest = self.buf.get(self.scanned..).unwrap_or_default();
                match rest.iter().position(|b| *b == b'\n' || *b == b'\r') {
                    Some(offset) => self.scanned += offset,
                    None => {
                        self.scanned = self.buf.len();
                        return None;
                    }
                }
            }
            let &byte = self.buf.get(self.scanned)?;
            self.state = match (self.state, byte) {
                (Scan::LineStart, b'\n') | (Scan::BlankCr, b'\n') => {
                    return Some(self.split_event(self.scanned + 1));
                }
                // `byte` starts the next event; it stays unscanned.
                (Scan::BlankCr, _) => return Some(self.split_event(self.scanned)),
                (Scan::LineStartAfterCr, b'\n') | (Scan::InLine, b'\n') => Scan::LineStart,
                (Scan::InLine, b'\r') => Scan::LineStartAfterCr,
                (_, b'\r') => Scan::BlankCr,
                (_, _) => Scan::InLine,
            };
            self.scanned += 1;
        }
    }

    /// Hands out the first `end` bytes as an event; the scan restarts
    /// after them.
    fn split_event(&mut self, end: usize) -> Bytes {
        self.state = Scan::LineStart;
        self.scanned = 0;
        self.buf.split_to(end).freeze()
    }

    /// At the end of the stream: whatever is still buffered. It is usually
    /// an incomplete event, but it can be a complete one whose blank line
    /// ended in a `\r` that was the stream's last byte.
    pub fn take_rest(&mut self) -> Bytes {
        self.state = Scan::LineStart;
        self.scanned = 0;
        self.buf.split().freeze()
    }

    /// Bytes buffered and not yet handed out.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }
}

/// The fields of one raw event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The `event:` field; `None` when absent or empty (the default
    /// `message` type).
    pub event: Option<&'a str>,
    /// The `data:` lines joined with `\n`; borrowed from the raw event when
    /// there is at most one.
    pub data: Cow<'a, [u8]>,
}

/// Reads the fields of one raw event, per the WHATWG EventSource rules:
/// `field: value` (one leading space stripped from the value), `field:value`,
/// a bare `field` with an empty value; lines starting with `:` are comments;
/// unknown fields (`id`, `retry`, …) are ignored.
///
/// An unterminated last line still counts, so the remainder of a cut stream
/// can be read too.
pub fn parse_event(raw: &[u8]) -> SseEvent<'_> {
    let raw = raw.strip_prefix(UTF8_BOM).unwrap_or(raw);
    let mut event = None;
    let mut data: Option<Cow<'_, [u8]>> = None;
    for line in (Lines { rest: raw }) {
        if line.first().is_none_or(|b| *b == b':') {
            continue;
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        match field {
            b"event" => event = std::str::from_utf8(value).ok().filter(|v| !v.is_empty()),
            b"data" => {
                data = Some(match data {
                    None => Cow::Borrowed(value),
                    Some(mut joined) => {
                        let owned = joined.to_mut();
                        owned.push(b'\n');
                        owned.extend_from_slice(value);
                        joined
                    }
                })
            }
            _ => {}
        }
    }
    SseEvent {
        event,
        data: data.unwrap_or(Cow::Borrowed(&[])),
    }
}

/// A byte-order mark the spec allows at the start of a stream.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// The lines of an event, each without its ending (`\n`, `\r\n` or `\r`).
struct Lines<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Lines<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.rest.is_empty() {
            return None;
        }
        let Some(end) = self.rest.iter().position(|b| *b == b'\n' || *b == b'\r') else {
            return Some(std::mem::take(&mut self.rest));
        };
        let line = &self.rest[..end];
        let ending = match &self.rest[end..] {
            [b'\r', b'\n', ..] => 2,
            _ => 1,
        };
        self.rest = &self.rest[end + ending..];
        Some(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPENAI_CHAT: &[u8] = include_bytes!("family/fixtures/openai_chat.sse");
    const OPENAI_TOOLS: &[u8] = include_bytes!("family/fixtures/openai_chat_tools.sse");
    const OPENAI_COMPLETIONS: &[u8] = include_bytes!("family/fixtures/openai_completions.sse");
    const RESPONSES: &[u8] = include_bytes!("family/fixtures/responses.sse");
    const ANTHROPIC: &[u8] = include_bytes!("family/fixtures/anthropic.sse");

    const FIXTURES: [&[u8]; 5] = [
        OPENAI_CHAT,
        OPENAI_TOOLS,
        OPENAI_COMPLETIONS,
        RESPONSES,
        ANTHROPIC,
    ];

    /// Feeds `chunks` in order and collects every event, then the rest.
    fn split<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> (Vec<Bytes>, Bytes) {
        let mut splitter = SseSplitter::new();
        let mut events = Vec::new();
        for chunk in chunks {
            splitter.push(chunk);
            while let Some(event) = splitter.next_event() {
                events.push(event);
            }
        }
        (events, splitter.take_rest())
    }

    fn concat(events: &[Bytes], rest: &[u8]) -> Vec<u8> {
        let mut all: Vec<u8> = events.iter().flat_map(|e| e.iter().copied()).collect();
        all.extend_from_slice(rest);
        all
    }

    /// Splitting at every byte position, and into single bytes, yields the
    /// same events as one push, and the events reassemble the input.
    fn assert_split_invariant(input: &[u8]) -> Vec<Bytes> {
        let (whole, whole_rest) = split([input]);
        assert_eq!(concat(&whole, &whole_rest), input);
        for at in 0..=input.len() {
            let (head, tail) = input.split_at(at);
            let (events, rest) = split([head, tail]);
            assert_eq!(events, whole, "split at byte {at}");
            assert_eq!(rest, whole_rest, "split at byte {at}");
        }
        let (events, rest) = split(input.chunks(1));
        assert_eq!(events, whole, "one-byte chunks");
        assert_eq!(rest, whole_rest, "one-byte chunks");
        whole
    }

    fn with_line_endings(input: &[u8], ending: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(input.len() * 2);
        for byte in input {
            match byte {
                b'\n' => out.extend_from_slice(ending),
                other => out.push(*other),
            }
        }
        out
    }

    #[test]
    fn recorded_streams_split_identically_at_every_byte() {
        for fixture in FIXTURES {
            let events = assert_split_invariant(fixture);
            let blank_lines = fixture.windows(2).filter(|w| w == b"\n\n").count();
            assert_eq!(events.len(), blank_lines);
            assert!(events.iter().all(|e| e.ends_with(b"\n\n")));
        }
    }

    #[test]
    fn crlf_streams_split_identically_at_every_byte() {
        for fixture in FIXTURES {
            let input = with_line_endings(fixture, b"\r\n");
            let events = assert_split_invariant(&input);
            assert!(events.iter().all(|e| e.ends_with(b"\r\n\r\n")));
            let expected: Vec<_> = split([fixture])
                .0
                .iter()
                .map(|e| parse_event(e).data.into_owned())
                .collect();
            let seen: Vec<_> = events
                .iter()
                .map(|e| parse_event(e).data.into_owned())
                .collect();
            assert_eq!(seen, expected);
        }
    }

    #[test]
    fn cr_only_stream_holds_its_last_event_until_the_end() {
        let input = with_line_endings(ANTHROPIC, b"\r");
        let events = assert_split_invariant(&input);
        let (_, rest) = split([input.as_slice()]);
        // The final `\r\r` might still be followed by `\n`, so it waits.
        assert_eq!(parse_event(&rest).event, Some("message_stop"));
        assert!(events.iter().all(|e| !e.starts_with(b"\n")));
    }

    #[test]
    fn mixed_line_endings_split_at_every_byte() {
        let input: &[u8] =
            b"data: a\r\n\r\ndata: b\n\ndata: c\r\rdata: d\r\n\nevent: e\rdata: f\n\r\n: note\n\ndata: g\r\r\n";
        let events = assert_split_invariant(input);
        let expected: [&[u8]; 6] = [
            b"data: a\r\n\r\n",
            b"data: b\n\n",
            b"data: c\r\r",
            b"data: d\r\n\n",
            b"event: e\rdata: f\n\r\n",
            b": note\n\n",
        ];
        assert_eq!(events.len(), 7);
        for (event, want) in events.iter().zip(expected) {
            assert_eq!(event.as_ref(), want);
        }
        assert_eq!(events[6].as_ref(), b"data: g\r\r\n");
    }

    #[test]
    fn cr_at_chunk_end_waits_for_the_next_byte() {
        let mut splitter = SseSplitter::new();
        splitter.push(b"data: a\r\n\r");
        assert_eq!(splitter.next_event(), None);
        splitter.push(b"\ndata: b\r\r");
        assert_eq!(
            splitter.next_event().as_deref(),
            Some(&b"data: a\r\n\r\n"[..])
        );
        assert_eq!(splitter.next_event(), None);
        splitter.push(b"data: c\n\n");
        assert_eq!(splitter.next_event().as_deref(), Some(&b"data: b\r\r"[..]));
        assert_eq!(splitter.next_event().as_deref(), Some(&b"data: c\n\n"[..]));
        assert_eq!(splitter.next_event(), None);
        assert_eq!(splitter.buffered(), 0);
    }

    #[test]
    fn stray_blank_lines_are_events_without_fields() {
        let (events, rest) = split([&b"\ndata: a\n\n\n\r\ndata: b\n\n"[..]]);
        let raw: Vec<&[u8]> = events.iter().map(|e| e.as_ref()).collect();
        assert_eq!(
            raw,
            [&b"\n"[..], b"data: a\n\n", b"\n", b"\r\n", b"data: b\n\n"]
        );
        assert!(rest.is_empty());
        assert_eq!(
            parse_event(&events[2]),
            SseEvent {
                event: None,
                data: Cow::Borrowed(&[])
            }
        );
    }

    #[test]
    fn incomplete_event_stays_buffered() {
        let mut splitter = SseSplitter::new();
        splitter.push(b"data: {\"partial\":");
        assert_eq!(splitter.next_event(), None);
        assert_eq!(splitter.buffered(), 17);
        // The next search resumes where this one stopped.
        assert_eq!(splitter.scanned, 17);
        splitter.push(b" 1}\n");
        assert_eq!(splitter.next_event(), None);
        assert_eq!(splitter.take_rest().as_ref(), b"data: {\"partial\": 1}\n");
        assert_eq!(splitter.buffered(), 0);
        splitter.push(b"data: x\n\n");
        assert_eq!(splitter.next_event().as_deref(), Some(&b"data: x\n\n"[..]));
    }

    #[test]
    fn one_data_line_is_borrowed() {
        let event = parse_event(b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
        assert_eq!(event.event, Some("message_stop"));
        assert!(matches!(
            event.data,
            Cow::Borrowed(b"{\"type\":\"message_stop\"}")
        ));
    }

    #[test]
    fn data_lines_join_with_newline() {
        let event = parse_event(b"data: first\r\ndata:second\rdata:  third\ndata\n\n");
        assert_eq!(event.event, None);
        assert_eq!(event.data.as_ref(), b"first\nsecond\n third\n");
    }

    #[test]
    fn comments_and_unknown_fields_are_ignored() {
        let raw = b": keep-alive\nid: 7\nretry: 3000\nfoo: bar\nevent: ping\ndata: {}\n\n";
        let event = parse_event(raw);
        assert_eq!(event.event, Some("ping"));
        assert_eq!(event.data.as_ref(), b"{}");
        assert_eq!(parse_event(b": only a comment\n\n").data.as_ref(), b"");
    }

    #[test]
    fn last_event_field_wins_and_empty_means_default() {
        assert_eq!(parse_event(b"event: a\nevent: b\n\n").event, Some("b"));
        assert_eq!(parse_event(b"event: a\nevent:\n\n").event, None);
        assert_eq!(parse_event(b"event:x\n\n").event, Some("x"));
    }

    #[test]
    fn unterminated_line_and_bom_are_read() {
        let event = parse_event(b"\xEF\xBB\xBFdata: [DONE]");
        assert_eq!(event.data.as_ref(), b"[DONE]");
    }
}
