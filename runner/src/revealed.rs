//! What a revealed reference (`reveal_reference`) takes in the protocol's messages: it carries
//! the whole clip, 36 doubles a frame at 50 Hz, in every EpisodeInfo (a 2-minute clip is about
//! 1.7 MB in protobuf), against a limit of [`MAX_MESSAGE_BYTES`] a message (docs/protocol.md §1).
//! The server splits EpisodeStarts by these bounds and refuses references no message holds;
//! `arena bench validate --motions-root` reports the latter to the organiser.

use arena_sdk::protocol::MAX_MESSAGE_BYTES;
use arena_sim::CONTROL_DT;
use arena_sim::handler::NQ;

/// Room kept for the envelope and the fields of a message besides its EpisodeInfos.
pub const MESSAGE_FIELDS: usize = 64 << 10;
/// Bound on an EpisodeInfo's bytes besides its reference values and motion name.
pub const PER_EPISODE: usize = 256;
/// Bytes a reference value (a double) takes in binary frames and gRPC (protobuf's packed doubles).
pub const BINARY_BYTES_PER_VALUE: usize = 8;
/// Bytes a reference value takes at most in JSON text: `-1.2345678901234567e-100` and a comma.
pub const JSON_BYTES_PER_VALUE: usize = 25;
/// Bytes an observation value (a float) takes in binary frames and gRPC: an episode's first
/// `reference_goal` rows in an EpisodeInfo when each row is sent once.
pub const BINARY_BYTES_PER_FLOAT: usize = 4;

/// What one message holds for its EpisodeInfos.
pub fn budget() -> usize {
    MAX_MESSAGE_BYTES - MESSAGE_FIELDS
}

/// Bytes an EpisodeInfo takes at most with `values` reference values at `bytes_per_value` and a
/// motion name of `name_bytes`.
pub fn info_bound(values: usize, name_bytes: usize, bytes_per_value: usize) -> usize {
    values * bytes_per_value + name_bytes + PER_EPISODE
}

/// Frames of the revealed reference of a motion of `length_s` seconds: the motion at the control
/// rate, both ends included.
pub fn reference_frames(length_s: f64) -> usize {
    (length_s / CONTROL_DT).floor() as usize + 1
}

/// A motion whose revealed reference alone exceeds one message.
#[derive(Debug, Clone, PartialEq)]
pub struct TooLarge {
    pub motion: String,
    pub frames: usize,
    pub bytes: usize,
    /// The most frames one message carries at this encoding.
    pub most_frames: usize,
}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "motion {}'s reference ({} frames) takes {:.1} MiB, over one message's {} MiB; at most {} frames ({:.0} s at 50 Hz) fit",
            self.motion,
            self.frames,
            self.bytes as f64 / f64::from(1u32 << 20),
            MAX_MESSAGE_BYTES >> 20,
            self.most_frames,
            self.most_frames as f64 * CONTROL_DT,
        )
    }
}

/// Of `motions` (name, length in seconds), the one whose revealed reference takes the most
/// bytes at `bytes_per_value` a value, when it does not fit one message beside `other_bytes`
/// of the same EpisodeInfo (its first `reference_goal` rows when each row is sent once).
pub fn longest_too_large<'a>(
    motions: impl IntoIterator<Item = (&'a str, f64)>,
    bytes_per_value: usize,
    other_bytes: usize,
) -> Option<TooLarge> {
    let bound = |frames: usize, name: &str| info_bound(frames * NQ, name.len(), bytes_per_value) + other_bytes;
    let (name, frames) = motions
        .into_iter()
        .map(|(name, length_s)| (name, reference_frames(length_s)))
        .max_by_key(|&(name, frames)| bound(frames, name))?;
    let bytes = bound(frames, name);
    (bytes > budget()).then(|| TooLarge {
        motion: name.to_string(),
        frames,
        bytes,
        most_frames: budget().saturating_sub(PER_EPISODE + name.len() + other_bytes) / (NQ * bytes_per_value),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limits_in_both_encodings() {
        let most = |bytes| budget().saturating_sub(PER_EPISODE + 4) / (NQ * bytes);
        // docs/protocol.md §6 quotes these.
        assert_eq!(most(BINARY_BYTES_PER_VALUE), 58_025);
        assert_eq!(most(JSON_BYTES_PER_VALUE), 18_568);
        let at = |frames: usize| (frames - 1) as f64 * CONTROL_DT + 1e-6;
        assert!(longest_too_large([("long", at(58_025))], BINARY_BYTES_PER_VALUE, 0).is_none());
        let over = longest_too_large([("ok", 10.0), ("long", at(58_026))], BINARY_BYTES_PER_VALUE, 0).unwrap();
        assert_eq!(
            (over.motion.as_str(), over.frames, over.most_frames),
            ("long", 58_026, 58_025)
        );
        assert!(over.to_string().contains("58026 frames"), "{over}");
        assert!(longest_too_large([("long", at(18_568))], JSON_BYTES_PER_VALUE, 0).is_none());
        assert!(longest_too_large([("long", at(18_569))], JSON_BYTES_PER_VALUE, 0).is_some());
        assert!(longest_too_large([], JSON_BYTES_PER_VALUE, 0).is_none());
        // An EpisodeInfo's first reference_goal rows (g1-smoke's 7 × 527 floats) take room.
        let rows = 7 * 527 * BINARY_BYTES_PER_FLOAT;
        let over = longest_too_large([("long", at(58_025))], BINARY_BYTES_PER_VALUE, rows).unwrap();
        // 57,974 frames: 51 fewer than without them.
        assert_eq!(
            over.most_frames,
            (budget() - PER_EPISODE - 4 - rows) / (NQ * BINARY_BYTES_PER_VALUE)
        );
        assert_eq!(over.most_frames, 57_974);
    }
}
