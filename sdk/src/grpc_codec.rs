//! The gRPC codec of `arena.v1.AgentGateway/Session`: the same protobuf bytes as tonic's own
//! codec, written and read through contiguous buffers.
//!
//! prost writes a packed `repeated float` one value at a time. Into tonic's frame buffer each
//! value is a call through `BufMut` with its own bookkeeping, and reading one back from tonic's
//! `DecodeBuf` is a call plus an `advance`; a GetAction carries about 150 KB of floats (8
//! episodes of g1-moves-dance), so these calls cost the gRPC path about 3 s of CPU per benchmark
//! run (1.4 s server, 1.7 s client) that WebSocket does not pay (`remote_vs_local` under `perf`).
//! Here a message is encoded into a reused `Vec` and copied into the frame once, and decoded
//! from the frame's contiguous bytes as a slice.

use crate::protocol::{Envelope, MAX_OPENING_MESSAGE_BYTES};
use prost::Message as _;
use prost::bytes::{Buf, BufMut};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// Envelopes in both directions (the generated client and server use it: `codec_path` in
/// build.rs).
#[derive(Debug, Default, Clone, Copy)]
pub struct EnvelopeCodec;

impl Codec for EnvelopeCodec {
    type Encode = Envelope;
    type Decode = Envelope;
    type Encoder = EnvelopeEncoder;
    type Decoder = EnvelopeDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        EnvelopeEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        EnvelopeDecoder::default()
    }
}

/// Encodes into a scratch buffer kept for the stream's life.
#[derive(Debug, Default)]
pub struct EnvelopeEncoder {
    scratch: Vec<u8>,
}

impl Encoder for EnvelopeEncoder {
    type Item = Envelope;
    type Error = Status;

    fn encode(&mut self, item: Envelope, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        self.scratch.clear();
        // A Vec grows as needed, so encoding cannot run out of space.
        item.encode(&mut self.scratch)
            .map_err(|e| Status::internal(format!("encoding an Envelope: {e}")))?;
        dst.put_slice(&self.scratch);
        Ok(())
    }
}

/// Decodes a stream's messages. A stream is one session, so its first message is the session's
/// opening (a `connect` to the server, a `connected` or refusal to the client): one over
/// [`MAX_OPENING_MESSAGE_BYTES`] is refused before it is decoded.
#[derive(Debug, Default)]
pub struct EnvelopeDecoder {
    opened: bool,
}

impl Decoder for EnvelopeDecoder {
    type Item = Envelope;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Envelope>, Status> {
        let len = src.remaining();
        if !std::mem::replace(&mut self.opened, true) && len > MAX_OPENING_MESSAGE_BYTES {
            return Err(Status::out_of_range(format!(
                "the session's first message is {len} bytes, over the limit of {MAX_OPENING_MESSAGE_BYTES} for a connect"
            )));
        }
        let decoded = if src.chunk().len() == len {
            // tonic hands over one message in one contiguous buffer.
            check_entries(src.chunk())?;
            Envelope::decode(src.chunk())
        } else {
            let bytes = src.copy_to_bytes(len);
            check_entries(&bytes)?;
            Envelope::decode(&bytes[..])
        };
        // An undecodable message is INTERNAL, as with tonic's codec (gRPC's status code rules);
        // the gateway answers it with `malformed_message`.
        let envelope = decoded.map_err(|e| Status::internal(e.to_string()))?;
        if src.remaining() > 0 {
            src.advance(src.remaining());
        }
        Ok(Some(envelope))
    }
}

