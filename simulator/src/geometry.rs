//! The robot's drawable geometry, read from the compiled model: bodies with their parents and the
//! primitive geoms attached to each (in the body's frame), so a viewer (the replay on the web
//! pages) draws exactly the MJCF that the simulator runs.

use crate::SimError;
use crate::robot::{NUM_BODIES, RobotConfig};
use mujoco_rs::prelude::{MjtGeomBase, MjtObjBase};
use serde::Serialize;

/// A body of the model (MuJoCo's bodies 1…30, world excluded).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BodyInfo {
    pub name: String,
    /// Index of the parent in the body list; -1 for a child of the world.
    pub parent: i32,
}

/// A primitive geom, in its body's frame.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GeomInfo {
    /// Index in the body list; -1 for the world (the floor).
    pub body: i32,
    /// `plane`, `sphere`, `capsule`, `ellipsoid`, `cylinder`, `box` or `mesh`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// MuJoCo's size: sphere [r], capsule and cylinder [r, half-length] (along local z), box half-extents.
    pub size: [f64; 3],
    pub pos: [f64; 3],
    /// wxyz
    pub quat: [f64; 4],
    pub rgba: [f32; 4],
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RobotGeometry {
    pub bodies: Vec<BodyInfo>,
    pub geoms: Vec<GeomInfo>,
}

fn kind(t: MjtGeomBase) -> &'static str {
    match t {
        MjtGeomBase::mjGEOM_PLANE => "plane",
        MjtGeomBase::mjGEOM_SPHERE => "sphere",
        MjtGeomBase::mjGEOM_CAPSULE => "capsule",
        MjtGeomBase::mjGEOM_ELLIPSOID => "ellipsoid",
        MjtGeomBase::mjGEOM_CYLINDER => "cylinder",
        MjtGeomBase::mjGEOM_BOX => "box",
        _ => "mesh",
    }
}

/// The geometry of `config`'s model. Body `i` of the list is MuJoCo body `i + 1`, the order of
/// the first 30 rows of every `body_pos` array in the project.
pub fn robot_geometry(config: &RobotConfig) -> Result<RobotGeometry, SimError> {
    let model = config.compile()?;
    let nbody = model.ffi().nbody as usize;
    if nbody != NUM_BODIES + 1 {
        return Err(SimError::Model(format!(
            "expected {} bodies, the model has {}",
            NUM_BODIES + 1,
            nbody
        )));
    }
    let bodies = (1..nbody)
        .map(|b| BodyInfo {
            name: model.id_to_name(MjtObjBase::mjOBJ_BODY, b).unwrap_or("").to_string(),
            parent: model.body_parentid()[b] - 1,
        })
        .collect();
    let geoms = (0..model.ffi().ngeom as usize)
        .map(|g| GeomInfo {
            body: model.geom_bodyid()[g] - 1,
            kind: kind(model.geom_type()[g]),
            size: model.geom_size()[g],
            pos: model.geom_pos()[g],
            quat: model.geom_quat()[g],
            rgba: model.geom_rgba()[g],
        })
        .collect();
    Ok(RobotGeometry { bodies, geoms })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_g1_has_thirty_bodies_and_primitive_geoms() {
        let g = robot_geometry(&RobotConfig::default()).unwrap();
        assert_eq!(g.bodies.len(), 30);
        assert_eq!(g.bodies[0].name, "pelvis");
        assert_eq!(g.bodies[0].parent, -1);
        assert!(g.bodies[1..].iter().all(|b| b.parent >= 0 && (b.parent as usize) < 30));
        assert!(g.geoms.iter().any(|x| x.kind == "plane" && x.body == -1));
        assert!(g.geoms.iter().all(|x| x.kind != "mesh"));
        assert!(g.geoms.iter().filter(|x| x.body >= 0).count() >= 30);
    }
}
