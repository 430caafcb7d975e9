//! TrackingEnv behaviour: observations for known states, determinism across thread counts and
//! runs, DR reproducibility independent of the env slot, bad actions and instability.

mod common;

use arena_data::NUM_JOINTS;
use arena_sim::dr::DrLevel;
use arena_sim::env::{EpisodeAssignment, EpisodeStatus, FallRule, LieDown, TrackingEnv, TrackingEnvConfig, Trajectory};
use arena_sim::handler::{Field, Handler, NQ, NV};
use arena_sim::motion::{MotionLibrary, MotionState};
use arena_sim::observation::{self, HistoryTiming, PRIVILEGED_STATE_DIM, STATE_DIM};
use arena_sim::policy::{Policy, ReplayPolicy};
use arena_sim::{CONTROL_DT, RobotConfig};
use std::sync::Arc;

fn library() -> Arc<MotionLibrary> {
    let robot = RobotConfig::default();
    Arc::new(MotionLibrary::from_clips(&MotionLibrary::builtin_clips(&robot).unwrap(), &robot).unwrap())
}

fn env(lib: &Arc<MotionLibrary>, n: usize, threads: usize) -> TrackingEnv {
    let config = TrackingEnvConfig {
        num_envs: n,
        threads,
        ..Default::default()
    };
    TrackingEnv::new(config, lib.clone()).unwrap()
}

fn assignment(motion: usize, seed: u64, level: DrLevel) -> EpisodeAssignment {
    EpisodeAssignment {
        motion,
        start_time: 0.5,
        seed,
        dr_level: level,
    }
}

/// Runs `steps` replay steps and returns every env's trajectory.
fn run(env: &mut TrackingEnv, assignments: &[(usize, EpisodeAssignment)], steps: usize) -> Vec<Trajectory> {
    env.reset(assignments).unwrap();
    let mut policy = ReplayPolicy;
    let mut actions = vec![0.0f32; env.num_envs() * NUM_JOINTS];
    for _ in 0..steps {
        policy.act(env, &mut actions);
        env.step(&actions).unwrap();
    }
    (0..env.num_envs()).map(|e| env.trajectory(e).clone()).collect()
}

fn same(a: &Trajectory, b: &Trajectory) -> bool {
    // Bitwise equality of every recorded number.
    let eq = |x: &[f64], y: &[f64]| x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
    eq(&a.rows.qpos, &b.rows.qpos)
        && eq(&a.rows.qvel, &b.rows.qvel)
        && eq(&a.rows.body_pos, &b.rows.body_pos)
        && eq(&a.rows.actions, &b.rows.actions)
}

#[test]
fn bit_identical_across_thread_counts_and_runs() {
    let lib = library();
    let assignments: Vec<_> = (0..6)
        .map(|e| (e, assignment(e, 100 + e as u64, DrLevel::L3)))
        .collect();
    let one = run(&mut env(&lib, 6, 1), &assignments, 120);
    let two = run(&mut env(&lib, 6, 2), &assignments, 120);
    let again = run(&mut env(&lib, 6, 2), &assignments, 120);
    assert_eq!(one[0].len(), 121);
    for e in 0..6 {
        assert!(same(&one[e], &two[e]), "env {e}: 1 vs 2 threads");
        assert!(same(&two[e], &again[e]), "env {e}: run to run");
    }
}

/// A simulator taken over from an env that ran other episodes (DR level 3: other masses,
/// frictions, gains, pushes) runs the next episodes as a fresh one does, bit for bit; one of
/// another size is refused.
#[test]
fn a_simulator_taken_over_runs_episodes_as_a_fresh_one() {
    let lib = library();
    let earlier: Vec<_> = (0..3).map(|e| (e, assignment(e, 40 + e as u64, DrLevel::L3))).collect();
    let mut first = env(&lib, 3, 1);
    run(&mut first, &earlier, 30);
    let handler = first.into_handler();
    let config = TrackingEnvConfig {
        num_envs: 3,
        threads: 1,
        ..Default::default()
    };
    let mut reused = TrackingEnv::with_handler(config.clone(), lib.clone(), handler).unwrap();
    let mut fresh = env(&lib, 3, 1);
    let next: Vec<_> = (0..3)
        .map(|e| {
            (
                e,
                assignment(2 - e, 7 + e as u64, [DrLevel::L0, DrLevel::L1, DrLevel::L2][e]),
            )
        })
        .collect();
    let (a, b) = (run(&mut reused, &next, 40), run(&mut fresh, &next, 40));
    for e in 0..3 {
        assert!(same(&a[e], &b[e]), "env {e} differs on the simulator taken over");
    }
    let other = TrackingEnvConfig { num_envs: 2, ..config };
    let Err(e) = TrackingEnv::with_handler(other, lib, reused.into_handler()) else {
        panic!("a simulator of 3 envs taken for 2");
    };
    assert!(e.to_string().contains("not one for 2 envs"), "{e}");
}

#[test]
fn dr_draw_follows_the_episode_not_the_slot() {
    let lib = library();
    let ep = assignment(1, 777, DrLevel::L3);
    let a = run(&mut env(&lib, 3, 1), &[(0, ep)], 80);
    // Same episode in slot 2, with other episodes in the other slots.
    let b = run(
        &mut env(&lib, 3, 2),
        &[
            (0, assignment(2, 1, DrLevel::L2)),
            (1, assignment(3, 2, DrLevel::L1)),
            (2, ep),
        ],
        80,
    );
    assert!(same(&a[0], &b[2]));
    // A different seed gives a different run at L3 (pushes, noise, masses...).
    let c = run(&mut env(&lib, 1, 1), &[(0, assignment(1, 778, DrLevel::L3))], 80);
    assert!(!same(&a[0], &c[0]));
    // At L0 the seed changes nothing.
    let d0 = run(&mut env(&lib, 1, 1), &[(0, assignment(1, 1, DrLevel::L0))], 40);
    let d1 = run(&mut env(&lib, 1, 1), &[(0, assignment(1, 2, DrLevel::L0))], 40);
    assert!(same(&d0[0], &d1[0]));
}

