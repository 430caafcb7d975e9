//! The project's G1 MJCF against the public reference description: same kinematics and the
//! same joint-space mass matrix for random configurations (meshes stripped from the reference;
//! its inertials are explicit, so its dynamics do not change).

mod common;

use arena_sim::RobotConfig;
use mujoco_rs::prelude::{MjData, MjModel, MjtObjBase};
use rand::{Rng, SeedableRng};

/// Removes mesh assets, mesh geoms and the mesh directory from an MJCF text.
fn strip_meshes(xml: &str) -> String {
    xml.lines()
        .filter(|l| !(l.contains("<mesh ") || (l.contains("<geom") && l.contains("type=\"mesh\""))))
        .map(|l| l.replace(" meshdir=\"meshes\"", ""))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn kinematics_and_mass_matrix_match_the_reference() {
    let Some(path) = common::shared("reference/g1/g1_29dof.xml") else {
        return;
    };
    let reference = MjModel::from_xml_string(&strip_meshes(&std::fs::read_to_string(&path).unwrap())).unwrap();
    let ours = RobotConfig::default().compile().unwrap();
    let (mo, mr) = (ours.ffi(), reference.ffi());
    assert_eq!((mo.nq, mo.nv, mo.nbody), (mr.nq, mr.nv, mr.nbody));
    // Our joints carry the reference's armature (the sim-to-sim description's 0.01); the
    // kinematic description has none, so M differs by exactly that diagonal.
    let armature = ours.dof_armature().to_vec();
    let body_map: Vec<usize> = (1..mo.nbody as usize)
        .map(|b| {
            let name = ours.id_to_name(MjtObjBase::mjOBJ_BODY, b).unwrap();
            reference
                .name_to_id(MjtObjBase::mjOBJ_BODY, name)
                .unwrap_or_else(|| panic!("{name} in reference"))
        })
        .collect();
    let ranges: Vec<[f64; 2]> = ours.jnt_range()[1..].to_vec();
    let mut d_ours = MjData::new(&ours);
    let mut d_ref = MjData::new(&reference);
    let nv = mo.nv as usize;
    let (mut m_ours, mut m_ref) = (vec![0.0; nv * nv], vec![0.0; nv * nv]);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(42);
    let mut worst: f64 = 0.0;
    for _ in 0..300 {
        let mut q = vec![0.0; mo.nq as usize];
        for v in q.iter_mut().take(3) {
            *v = rng.random_range(-1.0..1.0);
        }
        let quat: [f64; 4] = std::array::from_fn(|_| rng.random_range(-1.0..1.0));
        let n = quat.iter().map(|x| x * x).sum::<f64>().sqrt();
        for k in 0..4 {
            q[3 + k] = quat[k] / n;
        }
        for (j, r) in ranges.iter().enumerate() {
            q[7 + j] = rng.random_range(r[0]..r[1]);
        }
        d_ours.qpos_mut().copy_from_slice(&q);
        d_ref.qpos_mut().copy_from_slice(&q);
        d_ours.forward();
        d_ref.forward();
        for (b, &rb) in body_map.iter().enumerate() {
            for k in 0..3 {
                worst = worst.max((d_ours.xpos()[b + 1][k] - d_ref.xpos()[rb][k]).abs());
            }
            for k in 0..4 {
                worst = worst.max((d_ours.xquat()[b + 1][k] - d_ref.xquat()[rb][k]).abs());
            }
        }
        d_ours.full_m(&mut m_ours).unwrap();
        d_ref.full_m(&mut m_ref).unwrap();
        for i in 0..nv {
            for j in 0..nv {
                let expect = m_ref[i * nv + j] + if i == j { armature[i] } else { 0.0 };
                worst = worst.max((m_ours[i * nv + j] - expect).abs());
            }
        }
    }
    assert!(worst < 1e-9, "largest difference {worst:e}");
}

#[test]
fn joint_dynamics_and_force_limits_match_the_sim_to_sim_description() {
    let Some(path) = common::shared("reference/g1/g1_29dof_freebase.xml") else {
        return;
    };
    let text = std::fs::read_to_string(&path).unwrap();
    let reference = MjModel::from_xml_string(&strip_meshes(&text)).unwrap();
    let ours = RobotConfig::default().compile().unwrap();
    for (j, name) in arena_sim::robot::JOINT_NAMES.iter().enumerate() {
        let rj = reference.name_to_id(MjtObjBase::mjOBJ_JOINT, name).unwrap();
        let (od, rd) = (6 + j, reference.jnt_dofadr()[rj] as usize);
        assert_eq!(ours.dof_armature()[od], reference.dof_armature()[rd], "{name} armature");
        assert_eq!(ours.dof_damping()[od], reference.dof_damping()[rd], "{name} damping");
        assert_eq!(
            ours.dof_frictionloss()[od],
            reference.dof_frictionloss()[rd],
            "{name} frictionloss"
        );
        assert_eq!(ours.jnt_range()[j + 1], reference.jnt_range()[rj], "{name} range");
        assert_eq!(
            ours.jnt_actfrcrange()[j + 1],
            reference.jnt_actfrcrange()[rj],
            "{name} force range"
        );
    }
}
