//! Splitting the EpisodeStart of a lane's newly claimed episodes into messages that each fit a
//! frame (docs/protocol.md §1). Without a revealed reference an EpisodeInfo is a few dozen
//! bytes; with one it carries the whole clip (36 values a frame at 50 Hz: a 2-minute clip is
//! about 1.7 MB in protobuf), so a few such episodes together would exceed the limit and the
//! client would drop the connection.

use arena_runner::revealed::{self, BINARY_BYTES_PER_VALUE, MESSAGE_FIELDS, PER_EPISODE};
use arena_sdk::protocol::EpisodeInfo;
use arena_sim::handler::NQ;

/// Messages to send and the episodes whose reference alone does not fit one.
#[derive(Debug, Default, PartialEq)]
pub struct EpisodeStarts {
    /// Each inner list is one EpisodeStart, in claim order.
    pub messages: Vec<Vec<EpisodeInfo>>,
    /// Episode ids sent without their reference (it alone exceeds a message), with why: they
    /// fail at once. (A benchmark revealing such a clip does not load, and a JSON agent is
    /// refused at connect, so this is a last guard.)
    pub too_large: Vec<(u32, String)>,
}

/// What a value takes at most in the client's encoding.
#[derive(Debug, Clone, Copy)]
pub struct ValueBytes {
    /// A revealed reference's value (a double).
    pub reference: usize,
    /// An observation value (a float): an episode's first `reference_goal` rows when each row
    /// is sent once (docs/protocol.md §5).
    pub row: usize,
}

/// Bytes `info` takes at most.
fn encoded_bound(info: &EpisodeInfo, bytes: ValueBytes) -> usize {
    let values = info.reference.as_ref().map_or(0, |r| r.qpos.len());
    revealed::info_bound(values, info.motion.len(), bytes.reference) + info.reference_goal.len() * bytes.row
}