#[test]
fn reset_observations_equal_the_reference_state() {
    let lib = library();
    let mut e = env(&lib, 1, 1);
    // Squat at t = 1.5 s: a moving reference (non-zero joint velocities).
    let a = EpisodeAssignment {
        motion: 1,
        start_time: 1.5,
        seed: 0,
        dr_level: DrLevel::L0,
    };
    let obs = e.reset(&[(0, a)]).unwrap().clone();
    let mut s = MotionState::default();
    lib.motions[1].state_at(1.5, &mut s);
    let robot = RobotConfig::default();
    // state: joint offsets from q0, joint velocities, gravity in the root frame, ω·0.25.
    let mut reference_row = [0.0f32; STATE_DIM];
    observation::reference_state_row(&s, &robot, &mut reference_row);
    for j in 0..2 * NUM_JOINTS {
        assert!((obs.state[j] - reference_row[j]).abs() < 1e-6, "state[{j}]");
    }
    let g = &obs.state[58..61];
    assert!(
        (g[2] + 1.0).abs() < 1e-3,
        "upright robot sees gravity straight down: {g:?}"
    );
    assert!(obs.last_action.iter().all(|v| *v == 0.0));
    assert!(
        obs.history_actor.iter().all(|v| *v == 0.0),
        "history is zero after reset"
    );
    // privileged_state: positions and rotations are the reference's (FK of the same qpos).
    let mut reference_priv = [0.0f32; PRIVILEGED_STATE_DIM];
    observation::privileged_state(
        &s.body_pos,
        &s.body_rot,
        &s.body_vel,
        &s.body_ang_vel,
        &mut reference_priv,
    );
    for i in 0..(1 + 90 + 186) {
        assert!(
            (obs.privileged_state[i] - reference_priv[i]).abs() < 1e-5,
            "privileged[{i}]"
        );
    }
    // The robot's root velocity is the reference's (set from it at reset).
    let mut rv = [0.0; 3];
    e.handler().read_batch(Field::RootVel, &mut rv).unwrap();
    for k in 0..3 {
        assert!((rv[k] - s.body_vel[0][k]).abs() < 1e-12);
    }
    let mut body_pos = vec![0.0f32; 3 * 31];
    e.handler().read_batch_f32(Field::BodyPos, &mut body_pos).unwrap();
    for b in 0..31 {
        for c in 0..3 {
            assert!((body_pos[3 * b + c] as f64 - s.body_pos[b][c]).abs() < 1e-6, "body {b}");
        }
    }
    assert!(e.handler().read_batch_f32(Field::BodyPos, &mut body_pos[..5]).is_err());
}

#[test]
fn history_timing_conventions() {
    let lib = library();
    let a = assignment(2, 0, DrLevel::L0);
    let actions = [0.2f32; NUM_JOINTS];
    for (timing, expect_first) in [(HistoryTiming::Previous, 0.0f32), (HistoryTiming::IncludeCurrent, 1.0)] {
        let config = TrackingEnvConfig {
            history: timing,
            ..Default::default()
        };
        let mut e = TrackingEnv::new(config, lib.clone()).unwrap();
        e.reset(&[(0, a)]).unwrap();
        let (obs, _) = e.step(&actions).unwrap();
        assert_eq!(obs.last_action[0], 1.0, "last_action is a5 = 5a");
        // Actions history, newest first: training holds t−1 (zeros after reset), MI holds t.
        assert_eq!(obs.history_actor[0], expect_first, "{timing:?}");
        let (obs, _) = e.step(&actions).unwrap();
        assert_eq!(obs.history_actor[0], 1.0, "{timing:?}");
        // dof_pos history (offset 128) newest frame equals the state's dof_pos for MI timing.
        if timing == HistoryTiming::IncludeCurrent {
            assert_eq!(obs.history_actor[128], obs.state[0]);
        } else {
            assert_ne!(obs.history_actor[128], obs.state[0]);
        }
    }
}

