//! The shared-memory file between the GPU handler and its worker: arrays in C order, back to
//! back in [`Array::ALL`] order, each `num_envs × width` values. The inputs and the three
//! per-env scalars at the end are float64; the device outputs (`Qpos` to `ContactForce`) are
//! in the precision the physics computes in ([`OutputPrecision`]), so that float32 physics is
//! not widened on the way (half the bytes to copy from the device and to read). The Rust side
//! writes the inputs before a command; the worker consumes the flags it acts on (sets them
//! back to 0) and writes every output before it answers. `gpu_worker.py` states the same table.

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

const _: () = {
    let mut k = 0;
    while k < Array::ALL.len() {
        assert!(Array::ALL[k] as usize == k, "Array::ALL is in declaration order");
        k += 1;
    }
};

/// The type of the device outputs in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutputPrecision {
    /// MuJoCo Warp, MJX without x64, the stub.
    F32,
    /// MJX with x64.
    F64,
}

impl OutputPrecision {
    fn value_bytes(self) -> usize {
        match self {
            OutputPrecision::F32 => 4,
            OutputPrecision::F64 => 8,
        }
    }
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

    /// Written by the physics, in its precision.
    pub(crate) fn is_device_output(self) -> bool {
        matches!(
            self,
            Array::Qpos
                | Array::Qvel
                | Array::Torque
                | Array::BodyPos
                | Array::BodyQuat
                | Array::BodyLinVel
                | Array::BodyAngVel
                | Array::ContactForce
        )
    }

    fn value_bytes(self, precision: OutputPrecision) -> usize {
        if self.is_device_output() {
            precision.value_bytes()
        } else {
            8
        }
    }

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

/// Where every array of `num_envs` envs lies in the file, in bytes.
#[derive(Debug, Clone)]
pub(crate) struct ShmLayout {
    num_envs: usize,
    precision: OutputPrecision,
    offsets: [usize; 21],
    total: usize,
}

impl ShmLayout {
    pub(crate) fn new(num_envs: usize, precision: OutputPrecision) -> Self {
        let mut offsets = [0; 21];
        let mut total = 0;
        for (k, a) in Array::ALL.iter().enumerate() {
            offsets[k] = total;
            total += num_envs * a.width() * a.value_bytes(precision);
        }
        Self {
            num_envs,
            precision,
            offsets,
            total,
        }
    }

    /// Size of the file in bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.total
    }

    pub(crate) fn precision(&self) -> OutputPrecision {
        self.precision
    }

    /// The value range of `array` (all envs), in values of its own type from the start of the
    /// file viewed as that type: every array's byte offset is a multiple of its value size,
    /// since the float32 block has an even number of values (580 per env) and the float64
    /// arrays before and after it a whole number of 8-byte values.
    pub(crate) fn range(&self, array: Array) -> std::ops::Range<usize> {
        // `ALL` lists the arrays in declaration order (checked below): the index is the
        // discriminant, with no search on this per-env path.
        let k = array as usize;
        let size = array.value_bytes(self.precision);
        debug_assert_eq!(self.offsets[k] % size, 0);
        let start = self.offsets[k] / size;
        start..start + self.num_envs * array.width()
    }

    /// The value range of `array` for one env (as [`ShmLayout::range`]).
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
        for precision in [OutputPrecision::F32, OutputPrecision::F64] {
            let l = ShmLayout::new(3, precision);
            assert_eq!(l.range(Array::Targets), 0..87);
            assert_eq!(l.range(Array::Active), 87..90);
            assert_eq!(l.range(Array::ResetFlag), 90..93);
            assert_eq!(l.row(Array::ResetQpos, 1), 93 + 36..93 + 72);
            let inputs = 29 + 1 + 1 + 36 + 35 + 1 + 36 + 1 + 6 + 29;
            let outputs = 36 + 35 + 29 + 90 + 120 + 90 + 90 + 90;
            let per_env: usize = Array::ALL.iter().map(|a| a.width()).sum();
            assert_eq!(per_env, inputs + outputs + 3);
            let out_bytes = if precision == OutputPrecision::F32 { 4 } else { 8 };
            // The outputs start right after the inputs, counted in their own values.
            assert_eq!(l.range(Array::Qpos).start * out_bytes, 8 * 3 * inputs);
            assert_eq!(l.row(Array::Qvel, 2).start, l.range(Array::Qpos).end + 2 * 35);
            assert_eq!(l.bytes(), 3 * (8 * inputs + out_bytes * outputs + 8 * 3));
            assert_eq!(8 * l.range(Array::Time).end, l.bytes());
        }
        // gpu_worker.py's figures: 3744 and 6064 bytes per env.
        assert_eq!(ShmLayout::new(1, OutputPrecision::F32).bytes(), 3744);
        assert_eq!(ShmLayout::new(1, OutputPrecision::F64).bytes(), 6064);
    }
}
