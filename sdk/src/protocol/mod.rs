//! Protocol v1: the generated message types of `proto/arena.proto` and their two encodings.
//! Binary frames carry the protobuf encoding of [`Envelope`]; text frames carry JSON, the
//! message's fields plus `"type"` (the `Envelope.msg` field name).

#[allow(clippy::all, missing_docs)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/arena.v1.rs"));
}

mod bounds;

pub use bounds::{check_entries, entries_from_json, metrics_from_json};
pub use generated::envelope::Msg;
pub use generated::*;
use prost::Message as _;

/// The protocol version this SDK speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// The largest message the server accepts, and the most it sends in one (docs/protocol.md §1).
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// The largest first message of a session, in either direction: a client's `connect`, a
/// server's `connected` (or the `error` refusing it), a few kilobytes in practice
/// (docs/protocol.md §1). Checked before the frame is decoded, since the token it carries is
/// not checked yet: decoding a 16 MiB frame of small repeated entries took 16 times its size.
pub const MAX_OPENING_MESSAGE_BYTES: usize = 256 << 10;

/// The most episodes one batch holds on any server (its `max_batch` is 1 to this), so the most
/// entries of any list in a message: an `action`'s or a `get_action`'s episodes, an
/// `episode_start`'s, a spec's observation groups, an `episode_end`'s metrics (docs/protocol.md
/// §12). Both decoders refuse a message with more before building it ([`bounds`]).
pub const MAX_BATCH: usize = 4096;

/// Practice episodes a session may have asked for that have not started yet (docs/protocol.md
/// §10): the server refuses a `reset_episode` beyond it, and the SDKs ask for more as episodes
/// start.
pub const PRACTICE_WAITING: usize = 1024;

/// The `disconnect` reason of a session the server ends because it is stopping (SIGINT,
/// SIGTERM): clients wait for it to come back (docs/protocol.md §3, §9).
pub const SHUTDOWN: &str = "shutdown";

/// The start of a client's `disconnect` reason when its agent cannot serve the session's spec
/// (`"agent_cannot_serve: " + why`): the server ends a submission that has finished no episode
/// as FAILED with that reason, rather than leave it RUNNING for a day (docs/protocol.md §3).
pub const AGENT_CANNOT_SERVE: &str = "agent_cannot_serve";

/// The gRPC response metadata key of a connection refused at the server's connection caps
/// (docs/protocol.md §1): its status is UNAVAILABLE, and the SDKs retry it like the 503 a
/// WebSocket client reads.
pub const REFUSAL_METADATA: &str = "arena-refusal";

/// Stable error codes of `Error.code`.
pub mod codes {
    /// A frame that is not valid JSON / protobuf, or not an object with a "type".
    pub const MALFORMED_MESSAGE: &str = "malformed_message";
    /// A "type" (or a protobuf oneof field) the receiver does not know.
    pub const UNKNOWN_MESSAGE: &str = "unknown_message";
    /// A known message with fields of the wrong type or value.
    pub const INVALID_MESSAGE: &str = "invalid_message";
    /// A message that is not allowed at this point of the session.
    pub const UNEXPECTED_MESSAGE: &str = "unexpected_message";
    pub const UNSUPPORTED_VERSION: &str = "unsupported_version";
    pub const UNAUTHORIZED: &str = "unauthorized";
    pub const UNKNOWN_BENCHMARK: &str = "unknown_benchmark";
    /// The benchmark exists but cannot be loaded on the server (e.g. its motion files are
    /// missing there): the organisers must fix the server, so reconnecting cannot help.
    pub const BENCHMARK_UNAVAILABLE: &str = "benchmark_unavailable";
    /// A resumed submission's benchmark changed since it started (another version, or other
    /// episodes): its remaining episodes cannot run as they were defined.
    pub const BENCHMARK_CHANGED: &str = "benchmark_changed";
    /// Joint-position benchmarks: the gains declared in Connect are not allowed (the message
    /// names the joint and the rule).
    pub const INVALID_GAINS: &str = "invalid_gains";
    pub const UNKNOWN_SUBMISSION: &str = "unknown_submission";
    /// `connect.phase` names no phase.
    pub const UNKNOWN_PHASE: &str = "unknown_phase";
    /// The phase is not open now (not started yet, or ended); the message says when.
    pub const PHASE_CLOSED: &str = "phase_closed";
    /// The team may not run this (e.g. a phase's benchmark without the phase, or practice in a
    /// private phase).
    pub const FORBIDDEN: &str = "forbidden";
    /// A submission quota of the phase is used up; `limit` and `resets_at` say which and until when.
    pub const QUOTA_EXCEEDED: &str = "quota_exceeded";
    /// Too many requests (REST calls and Connects) from the team this minute; retry after
    /// `Error.resets_at`.
    pub const RATE_LIMITED: &str = "rate_limited";
    /// The submission already has a connected session.
    pub const SUBMISSION_BUSY: &str = "submission_busy";
    /// The submission has no episodes left to run.
    pub const SUBMISSION_FINISHED: &str = "submission_finished";
    pub const UNKNOWN_MOTION: &str = "unknown_motion";
    /// An Action whose step is not outstanding (answered already, or timed out).
    pub const STALE_STEP: &str = "stale_step";
    /// An action batch entry that cannot be applied (wrong size, unknown episode).
    pub const INVALID_ACTION: &str = "invalid_action";
    pub const INTERNAL: &str = "internal";
}