/// Every env's `history_actor` row, step after step, is the frames its `state` and
/// `last_action` rows showed (newest first, zeros before the episode), under both timings, with
/// observation noise on, an episode that ends and restarts and one refused action: the rows
/// written while the backend steps (`write_rows_ahead`) and those written after it add up to
/// the convention.
#[test]
fn history_rows_are_the_frames_the_state_rows_showed() {
    use arena_sim::observation::{HISTORY_ACTOR_DIM, HISTORY_FRAMES};
    let lib = library();
    // (state, last_action) of one frame, as the history's groups take them.
    type Frame = (Vec<f32>, Vec<f32>);
    let frame = |obs: &arena_sim::env::ObservationBatch, e: usize| -> Frame {
        (
            obs.state[e * STATE_DIM..(e + 1) * STATE_DIM].to_vec(),
            obs.last_action[e * NUM_JOINTS..(e + 1) * NUM_JOINTS].to_vec(),
        )
    };
    // The row the convention gives for frames newest first.
    let row = |frames: &[Frame]| -> Vec<f32> {
        let group = |pick: &dyn Fn(&Frame) -> Vec<f32>, width: usize| -> Vec<f32> {
            (0..HISTORY_FRAMES)
                .flat_map(|k| frames.get(k).map(pick).unwrap_or(vec![0.0; width]))
                .collect()
        };
        let mut out = group(&|f| f.1.clone(), NUM_JOINTS);
        out.extend(group(&|f| f.0[61..64].to_vec(), 3));
        out.extend(group(&|f| f.0[..NUM_JOINTS].to_vec(), NUM_JOINTS));
        out.extend(group(&|f| f.0[NUM_JOINTS..2 * NUM_JOINTS].to_vec(), NUM_JOINTS));
        out.extend(group(&|f| f.0[58..61].to_vec(), 3));
        assert_eq!(out.len(), HISTORY_ACTOR_DIM);
        out
    };
    for timing in [HistoryTiming::Previous, HistoryTiming::IncludeCurrent] {
        let n = 3;
        let config = TrackingEnvConfig {
            num_envs: n,
            threads: 2,
            history: timing,
            ..Default::default()
        };
        let mut e = TrackingEnv::new(config, lib.clone()).unwrap();
        // Env 1 starts 0.1 s before its motion's end: it ends after a few steps and restarts.
        let short = lib.motions[1].length_s - 0.1;
        let start = |env: usize| EpisodeAssignment {
            start_time: if env == 1 { short } else { 0.5 },
            ..assignment(env, 11 + env as u64, DrLevel::L2)
        };
        let all: Vec<_> = (0..n).map(|env| (env, start(env))).collect();
        let obs = e.reset(&all).unwrap().clone();
        let mut frames: Vec<Vec<Frame>> = vec![Vec::new(); n];
        let mut running = vec![true; n];
        if timing == HistoryTiming::IncludeCurrent {
            for (env, f) in frames.iter_mut().enumerate() {
                f.insert(0, frame(&obs, env));
            }
        }
        let mut restarted = false;
        for step in 1..=12 {
            let mut actions: Vec<f32> = (0..n * NUM_JOINTS).map(|i| 0.01 * ((i + step) % 7) as f32).collect();
            if step == 8 {
                actions[2 * NUM_JOINTS] = f32::NAN; // env 2's action is refused
            }
            let (obs, infos) = e.step(&actions).unwrap();
            let (obs, infos) = (obs.clone(), infos.to_vec());
            for env in 0..n {
                if !running[env] {
                    continue;
                }
                let got = &obs.history_actor[env * HISTORY_ACTOR_DIM..(env + 1) * HISTORY_ACTOR_DIM];
                if let EpisodeStatus::Failed(_) = infos[env].status {
                    // Refused: the frames it completed, newest first, under either convention.
                    assert_eq!(
                        got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        row(&frames[env]).iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        "{timing:?}: env {env} refused at step {step}"
                    );
                    running[env] = false;
                    continue;
                }
                let now = frame(&obs, env);
                if timing == HistoryTiming::IncludeCurrent {
                    frames[env].insert(0, now.clone());
                }
                let want = row(&frames[env]);
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{timing:?}: env {env} after step {step}"
                );
                if timing == HistoryTiming::Previous {
                    frames[env].insert(0, now);
                }
                running[env] = infos[env].status == EpisodeStatus::Running;
            }
            if infos[1].status == EpisodeStatus::Truncated {
                running[1] = true;
                let obs = e.reset(&[(1, start(1))]).unwrap().clone();
                frames[1].clear();
                if timing == HistoryTiming::IncludeCurrent {
                    frames[1].insert(0, frame(&obs, 1));
                }
                restarted = true;
            }
        }
        assert!(restarted, "env 1's episode ended and restarted");
        assert!(!running[2], "env 2's refused action ended its episode");
    }
}

/// A step that fails in the physics (written ahead as if it would push a frame) leaves the env's
/// `history_actor` row as the frames it completed, as a refused action does: the row from before
/// the step when the history includes the current frame.
#[test]
fn a_step_that_fails_in_the_physics_leaves_the_history_row_of_completed_frames() {
    use arena_sim::observation::HISTORY_ACTOR_DIM;
    let lib = library();
    for timing in [HistoryTiming::Previous, HistoryTiming::IncludeCurrent] {
        let config = TrackingEnvConfig {
            num_envs: 2,
            threads: 2,
            history: timing,
            ..Default::default()
        };
        let mut e = TrackingEnv::new(config, lib.clone()).unwrap();
        let all: Vec<_> = (0..2).map(|env| (env, assignment(env, 3, DrLevel::L0))).collect();
        e.reset(&all).unwrap();
        // An absurd joint velocity makes MuJoCo's accelerations blow up in env 0's first step.
        let mut qpos = [0.0; NQ];
        qpos[2] = 0.8;
        qpos[3] = 1.0;
        let mut qvel = [0.0; NV];
        qvel[10] = 1e30;
        let before = e.set_start_states(&[(0, qpos, qvel)]).unwrap().history_actor[..HISTORY_ACTOR_DIM].to_vec();
        if timing == HistoryTiming::IncludeCurrent {
            assert!(before.iter().any(|&v| v != 0.0), "the start frame is in the row");
        }
        let (obs, infos) = e.step(&[0.0; 2 * NUM_JOINTS]).unwrap();
        match &infos[0].status {
            EpisodeStatus::Failed(reason) => assert!(reason.contains("MuJoCo instability"), "{reason}"),
            other => panic!("{timing:?}: expected a failure, got {other:?}"),
        }
        assert_eq!(infos[1].status, EpisodeStatus::Running);
        assert_eq!(
            obs.history_actor[..HISTORY_ACTOR_DIM]
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>(),
            before.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{timing:?}"
        );
    }
}

