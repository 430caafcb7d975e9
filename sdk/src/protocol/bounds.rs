//! The lists of a message held to [`MAX_BATCH`] entries before they are built, in both
//! encodings. An entry can be a couple of bytes on the wire (an empty `EpisodeAction` is 2 bytes
//! of protobuf, `{}` 3 of JSON) and a struct of 32 bytes or more once decoded: a 16 MiB frame of
//! them took 256 MiB. A server decodes whatever type a client sends before refusing a type it
//! does not expect, so every list is bounded, whichever side sends it.

use super::{DecodeError, MAX_BATCH, codes};
use std::collections::BTreeMap;

/// Each list of a message, as the path of field numbers from the `Envelope`: the message's
/// field, any singular message fields on the way, then the repeated field. The message's name
/// and the list's are for the refusal.
const LISTS: [(&[u64], &str); 5] = [
    (&[2, 9, 1], "connected's spec.observations"),
    (&[4, 1], "episode_start's episodes"),
    (&[5, 2], "get_action's observations"),
    (&[6, 2], "action's actions"),
    (&[7, 5], "episode_end's metrics"),
];

/// Refuses the protobuf bytes of an `Envelope` with a list of more than [`MAX_BATCH`] entries,
/// counted on the wire without decoding anything. Bytes that are not valid protobuf pass: the
/// decoder then says what is wrong with them.
pub fn check_entries(bytes: &[u8]) -> Result<(), DecodeError> {
    for (path, list) in LISTS {
        let entries = count(bytes, path);
        if entries > MAX_BATCH {
            return Err(DecodeError::new(
                codes::INVALID_MESSAGE,
                format!("{list} has {entries} entries, more than the {MAX_BATCH} a batch may hold"),
            ));
        }
    }
    Ok(())
}

/// Entries of the repeated field at the end of `path`. A singular message may come in pieces
/// that the decoder merges, so every piece on the way counts.
fn count(bytes: &[u8], path: &[u64]) -> usize {
    let (&field, rest) = path.split_first().expect("a path names a field");
    let values = WireFields(bytes)
        .filter(|(f, _)| *f == field)
        .filter_map(|(_, value)| value);
    if rest.is_empty() {
        values.count()
    } else {
        values.map(|value| count(value, rest)).sum()
    }
}

/// The fields of protobuf bytes in order, as (field number, the bytes of a length-delimited
/// value); ends at the first byte that is not valid wire format.
struct WireFields<'a>(&'a [u8]);

impl<'a> Iterator for WireFields<'a> {
    type Item = (u64, Option<&'a [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        fn varint(bytes: &mut &[u8]) -> Option<u64> {
            let mut value = 0u64;
            for shift in (0..64).step_by(7) {
                let (&byte, rest) = bytes.split_first()?;
                *bytes = rest;
                value |= u64::from(byte & 0x7f) << shift;
                if byte < 0x80 {
                    return Some(value);
                }
            }
            None
        }
        let mut rest = self.0;
        let key = varint(&mut rest)?;
        let (value, after) = match key & 7 {
            0 => {
                varint(&mut rest)?;
                (None, rest)
            }
            1 => (None, rest.get(8..)?),
            2 => {
                let len = usize::try_from(varint(&mut rest)?).ok()?;
                (Some(rest.get(..len)?), rest.get(len..)?)
            }
            5 => (None, rest.get(4..)?),
            // Groups (3, 4) are not in this protocol; anything else is not protobuf.
            _ => return None,
        };
        self.0 = after;
        Some((key >> 3, value))
    }
}

/// A list of a message from JSON (serde's `deserialize_with`), refused past [`MAX_BATCH`]
/// entries before more are built.
pub fn entries_from_json<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    struct Entries<T>(std::marker::PhantomData<T>);
    impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for Entries<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "a list of at most {MAX_BATCH} entries")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut entries = Vec::new();
            while let Some(entry) = seq.next_element()? {
                if entries.len() == MAX_BATCH {
                    return Err(serde::de::Error::custom(format_args!(
                        "a list of more than the {MAX_BATCH} entries a batch may hold"
                    )));
                }
                entries.push(entry);
            }
            Ok(entries)
        }
    }
    d.deserialize_seq(Entries(std::marker::PhantomData))
}

/// An `episode_end`'s metrics from JSON, where a NaN (a metric that could not be computed) is
/// written as `null`: read back as NaN, not refused. At most [`MAX_BATCH`] of them.
pub fn metrics_from_json<'de, D: serde::Deserializer<'de>>(d: D) -> Result<BTreeMap<String, f64>, D::Error> {
    struct Metrics;
    impl<'de> serde::de::Visitor<'de> for Metrics {
        type Value = BTreeMap<String, f64>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "an object of at most {MAX_BATCH} metrics")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut metrics = BTreeMap::new();
            let mut read = 0usize;
            while let Some((name, value)) = map.next_entry::<String, Option<f64>>()? {
                read += 1;
                if read > MAX_BATCH {
                    return Err(serde::de::Error::custom(format_args!(
                        "more than the {MAX_BATCH} metrics an episode_end may hold"
                    )));
                }
                metrics.insert(name, value.unwrap_or(f64::NAN));
            }
            Ok(metrics)
        }
    }
    d.deserialize_map(Metrics)
}
