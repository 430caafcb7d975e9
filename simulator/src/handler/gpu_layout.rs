//! The shared-memory file between the GPU handler and its worker: arrays in C order, back to
//! back in [`Array::ALL`] order, each `num_envs × width` values. The reset and params inputs
//! and the three per-env scalars after the outputs are float64; the device outputs (`Qpos` to
//! `ContactForce`) and the command inputs (`Inputs`, last) are in the precision the physics
//! computes in ([`Precision`]), so that float32 physics is neither widened on the way out nor
//! narrowed by the worker on the way in (half the bytes to copy and read, and the inputs go to
//! the device as they lie). The Rust side writes the inputs before a command; the worker
//! consumes the reset and params flags (sets them back to 0), writes every output before it
//! answers, and leaves `Inputs` to the Rust side (which clears a push once it is sent).
//! `gpu_worker.py` states the same table.

/// One array of the shared file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Array {
    /// 1 = set this env's state from `ResetQpos`/`ResetQvel` (clears its failure).
    ResetFlag,
    ResetQpos,
    ResetQvel,
    /// 1 = apply `Params`.
    ParamsFlag,
    /// mass_scale (30), torso_com_offset (3), friction (1, NaN = the model's), kp_scale, kd_scale.
    Params,
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
    /// A command's inputs, one row per env in the columns [`INPUT_TARGETS`], [`INPUT_PUSH`],
    /// [`INPUT_GO`] and [`INPUT_FEEDFORWARD`]: the block the physics takes as it is. Last in
    /// the file, so that its odd width never misaligns a float64 array after it.
    Inputs,
}

/// `Inputs` columns: PD joint targets (29).
pub(crate) const INPUT_TARGETS: std::ops::Range<usize> = 0..29;
/// `Inputs` columns: a push, dv (world, 3) then dω (world, 3), added to the root velocity before
/// the command's step or sync; zero when there is none.
pub(crate) const INPUT_PUSH: std::ops::Range<usize> = 29..35;
/// `Inputs` column: 1 = advance this env on `step`.
pub(crate) const INPUT_GO: usize = 35;
/// `Inputs` columns: feed-forward torques added to the PD law (29; the joint-position mode's
/// second half).
pub(crate) const INPUT_FEEDFORWARD: std::ops::Range<usize> = 36..65;
/// Values per env of `Inputs` (worker_common.py's `INP_WIDTH`).
pub(crate) const INPUT_WIDTH: usize = 65;

const _: () = {
    let mut k = 0;
    while k < Array::ALL.len() {
        assert!(Array::ALL[k] as usize == k, "Array::ALL is in declaration order");
        k += 1;
    }
};

/// The type of the device outputs and of the command inputs in the file: the physics' own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Precision {
    /// MuJoCo Warp, MJX without x64, the stub.
    F32,
    /// MJX with x64.
    F64,
}

impl Precision {
    fn value_bytes(self) -> usize {
        match self {
            Precision::F32 => 4,
            Precision::F64 => 8,
        }
    }
}

/// Values of the `Params` row.
pub(crate) const PARAMS_WIDTH: usize = 36;

impl Array {
    pub(crate) const ALL: [Array; 17] = [
        Array::ResetFlag,
        Array::ResetQpos,
        Array::ResetQvel,
        Array::ParamsFlag,
        Array::Params,
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
        Array::Inputs,
    ];

    /// In the physics' precision: its outputs and the command inputs it takes as they are.
    pub(crate) fn in_physics_precision(self) -> bool {
        matches!(
            self,
            Array::Inputs
                | Array::Qpos
                | Array::Qvel
                | Array::Torque
                | Array::BodyPos
                | Array::BodyQuat
                | Array::BodyLinVel
                | Array::BodyAngVel
                | Array::ContactForce
        )
    }

    fn value_bytes(self, precision: Precision) -> usize {
        if self.in_physics_precision() {
            precision.value_bytes()
        } else {
            8
        }
    }

    /// Values per env.
    pub(crate) fn width(self) -> usize {
        match self {
            Array::Torque => 29,
            Array::ResetFlag | Array::ParamsFlag | Array::Failed | Array::FailedTime | Array::Time => 1,
            Array::ResetQpos | Array::Qpos => 36,
            Array::ResetQvel | Array::Qvel => 35,
            Array::Params => PARAMS_WIDTH,
            Array::Inputs => INPUT_WIDTH,
            Array::BodyPos | Array::BodyLinVel | Array::BodyAngVel | Array::ContactForce => 90,
            Array::BodyQuat => 120,
        }
    }
}

/// Where every array of `num_envs` envs lies in the file, in bytes.
#[derive(Debug, Clone)]
pub(crate) struct ShmLayout {
    num_envs: usize,
    precision: Precision,
    offsets: [usize; 17],
    total: usize,
}

impl ShmLayout {
    pub(crate) fn new(num_envs: usize, precision: Precision) -> Self {
        let mut offsets = [0; 17];
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

    pub(crate) fn precision(&self) -> Precision {
        self.precision
    }

    /// The value range of `array` (all envs), in values of its own type from the start of the
    /// file viewed as that type: every array's byte offset is a multiple of its value size,
    /// since the float32 outputs have an even number of values (580 per env), the float64
    /// arrays before and after them a whole number of 8-byte values, and `Inputs` (65 per env)
    /// comes last.
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
        for precision in [Precision::F32, Precision::F64] {
            let l = ShmLayout::new(3, precision);
            assert_eq!(l.range(Array::ResetFlag), 0..3);
            assert_eq!(l.row(Array::ResetQpos, 1), 3 + 36..3 + 72);
            let float64_inputs = 1 + 36 + 35 + 1 + 36;
            let outputs = 36 + 35 + 29 + 90 + 120 + 90 + 90 + 90;
            let per_env: usize = Array::ALL.iter().map(|a| a.width()).sum();
            assert_eq!(per_env, float64_inputs + outputs + 3 + INPUT_WIDTH);
            let physics_bytes = if precision == Precision::F32 { 4 } else { 8 };
            // The outputs start right after the float64 inputs, counted in their own values.
            assert_eq!(l.range(Array::Qpos).start * physics_bytes, 8 * 3 * float64_inputs);
            assert_eq!(l.row(Array::Qvel, 2).start, l.range(Array::Qpos).end + 2 * 35);
            let scalars_end = 3 * (8 * float64_inputs + physics_bytes * outputs + 8 * 3);
            assert_eq!(8 * l.range(Array::Time).end, scalars_end);
            assert_eq!(l.range(Array::Inputs).start * physics_bytes, scalars_end);
            assert_eq!(l.bytes(), scalars_end + 3 * physics_bytes * INPUT_WIDTH);
            assert_eq!(physics_bytes * l.range(Array::Inputs).end, l.bytes());
        }
        // An odd number of envs keeps every float64 array aligned (Inputs is last).
        let odd = ShmLayout::new(5, Precision::F32);
        for a in Array::ALL {
            let _ = odd.range(a);
        }
        // The input columns tile the row.
        assert_eq!(INPUT_TARGETS.end, INPUT_PUSH.start);
        assert_eq!(INPUT_PUSH.end, INPUT_GO);
        assert_eq!(INPUT_GO + 1, INPUT_FEEDFORWARD.start);
        assert_eq!(INPUT_FEEDFORWARD.end, INPUT_WIDTH);
        // gpu_worker.py's figures: 3476 and 6056 bytes per env.
        assert_eq!(ShmLayout::new(1, Precision::F32).bytes(), 3476);
        assert_eq!(ShmLayout::new(1, Precision::F64).bytes(), 6056);
    }
}