/// Each robot group's term reads only what `ReadoutParts::of_group` names: from a readout whose
/// every value is NaN before it reads those parts, it writes what a whole readout gives, for
/// every group and every body as the anchor (the pelvis, the virtual head and the rest).
#[test]
fn robot_groups_read_only_their_readout_parts() {
    use arena_g1::Group;
    use arena_sim::robot_interface::{self as robot, ReadoutParts, RobotReadout};
    let lib = library();
    let config = TrackingEnvConfig {
        num_envs: 2,
        robot: RobotConfig {
            imu_sensors: true,
            ..RobotConfig::default()
        },
        ..Default::default()
    };
    let mut e = TrackingEnv::new(config, lib.clone()).unwrap();
    e.reset(&[(0, assignment(3, 1, DrLevel::L0)), (1, assignment(4, 2, DrLevel::L0))])
        .unwrap();
    let mut policy = ReplayPolicy;
    let mut actions = vec![0.0f32; 2 * NUM_JOINTS];
    for _ in 0..3 {
        policy.act(&e, &mut actions);
        e.step(&actions).unwrap();
    }
    let mut reference = MotionState::default();
    lib.motions[4].state_at(0.7, &mut reference);
    let whole = RobotReadout::read(e.handler(), 1, true, true);
    assert!(whole.accelerometer.iter().all(|v| v.is_finite()));
    let poisoned = RobotReadout {
        qpos: [f64::NAN; NQ],
        qvel: [f64::NAN; NV],
        torque: [f64::NAN; NUM_JOINTS],
        body_pos: [f64::NAN; 3 * arena_sim::robot::NUM_BODIES_EXT],
        body_rot: [f64::NAN; 4 * arena_sim::robot::NUM_BODIES_EXT],
        body_ang_vel: [f64::NAN; 3 * arena_sim::robot::NUM_BODIES_EXT],
        accelerometer: [f64::NAN; 6],
    };
    let term = |group: Group, r: &RobotReadout, anchor: usize| -> Vec<u32> {
        let mut out = vec![0.0f32; group.size()];
        match group {
            Group::Imu => robot::imu_pelvis(r, &mut out),
            Group::ImuTorso => robot::imu_torso(r, &mut out),
            Group::Motors => robot::motors(r, &mut out),
            Group::BaseLinVel => robot::base_lin_vel(r, &mut out),
            Group::MotionCommand => robot::motion_command(&reference, &mut out),
            Group::MotionAnchorPosB => robot::motion_anchor_pos_b(r, &reference, anchor, &mut out),
            Group::MotionAnchorOriB => robot::motion_anchor_ori_b(r, &reference, anchor, &mut out),
            Group::MotionAnchorPoseW => robot::motion_anchor_pose_w(&reference, anchor, &mut out),
            // From the env's batch, not the readout.
            Group::State | Group::PrivilegedState | Group::LastAction | Group::HistoryActor => {}
        }
        out.iter().map(|v| v.to_bits()).collect()
    };
    for info in arena_g1::GROUPS {
        for anchor in 0..arena_sim::robot::NUM_BODIES_EXT {
            let mut partial = poisoned.clone();
            let parts = ReadoutParts::of_group(info.group, anchor);
            partial.read_parts(e.handler(), 1, &parts);
            let want = term(info.group, &whole, anchor);
            assert!(want.iter().all(|b| f32::from_bits(*b).is_finite()), "{}", info.name);
            assert_eq!(
                term(info.group, &partial, anchor),
                want,
                "{} anchored at body {anchor}",
                info.name
            );
        }
    }
    // Every part at once is the whole readout.
    let mut all = poisoned.clone();
    all.read_parts(e.handler(), 1, &ReadoutParts::ALL);
    assert_eq!(format!("{all:?}"), format!("{whole:?}"));
}

#[test]
fn bad_actions_fail_only_their_env() {
    let lib = library();
    let mut e = env(&lib, 3, 2);
    let all: Vec<_> = (0..3).map(|i| (i, assignment(i, i as u64, DrLevel::L0))).collect();
    e.reset(&all).unwrap();
    let err = e.step(&[0.0; 10]).unwrap_err().to_string();
    assert!(err.contains("3×29") && err.contains("got 10"), "{err}");
    let mut actions = vec![0.0f32; 3 * NUM_JOINTS];
    e.step(&actions).unwrap();
    let before = e.trajectory(1).rows.qpos.clone();
    actions[NUM_JOINTS + 4] = f32::NAN;
    let (_, infos) = e.step(&actions).unwrap();
    assert_eq!(
        infos[1].status,
        EpisodeStatus::Failed("non-finite action at step 1 (joint 4: NaN)".into())
    );
    assert_eq!(infos[0].status, EpisodeStatus::Running);
    assert_eq!(infos[2].status, EpisodeStatus::Running);
    assert_eq!(
        e.trajectory(1).rows.qpos,
        before,
        "nothing of a failed step is recorded"
    );
    actions[NUM_JOINTS + 4] = 0.0;
    let (_, infos) = e.step(&actions).unwrap();
    assert!(infos[1].status.is_done() && infos[0].status == EpisodeStatus::Running);
    // The env is reusable after reset.
    e.reset(&[(1, assignment(1, 9, DrLevel::L0))]).unwrap();
    let (_, infos) = e.step(&actions).unwrap();
    assert_eq!(infos[1].status, EpisodeStatus::Running);
}

