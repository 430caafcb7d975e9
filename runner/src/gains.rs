//! The PD gains of a session in the joint-position action mode: what an agent declares in
//! `connect` (its own kp / kd, a preset's name, or nothing) checked against the benchmark's
//! `[action]` rules, and the robot those gains drive.

use arena_bench::spec::{ActionMode, ActionRules};
use arena_data::NUM_JOINTS;
use arena_sim::robot::{GainSet, JOINT_NAMES};
use arena_sim::{RobotConfig, env};

/// Relative tolerance when declared gains are compared with a preset's (file round trips of
/// decimal numbers, single-precision exports).
const PRESET_MATCH_TOLERANCE: f64 = 1e-5;

/// What an agent declared in `connect`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeclaredGains {
    pub kp: Vec<f64>,
    pub kd: Vec<f64>,
    pub preset: String,
}

impl DeclaredGains {
    /// An agent's own gains (in the G1 order), or nothing (the benchmark's default).
    pub fn own(gains: Option<(Vec<f64>, Vec<f64>)>) -> Self {
        let (kp, kd) = gains.unwrap_or_default();
        DeclaredGains {
            kp,
            kd,
            preset: String::new(),
        }
    }
}

/// What an exported policy declares: the PD gains its file holds, or the benchmark preset
/// named beside it (`gain_preset`, for a file without gains; both are refused by
/// [`resolve`]). A file with neither is refused: on the benchmark's default gains it would be
/// scored under gains it never declared (`arena-agent onnx` refuses it the same way).
pub fn declared_by_policy(
    file: Option<(Vec<f64>, Vec<f64>)>,
    preset: Option<&str>,
    rules: &ActionRules,
) -> Result<DeclaredGains, String> {
    // An empty name declares nothing, as an absent one.
    let preset = preset.filter(|p| !p.is_empty());
    if file.is_none() && preset.is_none() {
        return Err(format!(
            "it has no PD gains (metadata joint_stiffness / kp and joint_damping / kd): give joint_stiffness \
             and joint_damping, or the gain_preset it was trained with (this benchmark offers: {})",
            rules.presets.join(", ")
        ));
    }
    Ok(DeclaredGains {
        preset: preset.unwrap_or_default().to_string(),
        ..DeclaredGains::own(file)
    })
}

/// The gains a session runs with, and where they came from (stored with a submission as JSON).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SessionGains {
    pub kp: [f64; NUM_JOINTS],
    pub kd: [f64; NUM_JOINTS],
    /// The preset they equal, if any (`armature`, `arena`).
    pub preset: Option<String>,
}

impl SessionGains {
    /// Whether nothing was declared (then a resumed submission keeps its stored gains).
    pub fn declared_nothing(declared: &DeclaredGains) -> bool {
        declared.kp.is_empty() && declared.kd.is_empty() && declared.preset.is_empty()
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("gains serialise")
    }

    pub fn from_json(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| format!("stored gains are unreadable: {e}"))
    }

    /// Same gains (the preset name aside).
    pub fn same_values(&self, other: &SessionGains) -> bool {
        self.kp == other.kp && self.kd == other.kd
    }
}

/// The gain values of a named preset.
pub fn preset_gains(name: &str) -> Option<([f64; NUM_JOINTS], [f64; NUM_JOINTS])> {
    let set = match name {
        "armature" => GainSet::Armature,
        "arena" => GainSet::Base,
        _ => return None,
    };
    let r = RobotConfig::new(set);
    Some((r.kp, r.kd))
}

/// A declared number as an error message shows it: scientific notation when it is very large
/// or very small (`{}` would print 1e308 as 309 digits).
fn shown(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-4..1e6).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= PRESET_MATCH_TOLERANCE * a.abs().max(b.abs()).max(1e-9)
}