/// Groups `starting` into EpisodeStart messages of at most `frame_bytes` each, at `bytes_per_value`
/// (None: messages handed over in process, one message).
pub fn split(starting: Vec<EpisodeInfo>, bytes_per_value: Option<ValueBytes>, frame_bytes: usize) -> EpisodeStarts {
    let mut out = EpisodeStarts::default();
    if starting.is_empty() {
        return out;
    }
    let Some(bytes) = bytes_per_value else {
        out.messages.push(starting);
        return out;
    };
    let budget = frame_bytes.saturating_sub(MESSAGE_FIELDS);
    let mut current = Vec::new();
    let mut used = 0usize;
    for mut info in starting {
        let mut size = encoded_bound(&info, bytes);
        if size > budget {
            let reference = info.reference.take().unwrap_or_default();
            let why = format!(
                "its revealed reference ({} frames, {:.1} MiB in this connection's encoding{}) exceeds one message \
                 ({} MiB, docs/protocol.md §1); binary frames or gRPC carry {} frames at most, JSON text fewer",
                reference.frames,
                (size as f64) / f64::from(1u32 << 20),
                match info.reference_goal.is_empty() {
                    true => "",
                    false => ", with the episode's first reference_goal rows",
                },
                frame_bytes >> 20,
                budget.saturating_sub(PER_EPISODE + info.reference_goal.len() * revealed::BINARY_BYTES_PER_FLOAT)
                    / (BINARY_BYTES_PER_VALUE * NQ),
            );
            out.too_large.push((info.episode_id, why));
            size = encoded_bound(&info, bytes);
        }
        if used + size > budget && !current.is_empty() {
            out.messages.push(std::mem::take(&mut current));
            used = 0;
        }
        used += size;
        current.push(info);
    }
    out.messages.push(current);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use arena_sdk::protocol::Reference;

    fn info(id: u32, frames: usize) -> EpisodeInfo {
        EpisodeInfo {
            episode_id: id,
            motion: format!("clip{id}"),
            reference: (frames > 0).then(|| Reference {
                fps: 50.0,
                frames: frames as u32,
                qpos: vec![0.25; frames * NQ],
            }),
            ..Default::default()
        }
    }

    fn ids(messages: &[Vec<EpisodeInfo>]) -> Vec<Vec<u32>> {
        messages
            .iter()
            .map(|m| m.iter().map(|i| i.episode_id).collect())
            .collect()
    }

    const FRAME: usize = 16 << 20;

    /// A reference value at `reference` bytes, an observation value at half that or 16 (JSON).
    fn bytes(reference: usize) -> ValueBytes {
        let row = if reference == BINARY_BYTES_PER_VALUE { 4 } else { 16 };
        ValueBytes { reference, row }
    }

    #[test]
    fn without_references_one_message_holds_every_episode() {
        let starting: Vec<_> = (0..4096).map(|i| info(i, 0)).collect();
        let s = split(starting, Some(bytes(25)), FRAME);
        assert_eq!(s.messages.len(), 1);
        assert_eq!(s.messages[0].len(), 4096);
        assert!(s.too_large.is_empty());
    }

    #[test]
    fn references_are_split_in_order_and_each_message_fits() {
        // 6000 frames (a 2-minute clip): 1.7 MB each in protobuf, 9 fit one message.
        let starting: Vec<_> = (0..20).map(|i| info(i, 6000)).collect();
        let s = split(starting, Some(bytes(8)), FRAME);
        assert!(s.too_large.is_empty());
        let flat: Vec<u32> = ids(&s.messages).concat();
        assert_eq!(flat, (0..20).collect::<Vec<_>>());
        for m in &s.messages {
            let size: usize = m.iter().map(|i| encoded_bound(i, bytes(8))).sum();
            assert!(size + MESSAGE_FIELDS <= FRAME, "{size}");
        }
        // The most that fit: each message but the last could not take the next episode.
        assert_eq!(ids(&s.messages).iter().map(Vec::len).collect::<Vec<_>>(), vec![9, 9, 2]);
    }

    #[test]
    fn first_reference_goal_rows_count_towards_a_message() {
        // 4096 episodes with g1-smoke's 7 first rows of 527 floats (14.8 kB each in binary):
        // over 60 MB in all, so four messages, each within the frame.
        let starting: Vec<_> = (0..4096)
            .map(|i| EpisodeInfo {
                reference_goal: vec![0.5; 7 * 527],
                ..info(i, 0)
            })
            .collect();
        let s = split(starting, Some(bytes(8)), FRAME);
        assert_eq!(ids(&s.messages).concat(), (0..4096).collect::<Vec<_>>());
        for m in &s.messages {
            let size: usize = m.iter().map(|i| encoded_bound(i, bytes(8))).sum();
            assert!(size + MESSAGE_FIELDS <= FRAME, "{size}");
            // What the bound promises holds for the real encoding.
            let encoded = arena_sdk::protocol::encode_binary(&arena_sdk::protocol::Msg::EpisodeStart(
                arena_sdk::protocol::EpisodeStart { episodes: m.clone() },
            ));
            assert!(encoded.len() <= size + MESSAGE_FIELDS, "{} > {size}", encoded.len());
        }
        assert_eq!(s.messages.len(), 4);
    }

    #[test]
    fn the_encoding_sets_how_many_fit() {
        let starting: Vec<_> = (0..20).map(|i| info(i, 6000)).collect();
        let json = split(starting, Some(bytes(25)), FRAME);
        assert_eq!(json.messages[0].len(), 3);
        assert_eq!(json.messages.iter().map(Vec::len).sum::<usize>(), 20);
        let in_process = split((0..20).map(|i| info(i, 6000)).collect(), None, FRAME);
        assert_eq!(in_process.messages.len(), 1);
    }

    #[test]
    fn a_reference_larger_than_a_message_is_left_out_and_named() {
        // 70,000 frames (23 minutes) is over 16 MiB at 8 bytes a value.
        let starting = vec![info(0, 100), info(1, 70_000), info(2, 100)];
        let s = split(starting, Some(bytes(8)), FRAME);
        assert_eq!(ids(&s.messages), vec![vec![0, 1, 2]]);
        assert!(s.messages[0][1].reference.is_none());
        assert!(s.messages[0][0].reference.is_some() && s.messages[0][2].reference.is_some());
        assert_eq!(s.too_large.len(), 1);
        let (id, why) = &s.too_large[0];
        assert_eq!(*id, 1);
        assert!(why.contains("70000 frames") && why.contains("16 MiB"), "{why}");
    }
}