#[test]
fn simulator_instability_fails_the_env_with_a_reason() {
    let lib = library();
    let mut e = env(&lib, 2, 1);
    let all: Vec<_> = (0..2).map(|i| (i, assignment(i, 0, DrLevel::L0))).collect();
    e.reset(&all).unwrap();
    // An absurd joint velocity makes MuJoCo's accelerations blow up.
    let mut h = arena_sim::MujocoHandler::new(RobotConfig::default(), 2, 1).unwrap();
    let mut qpos = [0.0; NQ];
    qpos[2] = 0.8;
    qpos[3] = 1.0;
    let mut qvel = [0.0; NV];
    qvel[10] = 1e30;
    h.set_qpos_qvel(1, &qpos, &qvel).unwrap();
    h.set_qpos_qvel(0, &qpos, &[0.0; NV]).unwrap();
    h.step(&[0.0; 2 * NUM_JOINTS]).unwrap();
    match h.health(1) {
        arena_sim::handler::EnvHealth::Failed(reason) => assert!(reason.contains("MuJoCo instability"), "{reason}"),
        other => panic!("expected failure, got {other:?}"),
    }
    assert_eq!(*h.health(0), arena_sim::handler::EnvHealth::Ok);
    let err = h.set_qpos_qvel(0, &qpos, &[f64::NAN; NV]).unwrap_err().to_string();
    assert!(err.contains("non-finite"), "{err}");
    // Env 1 is reusable after a reset.
    h.set_qpos_qvel(1, &qpos, &[0.0; NV]).unwrap();
    h.step(&[0.0; 2 * NUM_JOINTS]).unwrap();
    assert_eq!(*h.health(1), arena_sim::handler::EnvHealth::Ok);
    // A failure later than the first substep names the time its state had reached, not the
    // time of MuJoCo's reset of the diverged data (set back to 0, then one substep integrated):
    // this one blows up in the second substep.
    qvel[10] = 1e5;
    h.set_qpos_qvel(1, &qpos, &qvel).unwrap();
    h.step(&[0.0; 2 * NUM_JOINTS]).unwrap();
    match h.health(1) {
        arena_sim::handler::EnvHealth::Failed(reason) => assert!(reason.ends_with("at t = 0.010 s"), "{reason}"),
        other => panic!("expected failure, got {other:?}"),
    }
}

#[test]
fn episodes_truncate_at_motion_end_and_fall_rule_is_optional() {
    let lib = library();
    let mut e = env(&lib, 1, 1);
    let length = lib.motions[0].length_s;
    let a = EpisodeAssignment {
        motion: 0,
        start_time: length - 5.5 * CONTROL_DT,
        seed: 0,
        dr_level: DrLevel::L0,
    };
    e.reset(&[(0, a)]).unwrap();
    let actions = [0.0f32; NUM_JOINTS];
    let mut steps = 0;
    while e.infos()[0].status == EpisodeStatus::Running {
        e.step(&actions).unwrap();
        steps += 1;
    }
    assert_eq!(steps, 6);
    assert_eq!(e.infos()[0].status, EpisodeStatus::Truncated);
    assert_eq!(e.trajectory(0).len(), 7);
    // With a fall rule the zero policy (which cannot balance) ends early.
    let config = TrackingEnvConfig {
        fall_rule: Some(FallRule::MinRootHeight(0.5)),
        ..Default::default()
    };
    let mut e = TrackingEnv::new(config, lib.clone()).unwrap();
    e.reset(&[(0, assignment(1, 0, DrLevel::L0))]).unwrap();
    while e.infos()[0].status == EpisodeStatus::Running {
        e.step(&actions).unwrap();
    }
    assert_eq!(e.infos()[0].status, EpisodeStatus::Fell);
    assert!(e.trajectory(0).rows.qpos[(e.trajectory(0).len() - 1) * NQ + 2] < 0.5);
}

/// A fall rule is looked at after a step, never on the reset row (as mjlab's terminations): a
/// start that already breaks it (a crawl clip under `min_root_height`) runs one step, so the
/// episode has a step of the agent's to score.
#[test]
fn the_fall_rule_is_not_applied_to_the_reset_row() {
    let lib = library();
    let config = TrackingEnvConfig {
        fall_rule: Some(FallRule::MinRootHeight(5.0)),
        ..Default::default()
    };
    let mut e = TrackingEnv::new(config, lib.clone()).unwrap();
    e.reset(&[(0, assignment(1, 0, DrLevel::L0))]).unwrap();
    assert_eq!(e.infos()[0].status, EpisodeStatus::Running);
    assert_eq!(e.trajectory(0).len(), 1);
    e.step(&[0.0f32; NUM_JOINTS]).unwrap();
    assert_eq!(e.infos()[0].status, EpisodeStatus::Fell);
    assert_eq!(e.trajectory(0).len(), 2);
}

#[test]
fn state_dict_round_trip() {
    let lib = library();
    let mut e = env(&lib, 1, 1);
    e.reset(&[(0, assignment(3, 0, DrLevel::L0))]).unwrap();
    e.step(&[0.1; NUM_JOINTS]).unwrap();
    let states = e.handler().get_states();
    let s = &states[0];
    assert_eq!(s.dof_pos.len(), 29);
    assert_eq!(s.bodies.len(), 31);
    assert!(s.bodies.contains_key("head_link") && s.bodies.contains_key("torso_link"));
    let head = s.bodies["head_link"].pos;
    let torso = s.bodies["torso_link"];
    let expect = arena_sim::math::add(&torso.pos, &arena_sim::math::rotate(&torso.rot, &[0.0, 0.0, 0.35]));
    assert!((0..3).all(|k| (head[k] - expect[k]).abs() < 1e-12));
    let mut h = arena_sim::MujocoHandler::new(RobotConfig::default(), 1, 1).unwrap();
    h.set_states(&states).unwrap();
    let back = h.get_states();
    assert_eq!(back[0].dof_pos, s.dof_pos);
    assert_eq!(back[0].dof_pos_target, s.dof_pos_target);
    for (name, b) in &s.bodies {
        let c = back[0].bodies[name];
        assert!((0..3).all(|k| (b.pos[k] - c.pos[k]).abs() < 1e-12), "{name}");
        assert!((0..3).all(|k| (b.vel[k] - c.vel[k]).abs() < 1e-9), "{name} velocity");
    }
    let mut missing = states.clone();
    missing[0].dof_vel.remove("left_knee_joint");
    let err = h.set_states(&missing).unwrap_err().to_string();
    assert!(err.contains("dof_vel has no entry for joint left_knee_joint"), "{err}");
}

