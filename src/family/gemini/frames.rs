//! The JSON-array stream of `streamGenerateContent` without `?alt=sse`:
//! one JSON array, `[{…}\n,\r\n{…}\n]`, sent piece by piece, split into
//! its elements in one pass as the bytes arrive.
//!
//! Like [`crate::sse::SseSplitter`], the splitter never rewrites anything:
//! each element is handed out as the exact bytes that arrived, with the
//! framing before it (the opening `[`, the commas, any whitespace), and the
//! elements followed by the rest concatenate back to the input. The scan
//! keeps its place and its string, escape and depth state between pushes,
//! so each byte is looked at once however small the pieces.
//!
//! An element ends at the `}` that closes the object it opened, outside
//! any string. Only braces count towards the depth: arrays inside an
//! element hold balanced braces of their own, and an array around the
//! elements is framing. A malformed stream (a stray `}`, values that are
//! not objects) is never an error: its bytes ride with the next element,
//! or are left for [`JsonArraySplitter::take_rest`].

use bytes::{Bytes, BytesMut};

/// Splits the JSON-array stream into its elements, in one pass.
#[derive(Debug, Default)]
pub struct JsonArraySplitter {
    buf: BytesMut,
    /// Bytes of `buf` already scanned; the scan resumes here.
    scanned: usize,
    /// Objects opened and not yet closed at `scanned`.
    depth: usize,
    /// `scanned` is inside a JSON string.
    in_string: bool,
    /// The byte before `scanned` is a backslash escaping the next one.
    escaped: bool,
}

impl JsonArraySplitter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends bytes that arrived from upstream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete element, with everything since the previous one
    /// (framing included) and up to its closing brace, split off the buffer
    /// without copying; `None` until one is complete.
    pub fn next_element(&mut self) -> Option<Bytes> {
        while self.scanned < self.buf.len() {
            let rest = self.buf.get(self.scanned..).unwrap_or_default();
            // Jump to the next byte that can change the state: inside a
            // string only its end or an escape; outside, a brace or a quote.
            let next = if self.escaped {
                Some(0)
            } else if self.in_string {
                rest.iter().position(|b| matches!(b, b'"' | b'\\'))
            } else {
                rest.iter().position(|b| matches!(b, b'{' | b'}' | b'"'))
            };
            let Some(offset) = next else {
                self.scanned = self.buf.len();
                return None;
            };
            let at = self.scanned + offset;
            self.scanned = at + 1;
            let byte = self.buf.get(at).copied().unwrap_or_default();
            if self.escaped {
                self.escaped = false;
            } else if self.in_string {
                match byte {
                    b'\\' => self.escaped = true,
                    _ => self.in_string = false,
                }
            } else {
                match byte {
                    b'"' => self.in_string = true,
                    b'{' => self.depth += 1,
                    // A `}` closing nothing is stray framing.
                    _ if self.depth == 0 => {}
                    _ => {
                        self.depth -= 1;
                        if self.depth == 0 {
                            return Some(self.split_element());
                        }
                    }
                }
            }
        }
        None
    }

    /// Hands out the scanned bytes as an element; the scan goes on after
    /// them, outside any object and string.
    fn split_element(&mut self) -> Bytes {
        let element = self.buf.split_to(self.scanned).freeze();
        self.scanned = 0;
        element
    }

    /// At the end of the stream: whatever is still buffered, the closing
    /// `]` of a whole stream or the partial element of a cut one. The
    /// splitter starts afresh after it.
    pub fn take_rest(&mut self) -> Bytes {
        self.scanned = 0;
        self.depth = 0;
        self.in_string = false;
        self.escaped = false;
        self.buf.split().freeze()
    }

    /// Bytes buffered and not yet handed out.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }
}

/// The element's JSON object within a raw piece from
/// [`JsonArraySplitter::next_element`]: the framing before it (a byte-order
/// mark, `[`, `,`, whitespace) trimmed off.
pub fn element_json(raw: &[u8]) -> &[u8] {
    let raw = raw.strip_prefix(UTF8_BOM).unwrap_or(raw);
    let start = raw
        .iter()
        .position(|b| !matches!(b, b'[' | b',' | b' ' | b'\t' | b'\n' | b'\r'))
        .unwrap_or(raw.len());
    raw.get(start..).unwrap_or_default()
}

/// A byte-order mark some servers put before a JSON body.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

#[cfg(test)]
mod tests;
