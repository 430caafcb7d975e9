//! The opening limit of a WebSocket session, checked from the wire.
//!
//! A session's first message is its `connect`, read before its token is checked. tungstenite
//! measures a message against the one limit it is given (16 MiB, for the batches that follow)
//! and only once the message has arrived whole, so an unauthenticated client could make the
//! server hold 16 MiB per connection. [`OpeningLimit`] reads the upgraded connection's bytes as
//! they pass to tungstenite, follows the frame headers (RFC 6455 §5.2) until the first data
//! message is complete, and fails the read as soon as the lengths its frames announce add up to
//! more than [`protocol::MAX_OPENING_MESSAGE_BYTES`], before their payload is asked for.
//! Control frames (pings) before it are passed over; after it, nothing is looked at.

use arena_sdk::protocol;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most a control frame (ping, pong, close) may carry, and it must not be fragmented
/// (RFC 6455 §5.5). tungstenite checks this only once it has read the payload.
const MAX_CONTROL_PAYLOAD: u64 = 125;

/// What the opening limit refused. Set once; the session reads it to say why it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverOpening {
    /// The first message's frames announced `announced` bytes so far, its last frame among
    /// them when `whole`.
    Message { announced: u64, whole: bool },
    /// A control frame before it announced `announced` bytes, or came fragmented.
    Control { announced: u64 },
}

impl OverOpening {
    /// The session's answer (for a message, the same as for one measured whole).
    pub fn message(&self) -> String {
        match *self {
            OverOpening::Message { announced, whole } => {
                let size = match whole {
                    true => format!("{announced} bytes"),
                    false => format!("at least {announced} bytes (its first frames announce that much)"),
                };
                format!(
                    "the session's first message is {size}, over the limit of {} for a connect",
                    protocol::MAX_OPENING_MESSAGE_BYTES
                )
            }
            OverOpening::Control { announced } => format!(
                "a control frame of {announced} bytes before the session's connect: control frames carry at most \
                 {MAX_CONTROL_PAYLOAD} bytes, unfragmented (RFC 6455 §5.5)"
            ),
        }
    }
}

/// Where the reader is in the frames before the first data message has ended.
#[derive(Debug, Default)]
struct FrameReader {
    /// The current frame's header bytes (at most 14: 2, 8 of extended length, 4 of mask).
    header: [u8; 14],
    have: usize,
    /// Payload bytes of the current frame still to pass over.
    payload_left: u64,
    /// Bytes the first data message's frames have announced.
    announced: u64,
}

enum Read {
    /// More frames of the opening to follow.
    Going,
    /// The first data message has ended within the limit: nothing more to look at.
    Opened,
    Refused(OverOpening),
}

impl FrameReader {
    /// The header's length so far known: 2, then the extended length and mask it declares.
    fn header_len(&self) -> usize {
        if self.have < 2 {
            return 2;
        }
        let extended = match self.header[1] & 0x7f {
            126 => 2,
            127 => 8,
            _ => 0,
        };
        let mask = if self.header[1] & 0x80 != 0 { 4 } else { 0 };
        2 + extended + mask
    }

    fn read(&mut self, mut bytes: &[u8]) -> Read {
        while !bytes.is_empty() {
            if self.payload_left > 0 {
                let skip = self.payload_left.min(bytes.len() as u64);
                self.payload_left -= skip;
                bytes = &bytes[skip as usize..];
                continue;
            }
            let need = self.header_len();
            let take = (need - self.have).min(bytes.len());
            self.header[self.have..self.have + take].copy_from_slice(&bytes[..take]);
            self.have += take;
            bytes = &bytes[take..];
            if self.have < need || need != self.header_len() {
                // Not whole yet, or its first two bytes just said how long it is.
                continue;
            }
            let length = match self.header[1] & 0x7f {
                126 => u64::from(u16::from_be_bytes([self.header[2], self.header[3]])),
                127 => u64::from_be_bytes(self.header[2..10].try_into().unwrap_or_default()),
                n => u64::from(n),
            };
            let (fin, opcode) = (self.header[0] & 0x80 != 0, self.header[0] & 0x0f);
            self.have = 0;
            self.payload_left = length;
            if opcode >= 8 {
                // A control frame (ping, pong, close) between or before the message's frames:
                // passed over, unless it is longer than any may be (tungstenite would read all
                // of it, up to the frame limit, before refusing it).
                if length > MAX_CONTROL_PAYLOAD || !fin {
                    return Read::Refused(OverOpening::Control { announced: length });
                }
                continue;
            }
            self.announced = self.announced.saturating_add(length);
            if self.announced > protocol::MAX_OPENING_MESSAGE_BYTES as u64 {
                return Read::Refused(OverOpening::Message {
                    announced: self.announced,
                    whole: fin,
                });
            }
            if fin {
                return Read::Opened;
            }
        }
        Read::Going
    }
}