#[test]
fn reference_observations_follow_the_backward_convention() {
    let lib = library();
    let robot = RobotConfig::default();
    let m = &lib.motions[3]; // torso twist: the root turns in the world
    let r = observation::reference_observations(m, &robot);
    assert_eq!(r.rows, m.num_frames - 1, "rows at k·0.02 for k < ceil(length / 0.02)");
    assert_eq!(r.state.len(), r.rows * STATE_DIM);
    assert_eq!(r.privileged_state.len(), r.rows * PRIVILEGED_STATE_DIM);
    let mut s = MotionState::default();
    for k in [0, 77, r.rows - 1] {
        m.state_at(k as f64 * CONTROL_DT, &mut s);
        let row = &r.state[k * STATE_DIM..(k + 1) * STATE_DIM];
        for j in 0..NUM_JOINTS {
            assert!((row[j] as f64 - (s.qpos[7 + j] - robot.default_pose[j])).abs() < 1e-6);
        }
        // World-frame, unscaled root angular velocity (not body frame × 0.25).
        for c in 0..3 {
            assert!((row[61 + c] as f64 - s.body_ang_vel[0][c]).abs() < 1e-6, "row {k}");
        }
        assert!((r.privileged_state[k * PRIVILEGED_STATE_DIM] as f64 - s.qpos[2]).abs() < 1e-6);
    }
}

#[test]
fn dr_level_1_changes_the_physics_of_its_env_only() {
    let lib = library();
    let mut e = env(&lib, 2, 1);
    // Same motion, same start; env 0 at L1, env 1 at L0.
    let actions = vec![0.0f32; 2 * NUM_JOINTS];
    e.reset(&[(0, assignment(0, 5, DrLevel::L1)), (1, assignment(0, 5, DrLevel::L0))])
        .unwrap();
    for _ in 0..30 {
        e.step(&actions).unwrap();
    }
    assert_ne!(
        e.trajectory(0).rows.qpos,
        e.trajectory(1).rows.qpos,
        "randomised masses and friction change the motion"
    );
    // Resetting env 0 to L0 restores the nominal model: it now matches env 1 exactly.
    e.reset(&[(0, assignment(0, 5, DrLevel::L0)), (1, assignment(0, 5, DrLevel::L0))])
        .unwrap();
    for _ in 0..30 {
        e.step(&actions).unwrap();
    }
    assert_eq!(e.trajectory(0).rows.qpos, e.trajectory(1).rows.qpos);
}

#[test]
fn bad_assignments_are_rejected_before_anything_resets() {
    let lib = library();
    let mut e = env(&lib, 2, 1);
    e.reset(&[(0, assignment(0, 0, DrLevel::L0))]).unwrap();
    e.step(&[0.0; 2 * NUM_JOINTS]).unwrap();
    let len = e.trajectory(0).len();
    let bad_time = EpisodeAssignment {
        start_time: 99.0,
        ..assignment(1, 0, DrLevel::L0)
    };
    let err = e
        .reset(&[(0, assignment(2, 0, DrLevel::L0)), (1, bad_time)])
        .unwrap_err()
        .to_string();
    assert!(err.contains("start time 99 outside motion squat"), "{err}");
    assert_eq!(e.trajectory(0).len(), len, "env 0 was not reset");
    let err = e.reset(&[(5, assignment(0, 0, DrLevel::L0))]).unwrap_err().to_string();
    assert!(err.contains("env 5 out of range"), "{err}");
    let err = e.reset(&[(0, assignment(42, 0, DrLevel::L0))]).unwrap_err().to_string();
    assert!(err.contains("motion 42 out of range"), "{err}");
}

#[test]
fn a_bad_assignment_fails_alone_in_a_batched_start() {
    let lib = library();
    let good = [(0, assignment(0, 3, DrLevel::L3)), (2, assignment(2, 4, DrLevel::L3))];
    let bad = EpisodeAssignment {
        start_time: 99.0,
        ..assignment(1, 0, DrLevel::L0)
    };
    let mut e = env(&lib, 3, 1);
    e.reset(&[(1, assignment(1, 0, DrLevel::L0))]).unwrap();
    e.step(&[0.0; 3 * NUM_JOINTS]).unwrap();
    let env1_len = e.trajectory(1).len();
    let failed = e.reset_isolating_failures(&[good[0], (1, bad), good[1]]);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].0, 1);
    let why = failed[0].1.to_string();
    assert!(why.contains("start time 99 outside motion squat"), "{why}");
    assert_eq!(e.trajectory(1).len(), env1_len, "the refused env was left as it was");
    // The envs that started are exactly as a reset of them alone makes them.
    let mut alone = env(&lib, 3, 1);
    alone.reset(&good).unwrap();
    let mut policy = ReplayPolicy;
    let mut actions = vec![0.0f32; 3 * NUM_JOINTS];
    for _ in 0..5 {
        policy.act(&alone, &mut actions);
        alone.step(&actions).unwrap();
        e.step(&actions).unwrap();
    }
    for (env, _) in good {
        assert_eq!(e.infos()[env].status, EpisodeStatus::Running, "env {env}");
        assert!(same(e.trajectory(env), alone.trajectory(env)), "env {env}");
    }
    assert!(e.reset_isolating_failures(&[]).is_empty());
}

