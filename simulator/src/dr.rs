//! Domain randomisation levels (BFM_ZERO_FACTS §4.5, §2.1). Every draw comes from the
//! episode's own seed, so an episode randomises the same way in whichever env slot it runs.
//!
//! - L0: none.
//! - L1: friction U(0.5, 1.25) (every geom), link masses ×U(0.95, 1.05), torso CoM ±0.02 m.
//! - L2: L1 + default joint offsets U(−0.02, 0.02) rad, PD gain scales U(0.75, 1.25),
//!   observation noise (σ as in training).
//! - L3: L2 + pushes (every 1 or 2 s: root vx, vy ± 0.5 m/s, roll/pitch/yaw rates ± 0.5 rad/s)
//!   and a control delay of 0 or 1 step.

use crate::handler::PhysicsParams;
use crate::robot::NUM_BODIES;
use arena_data::NUM_JOINTS;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(try_from = "u8", into = "u8")]
pub enum DrLevel {
    #[default]
    L0,
    L1,
    L2,
    L3,
}

impl TryFrom<u8> for DrLevel {
    type Error = String;
    fn try_from(v: u8) -> Result<Self, String> {
        match v {
            0 => Ok(DrLevel::L0),
            1 => Ok(DrLevel::L1),
            2 => Ok(DrLevel::L2),
            3 => Ok(DrLevel::L3),
            _ => Err(format!("domain randomisation level must be 0, 1, 2 or 3, got {v}")),
        }
    }
}

impl From<DrLevel> for u8 {
    fn from(l: DrLevel) -> u8 {
        l as u8
    }
}

/// Everything randomised for one episode.
#[derive(Debug, Clone, PartialEq)]
pub struct DrDraw {
    pub level: DrLevel,
    pub physics: PhysicsParams,
    pub joint_offset: [f64; NUM_JOINTS],
    pub obs_noise: bool,
    pub pushes: bool,
    /// Control steps by which actions are delayed (0 or 1).
    pub control_delay: usize,
}

/// Draws one episode's randomisation. Always consumes the same random numbers in the same
/// order, so level k's draws are a prefix-compatible superset of level k−1's.
pub fn draw(level: DrLevel, seed: u64) -> DrDraw {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let friction = rng.random_range(0.5..1.25);
    let mass_scale: [f64; NUM_BODIES] = std::array::from_fn(|_| rng.random_range(0.95..1.05));
    let com: [f64; 3] = std::array::from_fn(|_| rng.random_range(-0.02..0.02));
    let offsets: [f64; NUM_JOINTS] = std::array::from_fn(|_| rng.random_range(-0.02..0.02));
    let kp_scale = rng.random_range(0.75..1.25);
    let kd_scale = rng.random_range(0.75..1.25);
    let delay = rng.random_range(0..=1usize);
    let l1 = level >= DrLevel::L1;
    let l2 = level >= DrLevel::L2;
    let l3 = level >= DrLevel::L3;
    DrDraw {
        level,
        physics: PhysicsParams {
            friction: l1.then_some(friction),
            mass_scale: if l1 { mass_scale } else { [1.0; NUM_BODIES] },
            torso_com_offset: if l1 { com } else { [0.0; 3] },
            kp_scale: if l2 { kp_scale } else { 1.0 },
            kd_scale: if l2 { kd_scale } else { 1.0 },
        },
        joint_offset: if l2 { offsets } else { [0.0; NUM_JOINTS] },
        obs_noise: l2,
        pushes: l3,
        control_delay: if l3 { delay } else { 0 },
    }
}

impl DrDraw {
    /// The same draw with nominal PD gains and no control delay: BFM-Zero's training set
    /// (friction, masses, CoM, joint offsets, observation noise, pushes) at level 3.
    pub fn without_gains_and_delay(mut self) -> DrDraw {
        self.physics.kp_scale = 1.0;
        self.physics.kd_scale = 1.0;
        self.control_delay = 0;
        self
    }
}

/// Seconds until the next push: an integer drawn from [1, 3) (§4.5).
pub fn next_push_interval_s(rng: &mut ChaCha8Rng) -> f64 {
    rng.random_range(1..3u32) as f64
}

/// One push: (Δv root linear xy, Δω root angular), world frame.
pub fn push_velocity(rng: &mut ChaCha8Rng) -> ([f64; 3], [f64; 3]) {
    let v = [rng.random_range(-0.5..0.5), rng.random_range(-0.5..0.5), 0.0];
    let w = std::array::from_fn(|_| rng.random_range(-0.5..0.5));
    (v, w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproducible_and_level_gated() {
        assert_eq!(draw(DrLevel::L3, 7), draw(DrLevel::L3, 7));
        assert_ne!(draw(DrLevel::L3, 7), draw(DrLevel::L3, 8));
        let l0 = draw(DrLevel::L0, 7);
        assert_eq!(l0.physics, PhysicsParams::default());
        assert_eq!(l0.joint_offset, [0.0; NUM_JOINTS]);
        let l1 = draw(DrLevel::L1, 7);
        let l3 = draw(DrLevel::L3, 7);
        assert_eq!(l1.physics.friction, l3.physics.friction);
        assert_eq!(l1.physics.kp_scale, 1.0);
        assert!(l3.physics.kp_scale != 1.0 && l3.pushes && l3.obs_noise);
        let f = l1.physics.friction.unwrap();
        assert!((0.5..1.25).contains(&f));
        assert!(DrLevel::try_from(4).is_err());
    }

    #[test]
    fn bfm_zero_set_drops_only_gains_and_delay() {
        let seed = (0..64).find(|&s| draw(DrLevel::L3, s).control_delay == 1).unwrap();
        let full = draw(DrLevel::L3, seed);
        assert!(full.physics.kp_scale != 1.0 && full.physics.kd_scale != 1.0);
        let bfm = full.clone().without_gains_and_delay();
        assert_eq!(
            (bfm.physics.kp_scale, bfm.physics.kd_scale, bfm.control_delay),
            (1.0, 1.0, 0)
        );
        assert_eq!(bfm.physics.friction, full.physics.friction);
        assert_eq!(bfm.physics.mass_scale, full.physics.mass_scale);
        assert_eq!(bfm.physics.torso_com_offset, full.physics.torso_com_offset);
        assert_eq!(bfm.joint_offset, full.joint_offset);
        assert!(bfm.obs_noise && bfm.pushes);
    }
}
