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
        let data = MjData::try_new(Box::new(model)).map_err(|e| SimError::Model(e.to_string()))?;
        Ok(Self {
            data,
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
