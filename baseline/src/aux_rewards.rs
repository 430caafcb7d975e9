//! Auxiliary rewards of FB-CPR-Aux (BFM_ZERO_FACTS §4.2), computed from the simulator after each
//! control step. Only the raw terms are computed here; the weights c_k come from the config.

use arena_data::NUM_JOINTS;
use arena_sim::handler::{Field, Handler};
use arena_sim::math;
use arena_sim::robot::NUM_BODIES_EXT;
use std::collections::BTreeMap;

/// The terms, in the order of [`AuxRewards::terms`] rows.
pub const TERMS: [&str; 8] = [
    "penalty_action_rate",
    "penalty_feet_ori",
    "penalty_ankle_roll",
    "limits_dof_pos",
    "penalty_slippage",
    "penalty_undesired_contact",
    "penalty_torques",
    "limits_torque",
];

/// Feet: the ankle-roll links (BFM-Zero body order).
const FEET: [usize; 2] = [6, 12];
/// Bodies whose contact is penalised: the pelvis and every body named `*hip*` or `*shoulder*`.
const PENALISED: [usize; 13] = [0, 1, 2, 3, 7, 8, 9, 16, 17, 18, 23, 24, 25];
const LEFT_ANKLE_ROLL: usize = 5;
const RIGHT_ANKLE_ROLL: usize = 11;
const CONTACT_THRESHOLD_N: f64 = 1.0;

/// Reads the simulator once per step and evaluates every term for every env.
#[derive(Debug)]
pub struct AuxRewards {
    soft_lower: [f64; NUM_JOINTS],
    soft_upper: [f64; NUM_JOINTS],
    effort: [f64; NUM_JOINTS],
    weights: [f64; TERMS.len()],
    dof_pos: Vec<f64>,
    torque: Vec<f64>,
    body_rot: Vec<f64>,
    body_vel: Vec<f64>,
    contact: Vec<f64>,
    /// Per env × term raw values of the last step.
    pub terms: Vec<f64>,
}

impl AuxRewards {
    /// `coefs`: c_k by term name (missing terms weigh 0).
    pub fn new(handler: &dyn Handler, coefs: &BTreeMap<String, f64>) -> Self {
        let n = handler.num_envs();
        let mut soft_lower = [0.0; NUM_JOINTS];
        let mut soft_upper = [0.0; NUM_JOINTS];
        for (j, (lo, hi)) in handler.joint_ranges().into_iter().enumerate() {
            // Soft limits: the middle ± 95 % of the half range.
            let (mid, half) = (0.5 * (lo + hi), 0.5 * (hi - lo));
            soft_lower[j] = mid - 0.95 * half;
            soft_upper[j] = mid + 0.95 * half;
        }
        AuxRewards {
            soft_lower,
            soft_upper,
            effort: handler.config().effort,
            weights: TERMS.map(|t| coefs.get(t).copied().unwrap_or(0.0)),
            dof_pos: vec![0.0; n * NUM_JOINTS],
            torque: vec![0.0; n * NUM_JOINTS],
            body_rot: vec![0.0; n * 4 * NUM_BODIES_EXT],
            body_vel: vec![0.0; n * 3 * NUM_BODIES_EXT],
            contact: vec![0.0; n * 3 * NUM_BODIES_EXT],
            terms: vec![0.0; n * TERMS.len()],
        }
    }

    /// Evaluates the terms after a step; `a5` and `prev_a5` are the clipped ×5 actions of this
    /// and the previous step (N × 29; zeros before an episode's first action).
    pub fn compute(&mut self, handler: &dyn Handler, a5: &[f64], prev_a5: &[f64]) -> Result<(), arena_sim::SimError> {
        handler.read_batch(Field::DofPos, &mut self.dof_pos)?;
        handler.read_batch(Field::DofTorque, &mut self.torque)?;
        handler.read_batch(Field::BodyRot, &mut self.body_rot)?;
        handler.read_batch(Field::BodyVel, &mut self.body_vel)?;
        handler.read_batch(Field::BodyContactForce, &mut self.contact)?;
        let k = TERMS.len();
        for e in 0..handler.num_envs() {
            let q = &self.dof_pos[e * NUM_JOINTS..(e + 1) * NUM_JOINTS];
            let tau = &self.torque[e * NUM_JOINTS..(e + 1) * NUM_JOINTS];
            let a = &a5[e * NUM_JOINTS..(e + 1) * NUM_JOINTS];
            let pa = &prev_a5[e * NUM_JOINTS..(e + 1) * NUM_JOINTS];
            let force = |b: usize| -> [f64; 3] {
                let o = e * 3 * NUM_BODIES_EXT + 3 * b;
                [self.contact[o], self.contact[o + 1], self.contact[o + 2]]
            };
            let mut feet_ori = 0.0;
            let mut slippage = 0.0;
            for foot in FEET {
                let f = force(foot);
                let o = e * 4 * NUM_BODIES_EXT + 4 * foot;
                let rot: math::Quat = self.body_rot[o..o + 4].try_into().expect("4");
                if f[2] > CONTACT_THRESHOLD_N {
                    let g = math::rotate_inv(&rot, &[0.0, 0.0, -1.0]);
                    feet_ori += (g[0] * g[0] + g[1] * g[1]).sqrt();
                }
                if norm(&f) > CONTACT_THRESHOLD_N {
                    let v = &self.body_vel[e * 3 * NUM_BODIES_EXT + 3 * foot..][..3];
                    slippage += (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
                }
            }
            let undesired = PENALISED
                .iter()
                .any(|&b| force(b).iter().any(|c| c.abs() > CONTACT_THRESHOLD_N));
            let row = &mut self.terms[e * k..(e + 1) * k];
            row[0] = a.iter().zip(pa).map(|(x, y)| (y - x) * (y - x)).sum();
            row[1] = feet_ori;
            row[2] = q[LEFT_ANKLE_ROLL] * q[LEFT_ANKLE_ROLL] + q[RIGHT_ANKLE_ROLL] * q[RIGHT_ANKLE_ROLL];
            row[3] = (0..NUM_JOINTS)
                .map(|j| (self.soft_lower[j] - q[j]).max(0.0) + (q[j] - self.soft_upper[j]).max(0.0))
                .sum();
            row[4] = slippage;
            row[5] = if undesired { 1.0 } else { 0.0 };
            row[6] = tau.iter().map(|t| t * t).sum();
            row[7] = tau
                .iter()
                .zip(&self.effort)
                .map(|(t, lim)| (t.abs() - 0.95 * lim).max(0.0))
                .sum();
        }
        Ok(())
    }

    /// Σ_k c_k r_k of env `e`.
    pub fn weighted(&self, e: usize) -> f64 {
        let k = TERMS.len();
        self.terms[e * k..(e + 1) * k]
            .iter()
            .zip(&self.weights)
            .map(|(r, c)| r * c)
            .sum()
    }
}

fn norm(v: &[f64; 3]) -> f64 {
    (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt()
}
