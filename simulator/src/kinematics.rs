//! Forward kinematics of the G1 through MuJoCo (`mj_kinematics` on a private `MjData`).

use crate::SimError;
use crate::handler::NQ;
use crate::math::{self, Quat, Vec3};
use crate::robot::{HEAD_OFFSET, NUM_BODIES, NUM_BODIES_EXT, RobotConfig, TORSO_INDEX};
use arena_data::{FeetPlacement, FootKinematics, NUM_JOINTS};
use mujoco_rs::prelude::{MjData, MjModel, MjtObjBase};

/// Body poses of the 31 extended bodies (30 real + virtual head).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BodyPoses {
    pub pos: [Vec3; NUM_BODIES_EXT],
    pub rot: [Quat; NUM_BODIES_EXT],
}

pub struct Kinematics {
    data: MjData<Box<MjModel>>,
    /// The bodies' orientations alone, without MuJoCo's whole forward kinematics (positions,
    /// frames of every geom and site); None for a model outside its reach.
    orientations: Option<OrientationChain>,
    left_foot: usize,
    right_foot: usize,
    /// (geom id, radius) of the foot contact spheres.
    contacts: Vec<(usize, f64)>,
    joint_limits: [[f64; 2]; NUM_JOINTS],
}

impl std::fmt::Debug for Kinematics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Kinematics")
    }
}

impl Kinematics {
    pub fn new(config: &RobotConfig) -> Result<Self, SimError> {
        let model = config.compile()?;
        let body = |name: &str| {
            model
                .name_to_id(MjtObjBase::mjOBJ_BODY, name)
                .ok_or_else(|| SimError::Model(format!("no body {name}")))
        };
        let (left_foot, right_foot) = (body("left_ankle_roll_link")?, body("right_ankle_roll_link")?);
        let mut contacts = Vec::new();
        for g in 0..model.ffi().ngeom as usize {
            let name = model.id_to_name(MjtObjBase::mjOBJ_GEOM, g).unwrap_or("");
            if name.contains("ankle_roll_contact") {
                contacts.push((g, model.geom_size()[g][0]));
            }
        }
        if contacts.is_empty() {
            return Err(SimError::Model("no foot contact geoms (*ankle_roll_contact*)".into()));
        }
        let mut joint_limits = [[0.0; 2]; NUM_JOINTS];
        for (j, lim) in joint_limits.iter_mut().enumerate() {
            *lim = model.jnt_range()[j + 1];
        }
        let orientations = OrientationChain::of(&model);
        let data = MjData::try_new(Box::new(model)).map_err(|e| SimError::Model(e.to_string()))?;
        Ok(Self {
            data,
            orientations,
            left_foot,
            right_foot,
            contacts,
            joint_limits,
        })
    }

    /// Lower and upper limit of each joint (G1 order), from the model.
    pub fn joint_limits(&self) -> &[[f64; 2]; NUM_JOINTS] {
        &self.joint_limits
    }

    fn run(&mut self, qpos: &[f64]) {
        debug_assert_eq!(qpos.len(), NQ);
        self.data.qpos_mut().copy_from_slice(qpos);
        self.data.kinematics();
    }

    /// World poses of the 31 extended bodies for one `qpos` (36, quaternion wxyz).
    pub fn body_poses(&mut self, qpos: &[f64]) -> BodyPoses {
        self.run(qpos);
        let xpos = self.data.xpos();
        let xquat = self.data.xquat();
        let mut out = BodyPoses {
            pos: [[0.0; 3]; NUM_BODIES_EXT],
            rot: [[0.0; 4]; NUM_BODIES_EXT],
        };
        out.pos[..NUM_BODIES].copy_from_slice(&xpos[1..=NUM_BODIES]);
        out.rot[..NUM_BODIES].copy_from_slice(&xquat[1..=NUM_BODIES]);
        let torso_rot = xquat[TORSO_INDEX + 1];
        out.pos[NUM_BODIES] = math::add(&xpos[TORSO_INDEX + 1], &math::rotate(&torso_rot, &HEAD_OFFSET));
        out.rot[NUM_BODIES] = torso_rot;
        out
    }
}

