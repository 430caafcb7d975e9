//! Cutting motions into episodes: windows, repeats and per-episode seeds.

use super::*;

/// Seed of episode `index` of a benchmark with seed `spec_seed`: the two are spread by odd
/// 64-bit constants (the golden-ratio and splitmix64 multipliers), xor-ed, and finalised by
/// splitmix64, so neighbouring indices and neighbouring spec seeds give unrelated seeds and
/// `(seed s, index i)` never aliases `(seed s + 1, index i - 1)`.
pub fn episode_seed(spec_seed: u64, index: usize) -> u64 {
    splitmix64(spec_seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (index as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9))
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The most episodes a benchmark may expand to (motions × windows × repeats): each is a row of
/// every submission, and far more is a mistake (a stride or a repeat count), not a benchmark.
pub const MAX_EPISODES: usize = 1_000_000;

/// How many sliding windows of `length_s` every `stride_s` a clip `len_s` long has; None when
/// none fits (the clip is shorter, or the window is not a valid one): the clip is then one
/// whole-clip window.
fn sliding_count(length_s: f64, stride_s: f64, len_s: f64) -> Option<usize> {
    let valid = length_s.is_finite() && stride_s.is_finite() && length_s > 0.0 && stride_s > 0.0;
    // Starts k * stride while start + length <= len; counted up front so float error cannot add
    // or drop a window through accumulation (the cast saturates, for the size check).
    (valid && len_s + WINDOW_EPS >= length_s).then(|| ((len_s - length_s + WINDOW_EPS) / stride_s).floor() as usize + 1)
}

/// `(start_s, length_s)` of the windows of a clip `len_s` long.
fn windows(window: Window, len_s: f64) -> Vec<(f64, f64)> {
    match window {
        Window::Sliding { length_s, stride_s } => match sliding_count(length_s, stride_s, len_s) {
            Some(count) => (0..count).map(|k| (k as f64 * stride_s, length_s)).collect(),
            None => vec![(0.0, len_s)],
        },
        Window::Whole => vec![(0.0, len_s)],
    }
}

impl BenchmarkSpec {
    /// The episodes of a run, motion by motion, window by window, repeat by repeat.
    /// `motion_lengths_s[m]` is the duration of motion `m` (as [`MotionClip::duration_s`]).
    /// More than [`MAX_EPISODES`] is an error saying how many, counted before any is made.
    pub fn expand_episodes(&self, motion_lengths_s: &[f64]) -> Result<Vec<Episode>, String> {
        let clean = |len: f64| if len.is_finite() && len > 0.0 { len } else { 0.0 };
        let total = motion_lengths_s
            .iter()
            .map(|&len| match self.episodes.window {
                Window::Sliding { length_s, stride_s } => sliding_count(length_s, stride_s, clean(len)).unwrap_or(1),
                Window::Whole => 1,
            })
            .fold(0usize, |sum, windows| {
                sum.saturating_add(windows.saturating_mul(self.episodes.repeats as usize))
            });
        if total > MAX_EPISODES {
            return Err(format!(
                "benchmark {} expands to {} episodes ({} motions × their windows × {} repeats); at most {MAX_EPISODES} are allowed",
                self.name,
                if total == usize::MAX {
                    "too many".to_string()
                } else {
                    total.to_string()
                },
                motion_lengths_s.len(),
                self.episodes.repeats
            ));
        }
        let mut out = Vec::with_capacity(total);
        for (motion, &len) in motion_lengths_s.iter().enumerate() {
            let len = clean(len);
            for (start_s, length_s) in windows(self.episodes.window, len) {
                let duration_s = if self.limits.max_episode_s > 0.0 {
                    length_s.min(self.limits.max_episode_s)
                } else {
                    length_s
                };
                for repeat in 0..self.episodes.repeats {
                    let index = out.len();
                    out.push(Episode {
                        index,
                        motion,
                        start_s,
                        duration_s,
                        repeat,
                        seed: episode_seed(self.episodes.seed, index),
                    });
                }
            }
        }
        Ok(out)
    }
}