/// A connection's IO with the opening limit on its reads; writes pass straight through.
pub struct OpeningLimit<S> {
    inner: S,
    /// `None` once the first data message has ended within the limit.
    reader: Option<FrameReader>,
    refused: Arc<OnceLock<OverOpening>>,
}

impl<S> OpeningLimit<S> {
    /// The wrapped IO, and where a refusal is told.
    pub fn new(inner: S) -> (Self, Arc<OnceLock<OverOpening>>) {
        let refused = Arc::new(OnceLock::new());
        let io = OpeningLimit {
            inner,
            reader: Some(FrameReader::default()),
            refused: refused.clone(),
        };
        (io, refused)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for OpeningLimit<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(over) = this.refused.get() {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, over.message())));
        }
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        if let Some(reader) = &mut this.reader {
            match reader.read(&buf.filled()[before..]) {
                Read::Going => {}
                Read::Opened => this.reader = None,
                Read::Refused(over) => {
                    // The bytes just read go nowhere: the session reads no more.
                    buf.set_filled(before);
                    let _ = this.refused.set(over);
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, over.message())));
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for OpeningLimit<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's frame header (masked, as a client's must be) for `len` payload bytes.
    fn header(fin: bool, opcode: u8, len: u64) -> Vec<u8> {
        let mut h = vec![if fin { 0x80 } else { 0 } | opcode];
        match len {
            0..=125 => h.push(0x80 | len as u8),
            126..=65535 => {
                h.push(0x80 | 126);
                h.extend((len as u16).to_be_bytes());
            }
            _ => {
                h.push(0x80 | 127);
                h.extend(len.to_be_bytes());
            }
        }
        h.extend([1, 2, 3, 4]);
        h
    }

    /// Feeds `stream` in pieces of `piece` bytes: where the reader stopped, and after how many
    /// bytes.
    fn feed(stream: &[u8], piece: usize) -> (Option<OverOpening>, bool, usize) {
        let mut reader = FrameReader::default();
        for (i, chunk) in stream.chunks(piece).enumerate() {
            match reader.read(chunk) {
                Read::Going => {}
                Read::Opened => return (None, true, (i + 1) * piece),
                Read::Refused(over) => return (Some(over), false, (i + 1) * piece),
            }
        }
        (None, false, stream.len())
    }

    #[test]
    fn the_first_message_is_measured_from_its_frame_headers() {
        let limit = protocol::MAX_OPENING_MESSAGE_BYTES as u64;
        for piece in [1, 3, 4096] {
            // One frame announcing 8 MiB: refused from its 14 header bytes alone.
            let over = header(true, 2, 8 << 20);
            let (refused, _, at) = feed(&over, piece);
            assert_eq!(
                refused,
                Some(OverOpening::Message {
                    announced: 8 << 20,
                    whole: true
                }),
                "{piece}"
            );
            assert!(at < 14 + piece, "{piece}: {at}");
            // A ping announcing 16 MiB, or a fragmented one: refused from its header too.
            let (refused, _, at) = feed(&header(true, 9, 16 << 20), piece);
            assert_eq!(refused, Some(OverOpening::Control { announced: 16 << 20 }), "{piece}");
            assert!(at < 14 + piece, "{piece}: {at}");
            assert!(matches!(
                feed(&header(false, 9, 4), piece).0,
                Some(OverOpening::Control { .. })
            ));
            // A ping, then a message at the limit in two fragments: passed, and done.
            let mut ok = header(true, 9, 4);
            ok.extend([0; 4]);
            ok.extend(header(false, 1, 100));
            ok.extend(vec![b'x'; 100]);
            ok.extend(header(true, 0, limit - 100));
            ok.extend(vec![b'x'; (limit - 100) as usize]);
            let (refused, opened, _) = feed(&ok, piece);
            assert!(refused.is_none() && opened, "{piece}: {refused:?}");
            // Fragments that together pass the limit: refused at the one that does.
            let mut split = header(false, 2, limit);
            split.extend(vec![0; limit as usize]);
            split.extend(header(false, 0, 1));
            let (refused, _, _) = feed(&split, piece);
            let refused = refused.expect("the fragments over the limit passed");
            assert_eq!(
                refused,
                OverOpening::Message {
                    announced: limit + 1,
                    whole: false
                }
            );
            assert!(
                refused.message().contains("at least 262145 bytes"),
                "{}",
                refused.message()
            );
        }
        // A message of 126 bytes (a 2-byte extended length) within the limit.
        let mut small = header(true, 1, 126);
        small.extend(vec![b'{'; 126]);
        assert_eq!(feed(&small, 5).0, None);
    }
}