impl Error {
    /// An Error with a code of [`codes`] and a message for people (at most
    /// [`MAX_ERROR_MESSAGE_CHARS`], [`clip_message`]).
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: clip_message(message.into()),
            ..Default::default()
        }
    }
}

/// The longest `Error.message` the server sends, in characters: a message quoting what a client
/// sent (a 16 MiB motion name) must not itself exceed a frame.
pub const MAX_ERROR_MESSAGE_CHARS: usize = 2000;

/// `message` cut to [`MAX_ERROR_MESSAGE_CHARS`], saying how long it was.
pub fn clip_message(message: String) -> String {
    let total = message.chars().count();
    if total <= MAX_ERROR_MESSAGE_CHARS {
        return message;
    }
    let kept: String = message.chars().take(MAX_ERROR_MESSAGE_CHARS - 40).collect();
    format!("{kept}… ({total} characters in all)")
}

/// Text a peer wrote, made fit to store, show on a page, print on a terminal and log: the
/// characters that are not printable (controls such as line breaks and ESC, and format
/// characters such as bidi overrides and zero-width spaces) written as escapes (`\n`,
/// `\u{202e}`), the rest as it is, and cut at `limit` characters saying how long it was.
pub fn tamed(text: &str, limit: usize) -> String {
    let total = text.chars().count();
    let mut out = String::with_capacity(text.len().min(limit.saturating_mul(4)));
    for c in text.chars().take(limit) {
        if c.is_control() {
            // `\n`, `\t`, `\u{1b}`.
            out.extend(c.escape_debug());
        } else if is_format(c) {
            out.extend(c.escape_unicode());
        } else {
            // Everything else as it is: combining marks, variation selectors and the joiners
            // that scripts and emoji are written with.
            out.push(c);
        }
    }
    if total > limit {
        out.push_str(&format!("… ({total} characters)"));
    }
    out
}

/// The characters that turn or hide text: bidi marks, embeddings, overrides and isolates, the
/// zero-width space, the word joiner and invisible operators, the byte-order mark, the soft
/// hyphen, the line and paragraph separators and the tag characters (the zero-width joiner and
/// non-joiner, which scripts and emoji need, are not among them).
fn is_format(c: char) -> bool {
    matches!(c,
        '\u{00ad}' | '\u{061c}' | '\u{180e}' | '\u{200b}' | '\u{200e}' | '\u{200f}' | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}'
        | '\u{e0001}' | '\u{e0020}'..='\u{e007f}')
}

/// What a client sent, quoted in a message: at most 100 characters of it (debug-escaped), and
/// how long it was when cut.
pub fn quoted(text: &str) -> String {
    const SHOWN: usize = 100;
    let total = text.chars().count();
    if total <= SHOWN {
        return format!("{text:?}");
    }
    let head: String = text.chars().take(SHOWN).collect();
    format!("{head:?}… ({total} characters)")
}

