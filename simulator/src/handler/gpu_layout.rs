//! The shared-memory file between the GPU handler and its worker: float64 arrays, C order, back
//! to back in [`Array::ALL`] order, each `num_envs × width` values. The Rust side writes the
//! inputs before a command; the worker consumes the flags it acts on (sets them back to 0) and
//! writes every output before it answers. `gpu_worker.py` states the same table.

/// One array of the shared file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Array {
    /// PD joint targets (29).
    Targets,
    /// 1 = advance this env on `step`.
    Active,
    /// 1 = set this env's state from `ResetQpos`/`ResetQvel` (clears its failure).
    ResetFlag,
    ResetQpos,
    ResetQvel,
    /// 1 = apply `Params`.
    ParamsFlag,
    /// mass_scale (30), torso_com_offset (3), friction (1, NaN = the model's), kp_scale, kd_scale.
    Params,
    /// 1 = add `Push` to the root velocity before stepping.
    PushFlag,
    /// dv (world, 3), dω (world, 3).
    Push,
    /// Feed-forward torques added to the PD law (29; the joint-position mode's second half).
    Feedforward,
    Qpos,
    Qvel,
    /// Clamped torques of the last substep (29).
    Torque,
    /// The 30 real bodies: position, quaternion (wxyz), linear velocity at the centre of mass,
    /// angular velocity, net contact force; world frame.
    BodyPos,
    BodyQuat,
    BodyLinVel,
    BodyAngVel,
    ContactForce,
    /// 0 ok, 1 bad qpos, 2 bad qvel, 3 bad qacc or non-finite.
    Failed,
    /// Simulation time of the failure.
    FailedTime,
    /// Simulation time since the env's last reset.
    Time,
}

/// Values of the `Params` row.
pub(crate) const PARAMS_WIDTH: usize = 36;

impl Array {
    pub(crate) const ALL: [Array; 21] = [
        Array::Targets,
        Array::Active,
        Array::ResetFlag,
        Array::ResetQpos,
        Array::ResetQvel,
        Array::ParamsFlag,
        Array::Params,
        Array::PushFlag,
        Array::Push,
        Array::Feedforward,
        Array::Qpos,
        Array::Qvel,
        Array::Torque,
        Array::BodyPos,
        Array::BodyQuat,
        Array::BodyLinVel,
        Array::BodyAngVel,
        Array::ContactForce,
        Array::Failed,
        Array::FailedTime,
        Array::Time,
    ];

    /// Values per env.
    pub(crate) fn width(self) -> usize {
        match self {
            Array::Targets | Array::Torque | Array::Feedforward => 29,
            Array::Active
            | Array::ResetFlag
            | Array::ParamsFlag
            | Array::PushFlag
            | Array::Failed
            | Array::FailedTime
            | Array::Time => 1,
            Array::ResetQpos | Array::Qpos => 36,
            Array::ResetQvel | Array::Qvel => 35,
            Array::Params => PARAMS_WIDTH,
            Array::Push => 6,
            Array::BodyPos | Array::BodyLinVel | Array::BodyAngVel | Array::ContactForce => 90,
            Array::BodyQuat => 120,
        }
    }
}

/// Offsets (in values) of every array for `num_envs` envs.
#[derive(Debug, Clone)]
pub(crate) struct ShmLayout {
    num_envs: usize,
    offsets: [usize; 21],
    total: usize,
}

impl ShmLayout {
    pub(crate) fn new(num_envs: usize) -> Self {
        let mut offsets = [0; 21];
        let mut total = 0;
        for (k, a) in Array::ALL.iter().enumerate() {
            offsets[k] = total;
            total += num_envs * a.width();
        }
        Self {
            num_envs,
            offsets,
            total,
        }
    }

    /// Size of the file in bytes.
    pub(crate) fn bytes(&self) -> usize {
        8 * self.total
    }

    /// The value range of `array` (all envs).
    pub(crate) fn range(&self, array: Array) -> std::ops::Range<usize> {
        let k = Array::ALL.iter().position(|a| *a == array).expect("listed");
        self.offsets[k]..self.offsets[k] + self.num_envs * array.width()
    }

    /// The value range of `array` for one env.
    pub(crate) fn row(&self, array: Array, env: usize) -> std::ops::Range<usize> {
        let w = array.width();
        let start = self.range(array).start + env * w;
        start..start + w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_are_back_to_back_in_order() {
        let l = ShmLayout::new(3);
        assert_eq!(l.range(Array::Targets), 0..87);
        assert_eq!(l.range(Array::Active), 87..90);
        assert_eq!(l.range(Array::ResetFlag), 90..93);
        assert_eq!(l.row(Array::ResetQpos, 1), 93 + 36..93 + 72);
        let per_env: usize = Array::ALL.iter().map(|a| a.width()).sum();
        assert_eq!(
            per_env,
            29 + 1 + 1 + 36 + 35 + 1 + 36 + 1 + 6 + 29 + 36 + 35 + 29 + 90 + 120 + 90 + 90 + 90 + 3
        );
        assert_eq!(l.bytes(), 8 * 3 * per_env);
        assert_eq!(l.range(Array::Time).end, 3 * per_env);
    }
}
