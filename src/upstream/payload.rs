//! The body of a request to a provider, in parts: the client's own bytes
//! where the gateway changed nothing (slices of the buffer the request
//! arrived in, never copied) and the few bytes it wrote between them. A
//! long conversation with an output limit added is sent as the client's
//! bytes around that one member, not a copy of the whole body.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};

/// A request body sent as its parts in order, each a frame.
#[derive(Clone, Debug, Default)]
pub struct Payload {
    parts: VecDeque<Bytes>,
    /// The bytes not yet sent, for the `Content-Length` hyper writes.
    remaining: u64,
}

impl Payload {
    /// The body made of `parts` in order; empty parts are left out.
    pub fn from_parts(parts: impl IntoIterator<Item = Bytes>) -> Payload {
        let parts: VecDeque<Bytes> = parts.into_iter().filter(|part| !part.is_empty()).collect();
        let remaining = parts.iter().map(|part| part.len() as u64).sum();
        Payload { parts, remaining }
    }

    /// Its parts, in order.
    #[cfg(test)]
    pub(crate) fn parts(&self) -> impl Iterator<Item = &Bytes> {
        self.parts.iter()
    }

    /// The whole body in one buffer: the part itself when there is one,
    /// a copy of them all otherwise (for a provider whose request is
    /// signed or rewritten whole).
    pub fn to_bytes(&self) -> Bytes {
        match self.parts.len() {
            0 => Bytes::new(),
            1 => self.parts[0].clone(),
            _ => {
                let mut whole = BytesMut::with_capacity(self.remaining as usize);
                self.parts
                    .iter()
                    .for_each(|part| whole.extend_from_slice(part));
                whole.freeze()
            }
        }
    }
}

impl From<Bytes> for Payload {
    fn from(bytes: Bytes) -> Payload {
        Payload::from_parts([bytes])
    }
}

impl From<Vec<u8>> for Payload {
    fn from(bytes: Vec<u8>) -> Payload {
        Payload::from(Bytes::from(bytes))
    }
}

impl From<String> for Payload {
    fn from(text: String) -> Payload {
        Payload::from(Bytes::from(text))
    }
}

impl Body for Payload {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let next = self.parts.pop_front();
        if let Some(part) = &next {
            self.remaining -= part.len() as u64;
        }
        Poll::Ready(next.map(|part| Ok(Frame::data(part))))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn sends_its_parts_in_order_with_their_exact_length() {
        let whole = Bytes::from_static(b"{\"messages\":[],\"max_tokens\":5}");
        let payload = Payload::from_parts([
            whole.slice(..15),
            Bytes::new(),
            Bytes::from_static(b"\"max_tokens\":5"),
            whole.slice(29..),
        ]);
        assert_eq!(payload.size_hint().exact(), Some(whole.len() as u64));
        assert_eq!(payload.to_bytes(), whole);
        let sent = payload.collect().await.unwrap().to_bytes();
        assert_eq!(sent, whole);
        let empty = Payload::from(Bytes::new());
        assert!(empty.is_end_stream());
        assert_eq!(empty.size_hint().exact(), Some(0));
    }
}
