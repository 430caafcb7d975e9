//! The opening limit of a gRPC session, checked from the wire.
//!
//! A session's first message is its `connect`, read before its token is checked. tonic buffers
//! a message whole (up to the 16 MiB frame limit) before its codec sees it, so a codec's check
//! of the opening limit ([`protocol::MAX_OPENING_MESSAGE_BYTES`]) came after an unauthenticated
//! client had made the server hold 16 MiB per stream, 32 streams per connection. Here the
//! request body is read through [`OpeningLimit`], which looks at the first message's 5-byte
//! gRPC prefix (a compression flag, then the length as a big-endian u32) as it passes and fails
//! the body when the length is over the limit, before the message's bytes are asked for.

use arena_sdk::protocol;
use hyper::body::{Body, Bytes, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

/// The length of gRPC's message prefix: one flag byte, then four of length.
const PREFIX_BYTES: usize = 5;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request body whose first gRPC message may announce at most
/// [`protocol::MAX_OPENING_MESSAGE_BYTES`]; passes everything through unchanged.
pub struct OpeningLimit<B> {
    inner: B,
    prefix: [u8; PREFIX_BYTES],
    /// Bytes of the first message's prefix seen so far; `None` once it has been checked.
    seen: Option<usize>,
}

impl<B> OpeningLimit<B> {
    pub fn new(inner: B) -> Self {
        OpeningLimit {
            inner,
            prefix: [0; PREFIX_BYTES],
            seen: Some(0),
        }
    }

    /// Takes the prefix bytes `data` carries; the refusal once the prefix is whole and
    /// announces too much.
    fn check(&mut self, data: &[u8]) -> Result<(), tonic::Status> {
        let Some(seen) = self.seen else { return Ok(()) };
        let take = (PREFIX_BYTES - seen).min(data.len());
        self.prefix[seen..seen + take].copy_from_slice(&data[..take]);
        let seen = seen + take;
        if seen < PREFIX_BYTES {
            self.seen = Some(seen);
            return Ok(());
        }
        self.seen = None;
        let [_, length @ ..] = self.prefix;
        let len = u32::from_be_bytes(length) as usize;
        if len > protocol::MAX_OPENING_MESSAGE_BYTES {
            // The same words as the codec's check, which stays for a client's first reply.
            return Err(tonic::Status::out_of_range(format!(
                "the session's first message is {len} bytes, over the limit of {} for a connect",
                protocol::MAX_OPENING_MESSAGE_BYTES
            )));
        }
        Ok(())
    }
}

impl<B> Body for OpeningLimit<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let frame = match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            Some(Err(e)) => return Poll::Ready(Some(Err(e.into()))),
            None => return Poll::Ready(None),
        };
        if let Some(data) = frame.data_ref()
            && let Err(refused) = this.check(data)
        {
            // tonic keeps a `Status` body error as it is: the gateway answers it as an
            // oversized message (`grpc::from_stream_error`).
            return Poll::Ready(Some(Err(Box::new(refused))));
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    /// Reads `chunks` through the limit: the bytes that passed, or the refusal's message.
    async fn read(chunks: Vec<Vec<u8>>) -> Result<Vec<u8>, String> {
        let frames = chunks
            .into_iter()
            .map(|c| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(c))));
        let mut body = OpeningLimit::new(StreamBody::new(futures_util::stream::iter(frames)));
        let mut passed = Vec::new();
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => passed.extend_from_slice(f.data_ref().unwrap()),
                Err(e) => return Err(e.downcast::<tonic::Status>().unwrap().message().to_string()),
            }
        }
        Ok(passed)
    }

    fn prefix(len: u32) -> Vec<u8> {
        let mut p = vec![0u8];
        p.extend_from_slice(&len.to_be_bytes());
        p
    }

    #[tokio::test]
    async fn a_first_message_announced_over_the_limit_is_refused_from_its_prefix() {
        let limit = protocol::MAX_OPENING_MESSAGE_BYTES as u32;
        // The prefix alone, split across frames as HTTP/2 may deliver it: refused before any
        // of the message's bytes arrive.
        let p = prefix(limit + 1);
        let refused = read(vec![p[..2].to_vec(), p[2..].to_vec(), vec![7; 100]])
            .await
            .unwrap_err();
        assert!(refused.contains(&format!("{} bytes", limit + 1)), "{refused}");
        assert!(refused.contains("262144"), "{refused}");
        // At the limit, everything passes unchanged, and later messages of any size too.
        let mut stream = prefix(limit);
        stream.extend(vec![1u8; limit as usize]);
        stream.extend(prefix(16 << 20));
        stream.extend(vec![2u8; 1000]);
        let chunks: Vec<Vec<u8>> = stream.chunks(3000).map(<[u8]>::to_vec).collect();
        assert_eq!(read(chunks).await.unwrap(), stream);
        // A body that ends inside the prefix is passed on as it is (tonic says it is cut short).
        assert_eq!(read(vec![vec![0, 0]]).await.unwrap(), vec![0, 0]);
    }
}