impl Kinematics {
    /// World-frame velocities of the 30 real bodies' frames (linear at each body's origin, as
    /// Isaac Lab's and mjlab's `body_link_lin_vel_w`; angular) for one state: `qpos` (36) and
    /// MuJoCo's `qvel` (35: root linear velocity in the world frame, angular in the root's).
    pub fn body_link_velocities(&mut self, qpos: &[f64], qvel: &[f64]) -> ([Vec3; NUM_BODIES], [Vec3; NUM_BODIES]) {
        self.run(qpos);
        self.data.qvel_mut().copy_from_slice(qvel);
        self.data.com_pos();
        self.data.com_vel();
        let (mut linear, mut angular) = ([[0.0; 3]; NUM_BODIES], [[0.0; 3]; NUM_BODIES]);
        for b in 0..NUM_BODIES {
            let v = self.data.object_velocity(MjtObjBase::mjOBJ_XBODY, b + 1, false);
            angular[b] = [v[0], v[1], v[2]];
            linear[b] = [v[3], v[4], v[5]];
        }
        (linear, angular)
    }

    /// World orientations (wxyz) of the 31 extended bodies for one `qpos`: those of
    /// [`Kinematics::body_poses`], computed along the body tree alone (MuJoCo's order of
    /// operations, checked against `mj_kinematics` in the tests) where the model allows it.
    pub fn body_orientations(&mut self, qpos: &[f64]) -> [Quat; NUM_BODIES_EXT] {
        match &self.orientations {
            Some(chain) => chain.orientations(qpos),
            None => self.body_poses(qpos).rot,
        }
    }
}

/// How each body's orientation follows from its parent's and its joint, for a tree whose root
/// body has a free joint and every other body one hinge (the G1): per body, the parent's
/// orientation times the body's fixed offset times the hinge's rotation by its angle from
/// `qpos0`, normalised, as `mj_kinematics` computes `xquat`. Scoring needs only these (the
/// mjlab metrics' body orientations, two per recorded row), and MuJoCo's whole forward
/// kinematics was about a third of scoring a two-second episode.
#[derive(Debug, Clone)]
struct OrientationChain {
    /// Per MuJoCo body 1..=NUM_BODIES: parent body (0 = world), fixed offset, hinge axis, qpos
    /// address and qpos0 of its joint (None: the root's free joint).
    bodies: Vec<ChainBody>,
}

#[derive(Debug, Clone)]
struct ChainBody {
    parent: usize,
    offset: Quat,
    hinge: Option<(Vec3, usize, f64)>,
}

impl OrientationChain {
    fn of(model: &MjModel) -> Option<Self> {
        use mujoco_rs::prelude::MjtJoint;
        let nbody = model.ffi().nbody as usize;
        if nbody != NUM_BODIES + 1 {
            return None;
        }
        let mut bodies = Vec::with_capacity(NUM_BODIES);
        for b in 1..nbody {
            if model.body_mocapid()[b] >= 0 || model.body_jntnum()[b] != 1 {
                return None;
            }
            let joint = model.body_jntadr()[b] as usize;
            let adr = model.jnt_qposadr()[joint] as usize;
            let parent = model.body_parentid()[b] as usize;
            let hinge = match model.jnt_type()[joint] {
                MjtJoint::mjJNT_FREE if parent == 0 && b == 1 => None,
                MjtJoint::mjJNT_HINGE => Some((model.jnt_axis()[joint], adr, model.qpos0()[adr])),
                _ => return None,
            };
            bodies.push(ChainBody {
                parent,
                offset: model.body_quat()[b],
                hinge,
            });
        }
        Some(Self { bodies })
    }