/// Checks what an agent declared against a joint-position benchmark's rules. The error names
/// the joint and the rule, for the `invalid_gains` error.
pub fn resolve(rules: &ActionRules, declared: &DeclaredGains) -> Result<SessionGains, String> {
    let from_preset = |name: &str| {
        let (kp, kd) = preset_gains(name).expect("benchmark presets are validated");
        SessionGains {
            kp,
            kd,
            preset: Some(name.to_string()),
        }
    };
    if !declared.preset.is_empty() {
        if !declared.kp.is_empty() || !declared.kd.is_empty() {
            return Err("declare either gain_preset or joint_stiffness / joint_damping, not both".into());
        }
        return if rules.presets.contains(&declared.preset) {
            Ok(from_preset(&declared.preset))
        } else {
            Err(format!(
                "gain preset {:?} is not offered by this benchmark; it offers: {}",
                declared.preset,
                rules.presets.join(", ")
            ))
        };
    }
    if declared.kp.is_empty() && declared.kd.is_empty() {
        return Ok(from_preset(&rules.gains));
    }
    for (what, values) in [("joint_stiffness", &declared.kp), ("joint_damping", &declared.kd)] {
        if values.len() != NUM_JOINTS {
            return Err(format!(
                "{what} needs {NUM_JOINTS} values (G1 joint order), got {}",
                values.len()
            ));
        }
        if let Some(j) = values.iter().position(|v| !v.is_finite() || *v < 0.0) {
            return Err(format!(
                "{what} of {} is {}: gains must be finite and not negative",
                JOINT_NAMES[j],
                shown(values[j])
            ));
        }
    }
    let mut kp = [0.0; NUM_JOINTS];
    let mut kd = [0.0; NUM_JOINTS];
    kp.copy_from_slice(&declared.kp);
    kd.copy_from_slice(&declared.kd);
    if let Some(name) = rules.presets.iter().find(|name| {
        let (pkp, pkd) = preset_gains(name).expect("validated");
        (0..NUM_JOINTS).all(|j| close(kp[j], pkp[j]) && close(kd[j], pkd[j]))
    }) {
        return Ok(SessionGains {
            kp,
            kd,
            preset: Some(name.clone()),
        });
    }
    match (&rules.kp_max, &rules.kd_max) {
        (Some(kp_max), Some(kd_max)) => {
            for j in 0..NUM_JOINTS {
                if kp[j] > kp_max[j] {
                    return Err(format!(
                        "joint_stiffness of {} is {} N·m/rad, above this benchmark's kp_max {}",
                        JOINT_NAMES[j],
                        shown(kp[j]),
                        kp_max[j]
                    ));
                }
                if kd[j] > kd_max[j] {
                    return Err(format!(
                        "joint_damping of {} is {} N·m·s/rad, above this benchmark's kd_max {}",
                        JOINT_NAMES[j],
                        shown(kd[j]),
                        kd_max[j]
                    ));
                }
            }
            Ok(SessionGains { kp, kd, preset: None })
        }
        _ => {
            let (pkp, pkd) = preset_gains(&rules.gains).expect("validated");
            let j = (0..NUM_JOINTS)
                .find(|&j| !close(kp[j], pkp[j]) || !close(kd[j], pkd[j]))
                .unwrap_or(0);
            Err(format!(
                "this benchmark fixes the gains to its presets ({}); {} differs from {:?}: kp {} vs {}, kd {} vs {}",
                rules.presets.join(", "),
                JOINT_NAMES[j],
                rules.gains,
                kp[j],
                pkp[j],
                kd[j],
                pkd[j]
            ))
        }
    }
}

/// The robot a benchmark's envs simulate: the arena's gains in the normalized mode; in the
/// joint-position mode the session's gains with the motors' published effort limits. IMU
/// sensors are compiled in when the benchmark sends an `imu` group.
pub fn robot_config(rules: &ActionRules, gains: Option<&SessionGains>, imu_sensors: bool) -> RobotConfig {
    let mut robot = match rules.mode {
        ActionMode::Normalized => RobotConfig::default(),
        ActionMode::JointPosition => {
            let mut r = RobotConfig::new(GainSet::Armature);
            let default;
            let g = match gains {
                Some(g) => g,
                None => {
                    default = resolve(rules, &DeclaredGains::default()).expect("the default preset is offered");
                    &default
                }
            };
            r.kp = g.kp;
            r.kd = g.kd;
            r
        }
    };
    robot.imu_sensors = imu_sensors;
    robot
}