/// A message with a list over [`crate::protocol::MAX_BATCH`] entries, refused before it is
/// decoded: the gateway ends the session with the reason, since the stream is not read further.
fn check_entries(bytes: &[u8]) -> Result<(), Status> {
    crate::protocol::check_entries(bytes).map_err(|e| Status::invalid_argument(e.message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Action, Connect, EpisodeAction, EpisodeObservation, GetAction, Msg};

    /// Frames `msg` with tonic's encoder path, reads it back with tonic's decoder path, both
    /// through this codec, and compares the bytes with prost's own encoding.
    #[tokio::test]
    async fn round_trips_the_bytes_tonic_would_send() {
        use futures_util::StreamExt;
        use http_body_util::BodyExt;
        let msg = Msg::GetAction(GetAction {
            step: 7,
            observations: (0..8)
                .map(|e| EpisodeObservation {
                    episode_id: e,
                    episode_step: 3 * e,
                    values: (0..4216).map(|i| (i as f32 * 0.37 + e as f32).sin()).collect(),
                })
                .collect(),
        });
        let envelope = Envelope { msg: Some(msg) };
        let stream = futures_util::stream::iter(vec![Ok::<_, Status>(envelope.clone()); 3]);
        let body = tonic::codec::EncodeBody::new_server(
            EnvelopeCodec.encoder(),
            stream,
            None,
            Default::default(),
            Some(usize::MAX),
        );
        let bytes = body.collect().await.unwrap().to_bytes();
        // Each frame: compression flag, length (big endian), then prost's own bytes.
        let expected = envelope.encode_to_vec();
        assert_eq!(bytes.len(), 3 * (5 + expected.len()));
        assert_eq!(&bytes[5..5 + expected.len()], &expected[..]);
        let body = http_body_util::Full::new(bytes);
        let mut decoded = tonic::codec::Streaming::new_request(EnvelopeCodec.decoder(), body, None, None);
        for _ in 0..3 {
            assert_eq!(decoded.next().await.unwrap().unwrap(), envelope);
        }
        assert!(decoded.next().await.is_none());
    }

    /// A first message over the opening limit is refused undecoded; later ones may be larger.
    #[tokio::test]
    async fn the_first_message_is_held_to_the_opening_limit() {
        use futures_util::StreamExt;
        let frame = |envelope: &Envelope| {
            let bytes = envelope.encode_to_vec();
            let mut framed = vec![0];
            framed.extend((bytes.len() as u32).to_be_bytes());
            framed.extend(bytes);
            framed
        };
        let big = Envelope {
            msg: Some(Msg::GetAction(GetAction {
                step: 1,
                observations: vec![EpisodeObservation {
                    episode_id: 0,
                    episode_step: 0,
                    values: vec![0.5; MAX_OPENING_MESSAGE_BYTES / 4 + 1],
                }],
            })),
        };
        let small = Envelope {
            msg: Some(Msg::GetAction(GetAction::default())),
        };
        let read = |frames: Vec<u8>| {
            let body = http_body_util::Full::new(prost::bytes::Bytes::from(frames));
            tonic::codec::Streaming::new_request(EnvelopeCodec.decoder(), body, None, Some(64 << 20))
        };
        let mut first_big = read(frame(&big));
        let status = first_big.next().await.unwrap().unwrap_err();
        assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
        assert!(status.message().contains("first message"), "{status:?}");
        let mut big_later = read([frame(&small), frame(&big)].concat());
        assert_eq!(big_later.next().await.unwrap().unwrap(), small);
        assert_eq!(big_later.next().await.unwrap().unwrap(), big);
    }

    /// An action of more entries than a batch holds is refused before it is decoded.
    #[tokio::test]
    async fn an_action_over_a_batch_is_refused() {
        use futures_util::StreamExt;
        let action = |entries: usize| {
            let bytes = Envelope {
                msg: Some(Msg::Action(Action {
                    step: 1,
                    actions: vec![EpisodeAction::default(); entries],
                })),
            }
            .encode_to_vec();
            let mut framed = vec![0];
            framed.extend((bytes.len() as u32).to_be_bytes());
            framed.extend(bytes);
            framed
        };
        let connect = Envelope {
            msg: Some(Msg::Connect(Connect::default())),
        };
        let mut opening = vec![0];
        opening.extend((connect.encoded_len() as u32).to_be_bytes());
        opening.extend(connect.encode_to_vec());
        let frames = [
            opening,
            action(crate::protocol::MAX_BATCH),
            action(crate::protocol::MAX_BATCH + 1),
        ]
        .concat();
        let body = http_body_util::Full::new(prost::bytes::Bytes::from(frames));
        let mut decoded = tonic::codec::Streaming::new_request(EnvelopeCodec.decoder(), body, None, None);
        assert_eq!(decoded.next().await.unwrap().unwrap(), connect);
        let Some(Msg::Action(full)) = decoded.next().await.unwrap().unwrap().msg else {
            panic!()
        };
        assert_eq!(full.actions.len(), crate::protocol::MAX_BATCH);
        let status = decoded.next().await.unwrap().unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains("4097 entries"), "{status:?}");
    }

    #[tokio::test]
    async fn an_undecodable_message_is_internal() {
        use futures_util::StreamExt;
        // One frame: uncompressed, 3 bytes: field 5 (GetAction) claims 100 bytes it lacks.
        let frame = prost::bytes::Bytes::from_static(&[0, 0, 0, 0, 3, 0x2a, 100, 1]);
        let body = http_body_util::Full::new(frame);
        let mut decoded = tonic::codec::Streaming::new_request(EnvelopeCodec.decoder(), body, None, None);
        let status = decoded.next().await.unwrap().unwrap_err();
        assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    }
}