#[test]
fn contact_forces_carry_the_robot_on_its_feet() {
    // Reference replay of the built-in `stand` motion: the robot stands on its feet, so the
    // ground's vertical push on the two ankle-roll links balances the weight, other bodies touch
    // nothing, and every contact force has a partner of opposite sign on the ground.
    let lib = library();
    let stand = lib
        .motions
        .iter()
        .position(|m| m.name == "stand")
        .expect("built-in stand motion");
    let mut env = env(&lib, 1, 1);
    let a = EpisodeAssignment {
        motion: stand,
        start_time: 0.0,
        seed: 1,
        dr_level: DrLevel::L0,
    };
    env.reset(&[(0, a)]).unwrap();
    let mut policy = ReplayPolicy;
    let mut actions = vec![0.0f32; NUM_JOINTS];
    let mut force = vec![0.0; Field::BodyContactForce.width()];
    let (mut feet_z, mut others, mut steps) = (0.0, 0.0f64, 0);
    for _ in 0..25 {
        policy.act(&env, &mut actions);
        env.step(&actions).unwrap();
        env.handler().read_batch(Field::BodyContactForce, &mut force).unwrap();
        let (left, right) = (6, 12); // the ankle-roll links in BFM-Zero's body order
        feet_z += force[3 * left + 2] + force[3 * right + 2];
        for b in (0..31).filter(|&b| b != left && b != right) {
            others = others.max(force[3 * b..3 * b + 3].iter().map(|v| v.abs()).fold(0.0, f64::max));
        }
        steps += 1;
    }
    let weight = 9.81 * env.handler().total_mass();
    let mean_feet_z = feet_z / steps as f64;
    assert!(
        (mean_feet_z - weight).abs() < 0.15 * weight,
        "feet carry {mean_feet_z:.1} N of {weight:.1} N"
    );
    assert!(others < 1.0, "a non-foot body touches something: {others} N");
}

#[test]
fn lying_down_starts_turn_the_reference_root_about_world_x() {
    let lib = library();
    let mut env = env(&lib, 3, 1);
    let a = assignment(0, 5, DrLevel::L0);
    env.reset_with_starts(&[(0, a, None), (1, a, Some(LieDown::Plus)), (2, a, Some(LieDown::Minus))])
        .unwrap();
    let mut qpos = vec![0.0; 3 * NQ];
    env.handler().read_batch(Field::Qpos, &mut qpos).unwrap();
    let (upright, plus, minus) = (&qpos[..NQ], &qpos[NQ..2 * NQ], &qpos[2 * NQ..]);
    assert!(upright[2] > 0.7, "reference start stands: root z {}", upright[2]);
    assert_eq!((plus[2], minus[2]), (0.5, 0.5));
    // Joints are the reference's; the root's up axis now lies in the ground plane.
    assert_eq!(&plus[7..], &upright[7..]);
    let up = |q: &[f64]| arena_sim::math::rotate(&q[3..7].try_into().unwrap(), &[0.0, 0.0, 1.0]);
    assert!(
        up(plus)[2].abs() < 0.2 && up(minus)[2].abs() < 0.2,
        "{:?} {:?}",
        up(plus),
        up(minus)
    );
    assert!(
        (up(plus)[1] + up(minus)[1]).abs() < 1e-9 && up(plus)[1].abs() > 0.9,
        "opposite sides"
    );
    // Gravity seen by the robot follows: mostly sideways in its own frame.
    let obs = env.observations();
    let g = |e: usize| obs.state[e * STATE_DIM + 58..e * STATE_DIM + 61].to_vec();
    assert!(g(0)[2] < -0.9 && g(1)[2].abs() < 0.2, "{:?} {:?}", g(0), g(1));
}

/// Dataset exports hand out `privileged_state` recomputed from a trajectory's qpos and qvel
/// (`arena_sim::recorded`): it must be the row the env produced during the episode, under DR
/// level 3 too (the episode's own draw moves the torso's centre of mass, where MuJoCo reports
/// its velocity).
#[test]
fn privileged_state_recomputed_from_recorded_states_matches_the_episode() {
    use arena_sim::recorded::RecordedObserver;
    let lib = library();
    let mut e = env(&lib, 2, 1);
    e.reset(&[(0, assignment(1, 7, DrLevel::L0)), (1, assignment(3, 9, DrLevel::L3))])
        .unwrap();
    let mut policy = ReplayPolicy;
    let mut actions = vec![0.0f32; 2 * NUM_JOINTS];
    let mut seen: Vec<Vec<f32>> = vec![e.observations().privileged_state.clone()];
    for _ in 0..60 {
        policy.act(&e, &mut actions);
        e.step(&actions).unwrap();
        seen.push(e.observations().privileged_state.clone());
    }
    let mut observer = RecordedObserver::new(RobotConfig::default()).unwrap();
    let mut worst = 0.0f32;
    for slot in 0..2 {
        let t = e.trajectory(slot);
        assert_eq!(t.len(), seen.len());
        let mut out = vec![0.0f32; t.len() * PRIVILEGED_STATE_DIM];
        observer
            .privileged_states(t.dr_level, t.seed, &t.rows.qpos, &t.rows.qvel, &mut out)
            .unwrap();
        for (k, row) in out.chunks_exact(PRIVILEGED_STATE_DIM).enumerate() {
            let want = &seen[k][slot * PRIVILEGED_STATE_DIM..(slot + 1) * PRIVILEGED_STATE_DIM];
            for (a, b) in row.iter().zip(want) {
                worst = worst.max((a - b).abs() / b.abs().max(1.0));
            }
        }
    }
    println!("largest relative difference of recomputed privileged_state: {worst:e}");
    assert!(worst <= 1e-6, "recomputed privileged_state differs by {worst}");
}