/// How a session's frames are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Text frames with JSON.
    Json,
    /// Binary frames with protobuf.
    Binary,
}

/// One encoded frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Text(String),
    Binary(Vec<u8>),
}

/// A frame that could not be decoded; `code` is one of [`codes`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct DecodeError {
    pub code: &'static str,
    pub message: String,
}

impl DecodeError {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// The Error message that reports this to the peer.
    pub fn to_msg(&self) -> Msg {
        Msg::Error(Error::new(self.code, self.message.clone()))
    }
}

/// Encodes a message in the given encoding.
pub fn encode(msg: &Msg, encoding: Encoding) -> Frame {
    match encoding {
        Encoding::Json => Frame::Text(serde_json::to_string(msg).expect("protocol messages serialise to JSON")),
        Encoding::Binary => Frame::Binary(encode_binary(msg)),
    }
}

/// The protobuf bytes of `Envelope { msg: Some(msg) }`, written without copying `msg` into an
/// Envelope: the oneof is the Envelope's only field, so its encoding is the Envelope's.
pub fn encode_binary(msg: &Msg) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(msg.encoded_len());
    msg.encode(&mut bytes);
    bytes
}

/// Names of the JSON "type" values, in `Envelope.msg` order.
pub const MESSAGE_TYPES: [&str; 10] = [
    "connect",
    "connected",
    "reset_episode",
    "episode_start",
    "get_action",
    "action",
    "episode_end",
    "heartbeat",
    "error",
    "disconnect",
];

/// Decodes a JSON text frame: its `"type"` first, then the message of that type straight from
/// the text. (Going through `serde_json::Value`, as an internally tagged enum does, held every
/// number of a frame as a 32-byte value: a 16 MiB frame of zeros took 256 MiB or more to
/// decode, before any token was checked. Now an action's values take 4 bytes each.)
pub fn decode_json(text: &str) -> Result<Msg, DecodeError> {
    let tagged: Tagged = serde_json::from_str(text).map_err(|e| match e.classify() {
        serde_json::error::Category::Data if !text.trim_start().starts_with('{') => {
            DecodeError::new(codes::MALFORMED_MESSAGE, "a message must be a JSON object")
        }
        _ => DecodeError::new(codes::MALFORMED_MESSAGE, format!("not valid JSON: {e}")),
    })?;
    let kind = match tagged.kind {
        None => {
            return Err(DecodeError::new(
                codes::MALFORMED_MESSAGE,
                "a message needs a \"type\" key",
            ));
        }
        Some(TypeField::Other) => {
            return Err(DecodeError::new(codes::MALFORMED_MESSAGE, "\"type\" must be a string"));
        }
        Some(TypeField::Str(kind)) => kind,
    };
    fn body<T: serde::de::DeserializeOwned>(text: &str, kind: &str) -> Result<T, DecodeError> {
        serde_json::from_str(text).map_err(|e| DecodeError::new(codes::INVALID_MESSAGE, format!("{kind}: {e}")))
    }
    // In `MESSAGE_TYPES` order; the `"type"` key is not a field of any message, so each reads
    // past it.
    Ok(match kind.as_str() {
        "connect" => Msg::Connect(body(text, &kind)?),
        "connected" => Msg::Connected(body(text, &kind)?),
        "reset_episode" => Msg::ResetEpisode(body(text, &kind)?),
        "episode_start" => Msg::EpisodeStart(body(text, &kind)?),
        "get_action" => Msg::GetAction(body(text, &kind)?),
        "action" => Msg::Action(body(text, &kind)?),
        "episode_end" => Msg::EpisodeEnd(body(text, &kind)?),
        "heartbeat" => Msg::Heartbeat(body(text, &kind)?),
        "error" => Msg::Error(body(text, &kind)?),
        "disconnect" => Msg::Disconnect(body(text, &kind)?),
        _ => {
            return Err(DecodeError::new(
                codes::UNKNOWN_MESSAGE,
                format!(
                    "unknown message type {} (known: {})",
                    quoted(&kind),
                    MESSAGE_TYPES.join(", ")
                ),
            ));
        }
    })
}