/// The simulator's action mode of a benchmark.
pub fn env_action_mode(rules: &ActionRules) -> env::ActionMode {
    match rules.mode {
        ActionMode::Normalized => env::ActionMode::Normalized,
        ActionMode::JointPosition => env::ActionMode::JointPosition,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(bounded: bool) -> ActionRules {
        ActionRules {
            mode: ActionMode::JointPosition,
            gains: "armature".into(),
            presets: vec!["armature".into(), "arena".into()],
            kp_max: bounded.then(|| vec![200.0; NUM_JOINTS]),
            kd_max: bounded.then(|| vec![10.0; NUM_JOINTS]),
        }
    }

    /// An exported policy declares its file's gains or a preset; neither (an empty name
    /// included) is refused rather than run on the benchmark's default.
    #[test]
    fn a_policy_declares_its_gains_or_a_preset() {
        let r = rules(false);
        for preset in [None, Some("")] {
            let e = declared_by_policy(None, preset, &r).unwrap_err();
            assert!(e.contains("no PD gains") && e.contains("armature, arena"), "{e}");
        }
        let named = declared_by_policy(None, Some("arena"), &r).unwrap();
        assert_eq!(resolve(&r, &named).unwrap().preset.as_deref(), Some("arena"));
        let file = declared_by_policy(Some((vec![50.0; NUM_JOINTS], vec![2.0; NUM_JOINTS])), None, &r).unwrap();
        assert_eq!(resolve(&rules(true), &file).unwrap().kp, [50.0; NUM_JOINTS]);
    }

    #[test]
    fn declared_gains_are_checked_against_the_rules() {
        let none = resolve(&rules(false), &DeclaredGains::default()).unwrap();
        assert_eq!(none.preset.as_deref(), Some("armature"));
        let by_name = DeclaredGains {
            preset: "arena".into(),
            ..Default::default()
        };
        assert_eq!(resolve(&rules(false), &by_name).unwrap().kp, RobotConfig::default().kp);
        // The armature values in single precision still match their preset.
        let (kp, kd) = preset_gains("armature").unwrap();
        let f32ish = DeclaredGains {
            kp: kp.iter().map(|v| *v as f32 as f64).collect(),
            kd: kd.iter().map(|v| *v as f32 as f64).collect(),
            preset: String::new(),
        };
        assert_eq!(
            resolve(&rules(false), &f32ish).unwrap().preset.as_deref(),
            Some("armature")
        );
        // Other gains: refused when fixed, bounded otherwise; the message names the joint.
        let mut own = f32ish.clone();
        own.kp[3] = 150.0;
        let e = resolve(&rules(false), &own).unwrap_err();
        assert!(e.contains("left_knee_joint") && e.contains("fixes the gains"), "{e}");
        assert_eq!(resolve(&rules(true), &own).unwrap().kp[3], 150.0);
        own.kp[3] = 250.0;
        let e = resolve(&rules(true), &own).unwrap_err();
        assert!(e.contains("left_knee_joint") && e.contains("kp_max 200"), "{e}");
        own.kd.pop();
        assert!(
            resolve(&rules(true), &own)
                .unwrap_err()
                .contains("joint_damping needs 29")
        );
        let unknown = DeclaredGains {
            preset: "stiff".into(),
            ..Default::default()
        };
        assert!(
            resolve(&rules(true), &unknown)
                .unwrap_err()
                .contains("offers: armature, arena")
        );
        // The joint-position robot: the session's gains, the motors' effort limits.
        let robot = robot_config(&rules(true), None, true);
        assert_eq!((robot.kp, robot.effort[1], robot.imu_sensors), (kp, 139.0, true));
    }

    /// An absurd gain is named in a readable number (it printed as 309 digits).
    #[test]
    fn huge_gains_are_shown_in_scientific_notation() {
        let mut kp = vec![50.0; NUM_JOINTS];
        kp[3] = 1e308;
        let declared = DeclaredGains {
            kp,
            kd: vec![1.0; NUM_JOINTS],
            preset: String::new(),
        };
        let e = resolve(&rules(true), &declared).unwrap_err();
        assert!(e.contains("is 1e308 N·m/rad"), "{e}");
        assert!(e.len() < 200, "{e}");
        assert_eq!(shown(30.5), "30.5");
        assert_eq!(shown(2e-5), "2e-5");
        assert_eq!(shown(0.0), "0");
    }
}