#[test]
fn without_gains_and_delay_an_action_acts_at_once() {
    let lib = library();
    // A seed whose level-3 draw delays the control by one step.
    let seed = (0..64)
        .find(|&s| arena_sim::dr::draw(DrLevel::L3, s).control_delay == 1)
        .unwrap();
    let first_step = |gains_and_delay: bool, action: f32| {
        let config = TrackingEnvConfig {
            dr_gains_and_delay: gains_and_delay,
            ..Default::default()
        };
        let mut e = TrackingEnv::new(config, lib.clone()).unwrap();
        e.reset(&[(0, assignment(1, seed, DrLevel::L3))]).unwrap();
        e.step(&[action; NUM_JOINTS]).unwrap();
        e.trajectory(0).rows.qpos[NQ..].to_vec()
    };
    // The arena's level 3 executes the previous (zero) action first ...
    assert_eq!(first_step(true, 0.5), first_step(true, 0.0));
    // ... BFM-Zero's set executes the action of the step itself.
    assert_ne!(first_step(false, 0.5), first_step(false, 0.0));
}

/// A reset with start states in one call ends where a reset followed by `set_start_states`
/// ends (the same trajectories after a few steps, bit for bit), and a start state for an env
/// the call does not reset is refused before anything changes.
#[test]
fn a_reset_with_start_states_equals_a_reset_then_its_start_states() {
    let lib = library();
    let n = 3;
    let (mut together, mut apart) = (env(&lib, n, 2), env(&lib, n, 2));
    let assignments: Vec<(usize, EpisodeAssignment)> = (0..n)
        .map(|e| (e, assignment(e % lib.len(), 10 + e as u64, DrLevel::L2)))
        .collect();
    let states: Vec<(usize, [f64; NQ], [f64; NV])> = [0, 2]
        .into_iter()
        .map(|e| {
            let a = assignments[e].1;
            let mut reference = MotionState::default();
            lib.motions[a.motion].state_at(a.start_time, &mut reference);
            let (mut qpos, mut qvel) = (reference.qpos, reference.qvel());
            qpos[2] += 0.01;
            qpos[7 + e] += 0.05;
            qvel[0] += 0.1;
            (e, qpos, qvel)
        })
        .collect();
    together.reset_with_start_states(&assignments, &states).unwrap();
    apart.reset(&assignments).unwrap();
    apart.set_start_states(&states).unwrap();
    let mut policy = ReplayPolicy;
    let mut actions = vec![0.0f32; n * NUM_JOINTS];
    for _ in 0..5 {
        policy.act(&together, &mut actions);
        together.step(&actions).unwrap();
        apart.step(&actions).unwrap();
    }
    for e in 0..n {
        assert!(same(together.trajectory(e), apart.trajectory(e)), "env {e}");
    }
    let moved = (0..n).map(|e| together.trajectory(e).len()).collect::<Vec<_>>();
    let err = together
        .reset_with_start_states(&assignments[..1], &states[1..])
        .unwrap_err()
        .to_string();
    assert!(err.contains("env 2: a start state needs a reset of that env"), "{err}");
    let after = (0..n).map(|e| together.trajectory(e).len()).collect::<Vec<_>>();
    assert_eq!(after, moved, "nothing was reset");
}

/// Recording behind the physics (each running env's row appended during its next step)
/// records the same rows as recording in the refresh, bit for bit, for episodes that end every
/// way: followed to the end of the run, fallen, failed on a bad action, stopped, reset again.
#[test]
fn recording_behind_the_physics_records_the_same_rows() {
    let lib = library();
    let config = TrackingEnvConfig {
        num_envs: 6,
        threads: 2,
        fall_rule: Some(FallRule::MinRootHeight(0.5)),
        ..Default::default()
    };
    let mut inline = TrackingEnv::new(config.clone(), lib.clone()).unwrap();
    let mut behind = TrackingEnv::new(config, lib.clone()).unwrap();
    behind.record_behind_physics(true);
    let a = common::recordings_of_a_mixed_run(&mut inline, 60);
    let b = common::recordings_of_a_mixed_run(&mut behind, 60);
    assert_eq!(a.len(), b.len());
    let statuses: Vec<_> = a.iter().map(|(_, s, _)| s.clone()).collect();
    for kind in ["Fell", "Failed", "Truncated", "Running"] {
        assert!(
            statuses.iter().any(|s| format!("{s:?}").starts_with(kind)),
            "the scenario ends no episode as {kind}: {statuses:?}"
        );
    }
    for ((e, s, t), (f, u, r)) in a.iter().zip(&b) {
        assert_eq!((e, s), (f, u));
        assert!(!t.is_empty(), "env {e} ({s:?}) recorded no row");
        assert!(common::same_recording(t, r), "env {e} ({s:?}): the recordings differ");
    }
    assert!(behind.timings().record_s > 0.0 && inline.timings().record_s == 0.0);
}