    fn orientations(&self, qpos: &[f64]) -> [Quat; NUM_BODIES_EXT] {
        debug_assert_eq!(qpos.len(), NQ);
        // Index 0 is the world; body b's orientation lands at b.
        let mut world = [[1.0, 0.0, 0.0, 0.0]; NUM_BODIES + 1];
        for (k, body) in self.bodies.iter().enumerate() {
            let q = match body.hinge {
                // mj_kinematics normalises qpos's free-joint quaternion first, then the body's.
                None => normalized([qpos[3], qpos[4], qpos[5], qpos[6]]),
                Some((axis, adr, zero)) => {
                    let placed = quat_mul(&world[body.parent], &body.offset);
                    quat_mul(&placed, &axis_angle(&axis, qpos[adr] - zero))
                }
            };
            world[k + 1] = normalized(q);
        }
        let mut out = [[0.0; 4]; NUM_BODIES_EXT];
        out[..NUM_BODIES].copy_from_slice(&world[1..]);
        out[NUM_BODIES] = world[TORSO_INDEX + 1];
        out
    }
}

/// `a · b`, each component summed in MuJoCo's `mju_mulQuat` order.
fn quat_mul(a: &Quat, b: &Quat) -> Quat {
    [
        a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3],
        a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2],
        a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1],
        a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0],
    ]
}

/// The rotation by `angle` about the unit `axis` (the identity for a zero angle, exactly).
fn axis_angle(axis: &Vec3, angle: f64) -> Quat {
    if angle == 0.0 {
        return [1.0, 0.0, 0.0, 0.0];
    }
    let (s, c) = (0.5 * angle).sin_cos();
    [c, axis[0] * s, axis[1] * s, axis[2] * s]
}

/// `q` scaled to unit length as `mju_normalize4` does: untouched when already within
/// `mjMINVAL` of unit length, the identity when (nearly) zero.
fn normalized(q: Quat) -> Quat {
    const MIN_VAL: f64 = 1e-15;
    let norm = (q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]).sqrt();
    if norm < MIN_VAL {
        [1.0, 0.0, 0.0, 0.0]
    } else if (norm - 1.0).abs() > MIN_VAL {
        let inv = 1.0 / norm;
        [q[0] * inv, q[1] * inv, q[2] * inv, q[3] * inv]
    } else {
        q
    }
}

impl FootKinematics for Kinematics {
    fn feet(&mut self, qpos: &[f64]) -> FeetPlacement {
        self.run(qpos);
        let xpos = self.data.xpos();
        let geom_xpos = self.data.geom_xpos();
        let lowest = self
            .contacts
            .iter()
            .map(|&(g, r)| geom_xpos[g][2] - r)
            .fold(f64::INFINITY, f64::min);
        FeetPlacement {
            left_xy: [xpos[self.left_foot][0], xpos[self.left_foot][1]],
            right_xy: [xpos[self.right_foot][0], xpos[self.right_foot][1]],
            lowest_contact_z: lowest,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The orientation chain gives MuJoCo's own `xquat` bit for bit: an unnormalised root
    /// quaternion, joint angles inside and far outside their ranges, and exact zeros.
    #[test]
    fn orientations_along_the_tree_are_mujocos() {
        let mut kin = Kinematics::new(&RobotConfig::default()).unwrap();
        assert!(kin.orientations.is_some(), "the G1 is a free root and hinges");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut worst = 0.0f64;
        for trial in 0..2000 {
            let mut qpos = [0.0; NQ];
            for v in qpos[..3].iter_mut() {
                *v = rng.random_range(-2.0..2.0);
            }
            for v in qpos[3..7].iter_mut() {
                *v = rng.random_range(-1.5..1.5);
            }
            for v in qpos[7..].iter_mut() {
                *v = match trial % 4 {
                    0 => 0.0,
                    1 => rng.random_range(-0.3..0.3),
                    _ => rng.random_range(-7.0..7.0),
                };
            }
            let chain = kin.body_orientations(&qpos);
            let full = kin.body_poses(&qpos).rot;
            for (a, b) in chain.iter().zip(&full) {
                for (x, y) in a.iter().zip(b) {
                    worst = worst.max((x - y).abs());
                }
            }
        }
        assert_eq!(worst, 0.0, "largest difference from mj_kinematics");
    }
}