/// A JSON message's `"type"`, every other key skipped unread.
#[derive(serde::Deserialize)]
struct Tagged {
    #[serde(rename = "type")]
    kind: Option<TypeField>,
}

/// The value of `"type"`: a string, or anything else (skipped, not built).
enum TypeField {
    Str(String),
    Other,
}

impl<'de> serde::Deserialize<'de> for TypeField {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = TypeField;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<TypeField, E> {
                Ok(TypeField::Str(v.to_string()))
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<TypeField, E> {
                Ok(TypeField::Other)
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<TypeField, E> {
                Ok(TypeField::Other)
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<TypeField, E> {
                Ok(TypeField::Other)
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<TypeField, E> {
                Ok(TypeField::Other)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<TypeField, E> {
                Ok(TypeField::Other)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<TypeField, A::Error> {
                serde::de::IgnoredAny.visit_seq(seq).map(|_| TypeField::Other)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<TypeField, A::Error> {
                serde::de::IgnoredAny.visit_map(map).map(|_| TypeField::Other)
            }
        }
        d.deserialize_any(Visit)
    }
}

/// Decodes a binary (protobuf) frame.
pub fn decode_binary(bytes: &[u8]) -> Result<Msg, DecodeError> {
    check_entries(bytes)?;
    let envelope = Envelope::decode(bytes)
        .map_err(|e| DecodeError::new(codes::MALFORMED_MESSAGE, format!("not a valid protobuf Envelope: {e}")))?;
    envelope.msg.ok_or_else(|| {
        DecodeError::new(
            codes::UNKNOWN_MESSAGE,
            "Envelope carries no message this protocol version knows",
        )
    })
}

/// Decodes a frame of either encoding.
pub fn decode(frame: &Frame) -> Result<Msg, DecodeError> {
    match frame {
        Frame::Text(t) => decode_json(t),
        Frame::Binary(b) => decode_binary(b),
    }
}

/// The JSON "type" of a message.
pub fn type_name(msg: &Msg) -> &'static str {
    let index = match msg {
        Msg::Connect(_) => 0,
        Msg::Connected(_) => 1,
        Msg::ResetEpisode(_) => 2,
        Msg::EpisodeStart(_) => 3,
        Msg::GetAction(_) => 4,
        Msg::Action(_) => 5,
        Msg::EpisodeEnd(_) => 6,
        Msg::Heartbeat(_) => 7,
        Msg::Error(_) => 8,
        Msg::Disconnect(_) => 9,
    };
    MESSAGE_TYPES[index]
}

#[cfg(test)]
mod tests {
    #[test]
    fn tamed_text_shows_what_hides_or_moves_text() {
        use super::tamed;
        assert_eq!(
            tamed("plain \"words\" it's \\ é 日本", 100),
            "plain \"words\" it's \\ é 日本"
        );
        assert_eq!(tamed("a\nb\r\u{1b}[31m", 100), "a\\nb\\r\\u{1b}[31m");
        assert_eq!(
            tamed("x\u{202e}y\u{200b}z\u{feff}", 100),
            "x\\u{202e}y\\u{200b}z\\u{feff}"
        );
        // Scripts, combining marks, emoji sequences and non-breaking spaces print as they are.
        for kept in [
            "नमस्ते",
            "e\u{301}quipe",
            "👩\u{200d}🔬",
            "❤\u{fe0f}",
            "a\u{a0}b",
            "تیم\u{200c}ما",
        ] {
            assert_eq!(tamed(kept, 100), kept);
        }
        assert_eq!(tamed("a\u{2028}b", 100), "a\\u{2028}b");
        assert_eq!(tamed(&"B".repeat(12), 5), "BBBBB… (12 characters)");
        assert_eq!(tamed("", 5), "");
    }

    use super::*;

    fn sample() -> Vec<Msg> {
        vec![
            Msg::Connect(Connect {
                protocol_version: 1,
                agent_name: "a".into(),
                token: "t".into(),
                mode: "submission".into(),
                benchmark: "g1-smoke".into(),
                submission_id: String::new(),
                max_batch: 8,
                phase: "spring-val".into(),
                joint_stiffness: vec![40.0; 29],
                joint_damping: vec![2.5; 29],
                gain_preset: String::new(),
                reference_goal_once: true,
                connect_key: "3f2a9c0e6b8d4e1f".into(),
                previous_session_id: "ses-0123".into(),
            }),
            Msg::GetAction(GetAction {
                step: 7,
                observations: vec![EpisodeObservation {
                    episode_id: 3,
                    episode_step: 2,
                    values: vec![0.5, -1.25],
                }],
            }),
            Msg::EpisodeEnd(EpisodeEnd {
                episode_id: 3,
                status: "completed".into(),
                reason: String::new(),
                steps: 10,
                metrics: [("emd".to_string(), 1.5)].into_iter().collect(),
            }),
            Msg::Heartbeat(Heartbeat { time: 2.0 }),
        ]
    }

    #[test]
    fn both_encodings_round_trip() {
        for msg in sample() {
            for enc in [Encoding::Json, Encoding::Binary] {
                let frame = encode(&msg, enc);
                assert_eq!(decode(&frame).unwrap(), msg, "{enc:?}");
            }
        }
    }

    #[test]
    fn binary_frames_are_the_envelope_encoding() {
        for msg in sample() {
            let envelope = Envelope { msg: Some(msg.clone()) }.encode_to_vec();
            assert_eq!(encode_binary(&msg), envelope, "{msg:?}");
        }
    }

    #[test]
    fn json_uses_type_and_field_names() {
        let Frame::Text(t) = encode(&Msg::Heartbeat(Heartbeat { time: 2.0 }), Encoding::Json) else {
            panic!()
        };
        assert_eq!(t, r#"{"type":"heartbeat","time":2.0}"#);
        // Missing fields take their defaults.
        let m = decode_json(r#"{"type":"action","step":4}"#).unwrap();
        assert_eq!(
            m,
            Msg::Action(Action {
                step: 4,
                actions: vec![]
            })
        );
    }

    fn action_of(entries: usize) -> Msg {
        Msg::Action(Action {
            step: 1,
            actions: vec![EpisodeAction::default(); entries],
        })
    }

    /// Each message with a list, holding `entries` of them.
    fn lists_of(entries: usize) -> Vec<Msg> {
        vec![
            action_of(entries),
            Msg::GetAction(GetAction {
                step: 1,
                observations: vec![EpisodeObservation::default(); entries],
            }),
            Msg::EpisodeStart(EpisodeStart {
                episodes: vec![EpisodeInfo::default(); entries],
            }),
            Msg::Connected(Connected {
                spec: Some(EpisodeSpec {
                    observations: vec![ObservationGroup::default(); entries],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            Msg::EpisodeEnd(EpisodeEnd {
                metrics: (0..entries).map(|i| (format!("m{i}"), 0.5)).collect(),
                ..Default::default()
            }),
        ]
    }

    #[test]
    fn every_list_holds_at_most_a_batch_in_either_encoding() {
        for (full, over) in lists_of(MAX_BATCH).into_iter().zip(lists_of(MAX_BATCH + 1)) {
            let name = type_name(&full);
            for enc in [Encoding::Json, Encoding::Binary] {
                assert_eq!(decode(&encode(&full, enc)).unwrap(), full, "{name} {enc:?}");
                let e = decode(&encode(&over, enc)).unwrap_err();
                assert_eq!(e.code, codes::INVALID_MESSAGE, "{name} {enc:?}");
                assert!(
                    e.message.contains(&MAX_BATCH.to_string()),
                    "{name} {enc:?}: {}",
                    e.message
                );
            }
        }
        // Protobuf merges an embedded message sent in pieces: the pieces' entries add up.
        let half = encode_binary(&action_of(MAX_BATCH / 2 + 1));
        let pieces = [half.clone(), half].concat();
        let Msg::Action(merged) = Envelope::decode(&pieces[..]).unwrap().msg.unwrap() else {
            panic!()
        };
        assert_eq!(merged.actions.len(), MAX_BATCH + 2, "the decoder merges the pieces");
        assert_eq!(decode_binary(&pieces).unwrap_err().code, codes::INVALID_MESSAGE);
        // The same through a singular message on the way (a spec in pieces).
        let Msg::Connected(c) = &lists_of(MAX_BATCH / 2 + 1)[3] else {
            panic!()
        };
        let spec = c.spec.as_ref().unwrap().encode_to_vec();
        let mut connected = Vec::new();
        for _ in 0..2 {
            prost::encoding::bytes::encode(9, &spec, &mut connected);
        }
        let mut envelope = Vec::new();
        prost::encoding::bytes::encode(2, &connected, &mut envelope);
        let Msg::Connected(merged) = Envelope::decode(&envelope[..]).unwrap().msg.unwrap() else {
            panic!()
        };
        assert_eq!(merged.spec.unwrap().observations.len(), MAX_BATCH + 2);
        assert_eq!(decode_binary(&envelope).unwrap_err().code, codes::INVALID_MESSAGE);
        // Entries with values are counted alike.
        let mut valued = action_of(MAX_BATCH + 1);
        if let Msg::Action(a) = &mut valued {
            a.actions.iter_mut().for_each(|e| e.values = vec![0.25; 3]);
        }
        assert_eq!(
            decode_binary(&encode_binary(&valued)).unwrap_err().code,
            codes::INVALID_MESSAGE
        );
        // Bytes that are not protobuf are left to the decoder's own error.
        let mut truncated = encode_binary(&action_of(3));
        truncated.pop();
        assert_eq!(decode_binary(&truncated).unwrap_err().code, codes::MALFORMED_MESSAGE);
        assert!(check_entries(&[0xff; 16]).is_ok());
    }

    #[test]
    fn a_nan_metric_written_as_null_reads_back_as_nan() {
        let end = Msg::EpisodeEnd(EpisodeEnd {
            episode_id: 1,
            status: "completed".into(),
            metrics: [("ndtw".to_string(), f64::NAN), ("emd".to_string(), 0.5)]
                .into_iter()
                .collect(),
            ..Default::default()
        });
        let Frame::Text(t) = encode(&end, Encoding::Json) else {
            panic!()
        };
        assert!(t.contains(r#""ndtw":null"#), "{t}");
        let Msg::EpisodeEnd(back) = decode_json(&t).unwrap() else {
            panic!()
        };
        assert!(back.metrics["ndtw"].is_nan());
        assert_eq!(back.metrics["emd"], 0.5);
    }

    #[test]
    fn bad_frames_get_stable_codes() {
        // The type read alone: any other value, however large, is skipped unbuilt.
        for (text, why) in [
            (r#"{"type":5}"#, "must be a string"),
            (r#"{"type":[1,[2]],"step":1}"#, "must be a string"),
            (r#"{"type":{"a":[1]}}"#, "must be a string"),
            (r#""action""#, "must be a JSON object"),
            (r#"{"step":1,"junk":[[0],{"x":null}]}"#, "needs a \"type\" key"),
        ] {
            let e = decode_json(text).unwrap_err();
            assert_eq!(e.code, codes::MALFORMED_MESSAGE, "{text}");
            assert!(e.message.contains(why), "{text}: {e}");
        }
        let Msg::Heartbeat(_) = decode_json(r#"{"junk":[0,0,{"a":[]}],"type":"heartbeat"}"#).unwrap() else {
            panic!("a heartbeat whose type comes last")
        };
        assert_eq!(decode_json("{not json").unwrap_err().code, codes::MALFORMED_MESSAGE);
        assert_eq!(decode_json("[1]").unwrap_err().code, codes::MALFORMED_MESSAGE);
        assert_eq!(decode_json(r#"{"step":1}"#).unwrap_err().code, codes::MALFORMED_MESSAGE);
        assert_eq!(
            decode_json(r#"{"type":"dance"}"#).unwrap_err().code,
            codes::UNKNOWN_MESSAGE
        );
        assert_eq!(
            decode_json(r#"{"type":"action","step":"x"}"#).unwrap_err().code,
            codes::INVALID_MESSAGE
        );
        assert_eq!(
            decode_binary(&[0xff, 0xff, 0xff]).unwrap_err().code,
            codes::MALFORMED_MESSAGE
        );
        assert_eq!(decode_binary(&[]).unwrap_err().code, codes::UNKNOWN_MESSAGE);
    }
}
