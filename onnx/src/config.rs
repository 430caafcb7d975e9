//! What the arena needs to know about an exported tracking policy (joint order, default pose,
//! action scale, PD gains, observation terms, anchor body), read from the ONNX file's metadata
//! in the mjlab / BeyondMimic convention (comma-separated strings) or holosoma's (JSON values),
//! with explicit overrides for what a file lacks. The same rules as the Python SDK's
//! `arena_sdk.policy_config` (`tests/conventions.rs` compares them); nothing here runs a model.

use crate::terms::{ObservationTerm, TERM_ALIASES, term_source};
use arena_g1::{JOINT_NAMES, NUM_JOINTS};
use serde_json::Value;
use std::collections::BTreeMap;

/// The policy cannot run on the arena as given: every problem, each naming what is missing or
/// unknown.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("cannot run {what}:\n  - {}", problems.join("\n  - "))]
pub struct UnsupportedPolicy {
    pub what: String,
    pub problems: Vec<String>,
}

/// Values that replace (or fill in) the file's, in the policy's joint order (as the file's
/// are): the `arena-agent onnx` options of the same names, stored with a hosted submission (as
/// a JSON object of these keys; an unknown key or a value of the wrong type is refused).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyOverrides {
    pub joint_names: Option<Vec<String>>,
    pub observation_names: Option<Vec<String>>,
    pub default_joint_pos: Option<Vec<f64>>,
    /// One value for every joint, or one per joint.
    pub action_scale: Option<Vec<f64>>,
    pub joint_stiffness: Option<Vec<f64>>,
    pub joint_damping: Option<Vec<f64>>,
    pub anchor_body: Option<String>,
    /// The benchmark's gain preset the policy was trained with, for a file without gains
    /// (`arena-agent onnx --gain-preset`); not a field of the file.
    pub gain_preset: Option<String>,
}

/// Where a user supplies a field the file lacks, for the hint a refusal ends with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Supply {
    /// `arena-agent onnx`'s options: "(give --default-joint-pos)".
    #[default]
    AgentOptions,
    /// A hosted upload's `overrides` object: "(give overrides.default_joint_pos)".
    UploadOverrides,
    /// Nowhere beside the file (`arena eval --onnx`): its metadata must hold it.
    FileOnly,
}

impl Supply {
    /// How to supply `field` (a `PolicyOverrides` key), in parentheses.
    pub fn hint(self, field: &str) -> String {
        let option = format!("--{}", field.replace('_', "-"));
        match self {
            Supply::AgentOptions => format!("(give {option})"),
            Supply::UploadOverrides => format!("(give overrides.{field})"),
            Supply::FileOnly => {
                format!("(add it to the file's metadata, or run the file with arena-agent onnx {option})")
            }
        }
    }
}

/// The fields found in a file, in the policy's joint and term order (None: absent).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyMetadata {
    /// "mjlab" (also BeyondMimic), "holosoma", or "" when neither convention was recognised.
    pub convention: String,
    pub joint_names: Option<Vec<String>>,
    pub observation_names: Option<Vec<String>>,
    pub default_joint_pos: Option<Vec<f64>>,
    /// One value (every joint) or one per joint.
    pub action_scale: Option<Vec<f64>>,
    pub joint_stiffness: Option<Vec<f64>>,
    pub joint_damping: Option<Vec<f64>>,
    pub anchor_body: Option<String>,
    pub term_scales: BTreeMap<String, Vec<f64>>,
    pub term_clips: BTreeMap<String, (f64, f64)>,
    pub term_dims: BTreeMap<String, i64>,
    pub term_history: BTreeMap<String, i64>,
    /// Raw actions are clipped to ± this before use (holosoma's clip_actions).
    pub action_clip: Option<f64>,
    /// Where each field is read from, for messages ("metadata key 'joint_names'").
    pub keys: BTreeMap<&'static str, String>,
    /// Values that were present but unreadable.
    pub problems: Vec<String>,
    /// Said first when something is missing (e.g. that no known convention was found).
    pub note: String,
}

/// A tracking policy as the arena runs it. Joint-indexed values are in the policy's order.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyConfig {
    pub joint_names: Vec<String>,
    pub default_joint_pos: Vec<f64>,
    pub action_scale: Vec<f64>,
    /// None when neither the file nor an override gives them (a gain preset can stand in).
    pub joint_stiffness: Option<Vec<f64>>,
    pub joint_damping: Option<Vec<f64>>,
    pub observation_terms: Vec<ObservationTerm>,
    /// The body its motion-anchor terms are relative to ("" when it uses none).
    pub anchor_body: String,
    pub action_clip: Option<f64>,
    pub convention: String,
}

impl PolicyConfig {
    /// Reads ONNX `metadata_props` in either convention and applies `overrides`; every problem
    /// at once.
    pub fn from_metadata(
        props: &BTreeMap<String, String>,
        overrides: &PolicyOverrides,
        supply: Supply,
        what: &str,
    ) -> Result<Self, UnsupportedPolicy> {
        resolve(read_metadata(props), overrides, supply, what)
    }

    /// The G1 index of each of the policy's joints.
    pub fn policy_to_g1(&self) -> Vec<usize> {
        self.joint_names
            .iter()
            .map(|n| {
                JOINT_NAMES
                    .iter()
                    .position(|g| g == n)
                    .expect("resolve checked the names")
            })
            .collect()
    }

    pub fn observation_size(&self) -> usize {
        self.observation_terms.iter().map(ObservationTerm::size).sum()
    }

    /// Per-joint values in the policy's order, reordered to the G1 order.
    pub fn to_g1(&self, values: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; NUM_JOINTS];
        for (p, g) in self.policy_to_g1().into_iter().enumerate() {
            out[g] = values[p];
        }
        out
    }

    /// (stiffness, damping) in the G1 order, as a session declares them; None without gains.
    pub fn gains_g1(&self) -> Option<(Vec<f64>, Vec<f64>)> {
        match (&self.joint_stiffness, &self.joint_damping) {
            (Some(kp), Some(kd)) => Some((self.to_g1(kp), self.to_g1(kd))),
            _ => None,
        }
    }
}

/// The most bytes of metadata (keys and values) a file may carry: a released export holds a few
/// kB (holosoma's experiment config some tens of kB). More is refused before it is read, as a
/// list of millions of names would cost the checks minutes and the answer gigabytes.
pub const MAX_METADATA_BYTES: usize = 4 << 20;

/// The most entries a list of names may have (the G1 has 29 joints; exports have about ten
/// observation terms).
pub const MAX_NAMES: usize = 256;

/// The fields of either convention; an unknown convention gives an empty PolicyMetadata.
pub fn read_metadata(props: &BTreeMap<String, String>) -> PolicyMetadata {
    let bytes: usize = props.iter().map(|(k, v)| k.len() + v.len()).sum();
    if bytes > MAX_METADATA_BYTES {
        return PolicyMetadata {
            problems: vec![format!(
                "the file's metadata is {bytes} bytes; at most {MAX_METADATA_BYTES} are read"
            )],
            ..Default::default()
        };
    }
    if props.contains_key("joint_names") || props.contains_key("observation_names") {
        return read_mjlab(props);
    }
    if HOLOSOMA_KEYS.iter().any(|k| props.contains_key(*k)) {
        return read_holosoma(props);
    }
    let keys = if props.is_empty() {
        "none".to_string()
    } else {
        props.keys().cloned().collect::<Vec<_>>().join(", ")
    };
    PolicyMetadata {
        keys: MJLAB_KEYS
            .iter()
            .map(|(f, k)| (*f, format!("metadata key '{k}'")))
            .collect(),
        note: format!("the file has no mjlab or holosoma metadata (its metadata keys: {keys})"),
        ..Default::default()
    }
}

// --- mjlab / BeyondMimic: every value is a string, lists comma-separated ---------------------

/// Field → mjlab's metadata key.
const MJLAB_KEYS: [(&str, &str); 7] = [
    ("joint_names", "joint_names"),
    ("observation_names", "observation_names"),
    ("default_joint_pos", "default_joint_pos"),
    ("action_scale", "action_scale"),
    ("joint_stiffness", "joint_stiffness"),
    ("joint_damping", "joint_damping"),
    ("anchor_body", "anchor_body_name"),
];

fn csv(raw: &str) -> Vec<String> {
    raw.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(String::from)
        .collect()
}

/// Python's float(): also "inf", "nan" and surrounding spaces.
fn parse_float(s: &str) -> Option<f64> {
    s.trim().parse::<f64>().ok()
}

fn read_mjlab(props: &BTreeMap<String, String>) -> PolicyMetadata {
    let mut m = PolicyMetadata {
        convention: "mjlab".into(),
        ..Default::default()
    };
    for (name, key) in MJLAB_KEYS {
        m.keys.insert(name, format!("metadata key '{key}'"));
        let Some(raw) = props.get(key).filter(|r| !r.trim().is_empty()) else {
            continue;
        };
        match name {
            "joint_names" => m.joint_names = Some(csv(raw)),
            "observation_names" => m.observation_names = Some(csv(raw)),
            "anchor_body" => m.anchor_body = Some(raw.trim().to_string()),
            _ => {
                let numbers: Option<Vec<f64>> = csv(raw).iter().map(|p| parse_float(p)).collect();
                let Some(numbers) = numbers else {
                    let shown: String = raw.chars().take(80).collect();
                    m.problems.push(format!(
                        "metadata key '{key}' is not a comma-separated list of numbers: {shown:?}"
                    ));
                    continue;
                };
                match name {
                    "default_joint_pos" => m.default_joint_pos = Some(numbers),
                    "action_scale" => m.action_scale = Some(numbers),
                    "joint_stiffness" => m.joint_stiffness = Some(numbers),
                    _ => m.joint_damping = Some(numbers),
                }
            }
        }
    }
    // Optional per-term details of newer exports; older ones have none of them. mjlab writes one
    // entry per term, aligned with `observation_names`: a list of another length, or with an
    // empty entry, would pair each later value with the wrong term, so it is refused.
    let names = m.observation_names.clone().unwrap_or_default();
    let mut misaligned = Vec::new();
    let mut per_term = |key: &str| -> Vec<(String, String)> {
        let Some(raw) = props.get(key).filter(|r| !r.trim().is_empty()) else {
            return Vec::new();
        };
        let entries: Vec<String> = raw.split(',').map(|p| p.trim().to_string()).collect();
        if entries.len() != names.len() || entries.iter().any(String::is_empty) {
            misaligned.push(format!(
                "metadata key '{key}' has {} entries{} for {} observation terms",
                entries.len(),
                if entries.iter().any(String::is_empty) {
                    ", some empty,"
                } else {
                    ""
                },
                names.len()
            ));
            return Vec::new();
        }
        names.iter().cloned().zip(entries).collect()
    };
    let mut unreadable = Vec::new();
    for (n, v) in per_term("observation_dims") {
        match parse_float(&v) {
            Some(d) => {
                m.term_dims.insert(n, d as i64);
            }
            None => unreadable.push(v),
        }
    }
    for key in ["observation_history_lengths", "observation_terms_history_length"] {
        for (n, v) in per_term(key) {
            match parse_float(&v) {
                Some(h) => {
                    m.term_history.insert(n, h as i64);
                }
                None => unreadable.push(v),
            }
        }
    }
    for (n, v) in per_term("observation_terms_scale") {
        // A per-dimension scale is ';'-joined.
        match v.split(';').map(parse_float).collect::<Option<Vec<f64>>>() {
            Some(parts) => {
                m.term_scales.insert(n, parts);
            }
            None => unreadable.push(v),
        }
    }
    for (n, v) in per_term("observation_terms_clip") {
        match v.split(';').map(parse_float).collect::<Option<Vec<f64>>>().as_deref() {
            // (-inf, inf) is mjlab's "no clip"; a NaN bound is kept, to be refused as no range.
            Some([lo, hi]) => {
                if lo.is_finite() || hi.is_finite() || lo.is_nan() || hi.is_nan() {
                    m.term_clips.insert(n, (*lo, *hi));
                }
            }
            _ => unreadable.push(v),
        }
    }
    m.problems.append(&mut misaligned);
    if let Some(v) = unreadable.first() {
        m.problems.push(format!(
            "unreadable per-term metadata (observation_dims / _terms_scale / _terms_clip): {v:?}"
        ));
    }
    m
}

// --- holosoma: every value is JSON; the rest is in the experiment config -----------------------

/// The metadata keys holosoma's reader reads (each a JSON value).
const HOLOSOMA_KEYS: [&str; 4] = ["dof_names", "kp", "kd", "experiment_config"];

fn read_holosoma(props: &BTreeMap<String, String>) -> PolicyMetadata {
    let mut m = PolicyMetadata {
        convention: "holosoma".into(),
        ..Default::default()
    };
    let mut values: BTreeMap<&str, Value> = BTreeMap::new();
    // Only the keys read here must be JSON: another tool's key beside them is not holosoma's.
    for (key, raw) in props.iter().filter(|(k, _)| HOLOSOMA_KEYS.contains(&k.as_str())) {
        match serde_json::from_str::<Value>(raw) {
            Ok(v) => {
                values.insert(key, v);
            }
            Err(_) => m.problems.push(format!(
                "metadata key '{key}' is not JSON (holosoma writes every value as JSON)"
            )),
        }
    }
    for (field, place) in [
        ("joint_names", "metadata key 'dof_names'"),
        ("joint_stiffness", "metadata key 'kp'"),
        ("joint_damping", "metadata key 'kd'"),
        (
            "observation_names",
            "experiment_config.observation.groups.actor_obs.terms",
        ),
        (
            "default_joint_pos",
            "experiment_config.robot.init_state.default_joint_angles",
        ),
        ("action_scale", "experiment_config.robot.control.action_scale"),
        ("anchor_body", "experiment_config.command (motion_config.body_name_ref)"),
    ] {
        m.keys.insert(field, place.to_string());
    }
    m.joint_names = values.get("dof_names").and_then(str_list);
    m.joint_stiffness = number_list(values.get("kp"), "kp", &mut m.problems);
    m.joint_damping = number_list(values.get("kd"), "kd", &mut m.problems);
    let Some(config) = values.get("experiment_config").filter(|v| v.is_object()) else {
        return m;
    };
    let empty = Value::Object(Default::default());
    let robot = dig(config, &["robot"]).unwrap_or(&empty);
    if let (Some(Value::Object(defaults)), Some(names)) =
        (dig(robot, &["init_state", "default_joint_angles"]), &m.joint_names)
    {
        let missing: Vec<&str> = names
            .iter()
            .filter(|n| !defaults.contains_key(*n))
            .map(String::as_str)
            .collect();
        if missing.is_empty() {
            m.default_joint_pos = names.iter().map(|n| defaults[n].as_f64()).collect();
            if m.default_joint_pos.is_none() {
                m.problems
                    .push("default_joint_angles holds a value that is not a number".into());
            }
        } else {
            m.problems
                .push(format!("default_joint_angles has no angle for {}", missing.join(", ")));
        }
    }
    let control = dig(robot, &["control"]).unwrap_or(&empty);
    if let Some(scale) = control.get("action_scale").and_then(number) {
        if control
            .get("action_scales_by_effort_limit_over_p_gain")
            .is_some_and(truthy)
        {
            // holosoma's per-joint scale: action_scale · effort / kp (0 where kp is 0).
            let effort = robot.get("dof_effort_limit_list").and_then(|v| v.as_array());
            match (effort, &m.joint_stiffness) {
                (Some(effort), Some(kp)) if effort.len() == kp.len() && effort.iter().all(|e| number(e).is_some()) => {
                    m.action_scale = Some(
                        effort
                            .iter()
                            .zip(kp)
                            .map(|(e, k)| {
                                if *k != 0.0 {
                                    scale * number(e).unwrap_or(0.0) / k
                                } else {
                                    0.0
                                }
                            })
                            .collect(),
                    );
                }
                _ => m
                    .problems
                    .push("action scale by effort / kp, but no dof_effort_limit_list matching kp".into()),
            }
        } else {
            m.action_scale = Some(vec![scale]);
        }
    }
    if control.get("clip_actions").is_some_and(truthy)
        && let Some(c) = control.get("action_clip_value").and_then(number)
    {
        // Actions are clipped to [-c, c]: a negative bound is no range.
        if c.is_finite() && c >= 0.0 {
            m.action_clip = Some(c);
        } else {
            m.problems.push(format!(
                "experiment_config.robot.control.action_clip_value is {c}; clip_actions needs a number >= 0"
            ));
        }
    }
    if let Some(group) = dig(config, &["observation", "groups", "actor_obs"])
        && let Some(Value::Object(terms)) = group.get("terms")
    {
        // holosoma concatenates a group's terms in alphabetical order of their names.
        let mut names: Vec<String> = terms.keys().cloned().collect();
        names.sort();
        m.observation_names = Some(names);
        let history = group
            .get("history_length")
            .and_then(|h| h.as_i64().filter(|_| h.is_i64()));
        for (name, cfg) in terms {
            if let Some(h) = history {
                m.term_history.insert(name.clone(), h);
            }
            let Value::Object(cfg) = cfg else { continue };
            match cfg.get("scale") {
                Some(s) if number(s).is_some_and(|v| v != 1.0) => {
                    m.term_scales.insert(name.clone(), vec![number(s).unwrap_or(1.0)]);
                }
                Some(Value::Array(list)) => {
                    m.term_scales.insert(
                        name.clone(),
                        list.iter().map(|v| number(v).unwrap_or(f64::NAN)).collect(),
                    );
                }
                _ => {}
            }
            if let Some(Value::Array(c)) = cfg.get("clip")
                && let [lo, hi] = &c[..]
            {
                m.term_clips.insert(
                    name.clone(),
                    (number(lo).unwrap_or(f64::NAN), number(hi).unwrap_or(f64::NAN)),
                );
            }
        }
    }
    match dig(config, &["command"]).and_then(|c| find_key(c, "body_name_ref")) {
        Some(Value::Array(refs)) => {
            if let Some(Value::String(s)) = refs.first() {
                m.anchor_body = Some(s.clone());
            }
        }
        Some(Value::String(s)) => m.anchor_body = Some(s.clone()),
        _ => {}
    }
    m
}

/// A JSON number (bools are not numbers here, unlike Python's isinstance(True, int)).
fn number(v: &Value) -> Option<f64> {
    v.as_f64()
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn dig<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| v.as_object()?.get(*key))
}

/// The first value of `key` anywhere in nested objects and arrays.
fn find_key<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    match value {
        Value::Object(o) => o.get(key).or_else(|| o.values().find_map(|v| find_key(v, key))),
        Value::Array(a) => a.iter().find_map(|v| find_key(v, key)),
        _ => None,
    }
}

fn str_list(value: &Value) -> Option<Vec<String>> {
    value.as_array().map(|a| {
        a.iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect()
    })
}

fn number_list(value: Option<&Value>, key: &str, problems: &mut Vec<String>) -> Option<Vec<f64>> {
    let value = value?;
    match value
        .as_array()
        .and_then(|a| a.iter().map(number).collect::<Option<Vec<f64>>>())
    {
        Some(list) => Some(list),
        None => {
            problems.push(format!("metadata key '{key}' is not a list of numbers"));
            None
        }
    }
}

// --- resolving: overrides, then every check -----------------------------------------------------

/// A PolicyConfig from the file's fields and `overrides`, or every problem at once; what a
/// file lacks is hinted at as `supply` takes it.
pub fn resolve(
    metadata: PolicyMetadata,
    overrides: &PolicyOverrides,
    supply: Supply,
    what: &str,
) -> Result<PolicyConfig, UnsupportedPolicy> {
    let mut m = metadata;
    let mut problems = std::mem::take(&mut m.problems);
    let o = overrides;
    if o.joint_names.is_some() {
        m.joint_names.clone_from(&o.joint_names);
    }
    if o.observation_names.is_some() {
        m.observation_names.clone_from(&o.observation_names);
    }
    if o.default_joint_pos.is_some() {
        m.default_joint_pos.clone_from(&o.default_joint_pos);
    }
    if o.action_scale.is_some() {
        m.action_scale.clone_from(&o.action_scale);
    }
    if o.joint_stiffness.is_some() {
        m.joint_stiffness.clone_from(&o.joint_stiffness);
    }
    if o.joint_damping.is_some() {
        m.joint_damping.clone_from(&o.joint_damping);
    }
    if o.anchor_body.is_some() {
        m.anchor_body.clone_from(&o.anchor_body);
    }
    let missing = |problems: &mut Vec<String>, field: &'static str, what: &str| {
        let place = m
            .keys
            .get(field)
            .cloned()
            .unwrap_or_else(|| "the file's metadata".into());
        // A key that is there but unreadable has said so already: it is not missing.
        if m.keys.contains_key(field) && problems.iter().any(|p| p.starts_with(&place)) {
            return;
        }
        problems.push(format!("no {what}: {place} is missing {}", supply.hint(field)));
    };

    let mut names = m.joint_names.clone().filter(|n| !n.is_empty());
    let too_many = names.as_ref().is_some_and(|n| n.len() > MAX_NAMES);
    if too_many {
        let given = names.take().map_or(0, |n| n.len());
        problems.push(format!(
            "joint_names has {given} entries; the arena's G1 has {NUM_JOINTS} joints"
        ));
    }
    match &names {
        None if too_many => {}
        None => missing(&mut problems, "joint_names", "joint names"),
        Some(names) => {
            let unknown: Vec<&str> = names
                .iter()
                .filter(|n| !JOINT_NAMES.contains(&n.as_str()))
                .map(String::as_str)
                .collect();
            if !unknown.is_empty() {
                problems.push(format!(
                    "unknown joint names (not joints of the arena's G1): {}",
                    unknown.join(", ")
                ));
            }
            let mut seen = std::collections::HashSet::new();
            let mut duplicates: Vec<&str> = names
                .iter()
                .filter(|n| !seen.insert(n.as_str()))
                .map(String::as_str)
                .collect();
            duplicates.sort();
            duplicates.dedup();
            if !duplicates.is_empty() {
                problems.push(format!("joint names given twice: {}", duplicates.join(", ")));
            }
            let absent: Vec<&str> = JOINT_NAMES
                .iter()
                .copied()
                .filter(|g| !names.iter().any(|n| n == g))
                .collect();
            if !absent.is_empty() && unknown.is_empty() {
                problems.push(format!(
                    "the policy drives {} joints; the arena's G1 has {NUM_JOINTS}: no {}",
                    names.len(),
                    absent.join(", ")
                ));
            }
        }
    }
    let count = names.as_ref().map_or(NUM_JOINTS, Vec::len);
    let mut per_joint = |value: &Option<Vec<f64>>, label: &str, scalar_ok: bool| -> Option<Vec<f64>> {
        let mut v = value.clone()?;
        if scalar_ok && v.len() == 1 {
            v = vec![v[0]; count];
        }
        if v.len() != count {
            problems.push(format!("{label} has {} values, the policy has {count} joints", v.len()));
            return None;
        }
        if !v.iter().all(|x| x.is_finite()) {
            problems.push(format!("{label} has non-finite values"));
            return None;
        }
        Some(v)
    };
    let default = per_joint(&m.default_joint_pos, "default_joint_pos", false);
    let scale = per_joint(&m.action_scale, "action_scale", true);
    let stiffness = per_joint(&m.joint_stiffness, "joint_stiffness", false);
    let damping = per_joint(&m.joint_damping, "joint_damping", false);
    if m.default_joint_pos.is_none() {
        missing(&mut problems, "default_joint_pos", "default joint positions");
    }
    if m.action_scale.is_none() {
        missing(&mut problems, "action_scale", "action scale");
    }
    match (&m.joint_stiffness, &m.joint_damping) {
        (Some(_), None) => problems.push(format!(
            "joint stiffness without joint damping {}",
            supply.hint("joint_damping")
        )),
        (None, Some(_)) => problems.push(format!(
            "joint damping without joint stiffness {}",
            supply.hint("joint_stiffness")
        )),
        _ => {}
    }
    for (label, gains) in [("joint_stiffness", &stiffness), ("joint_damping", &damping)] {
        if gains.as_ref().is_some_and(|g| g.iter().any(|v| *v < 0.0)) {
            problems.push(format!("{label} has negative values"));
        }
    }
    // A negative scale turns every action around (targets = default + scale · action).
    if scale.as_ref().is_some_and(|s| s.iter().any(|v| *v < 0.0)) {
        problems.push("action_scale has negative values".into());
    }

    let mut terms = Vec::new();
    let mut observation_names = m.observation_names.clone().filter(|n| !n.is_empty());
    match &observation_names {
        None => missing(&mut problems, "observation_names", "observation terms"),
        Some(n) if n.len() > MAX_NAMES => {
            problems.push(format!(
                "observation_names has {} entries; at most {MAX_NAMES} are read",
                n.len()
            ));
            observation_names = None;
        }
        Some(_) => {}
    }
    let mut unknown_terms: Vec<&str> = Vec::new();
    for name in observation_names.iter().flatten() {
        let Some(source) = term_source(name) else {
            unknown_terms.push(name);
            continue;
        };
        let history = m.term_history.get(name).copied().unwrap_or(1);
        if history > 1 {
            problems.push(format!(
                "observation term '{name}' has a history of {history} frames; the runner feeds one"
            ));
        }
        if let Some(dims) = m.term_dims.get(name)
            && *dims != source.size as i64
        {
            problems.push(format!(
                "observation term '{name}' has {dims} values in the policy, the arena's has {}",
                source.size
            ));
        }
        let mut scale = Vec::new();
        if let Some(s) = m.term_scales.get(name) {
            if s.iter().any(|v| !v.is_finite()) {
                // A NaN scale would make every row NaN: each episode failed as non-finite actions.
                problems.push(format!(
                    "observation term '{name}': its scale holds a value that is not a finite number"
                ));
            } else if s.len() != 1 && s.len() != source.size {
                problems.push(format!(
                    "observation term '{name}': scale of {} values for {}",
                    s.len(),
                    source.size
                ));
            } else if !(s.len() == 1 && s[0] == 1.0) {
                scale = s.iter().map(|v| *v as f32).collect();
            }
        }
        let clip = m.term_clips.get(name).map(|(lo, hi)| (*lo as f32, *hi as f32));
        if let Some((lo, hi)) = clip
            && (lo.is_nan() || hi.is_nan() || lo > hi)
        {
            problems.push(format!("observation term '{name}': clip [{lo}, {hi}] is not a range"));
        }
        terms.push(ObservationTerm {
            name: name.clone(),
            source,
            scale,
            clip,
        });
    }
    // One line per unknown term (at most MAX_NAMES of them: the list is bounded above).
    if !unknown_terms.is_empty() {
        let mut known: Vec<&str> = TERM_ALIASES.iter().map(|(a, _)| *a).collect();
        known.sort();
        let known = known.join(", ");
        for name in unknown_terms {
            problems.push(format!("unknown observation term '{name}': the arena provides {known}"));
        }
    }
    let anchor_users: Vec<&str> = terms
        .iter()
        .filter(|t| t.source.needs_anchor)
        .map(|t| t.name.as_str())
        .collect();
    let mut anchor = String::new();
    if !anchor_users.is_empty() {
        match &m.anchor_body {
            Some(a) if !a.is_empty() => anchor = a.clone(),
            _ => {
                let place = m
                    .keys
                    .get("anchor_body")
                    .cloned()
                    .unwrap_or_else(|| "the file's metadata".into());
                problems.push(format!(
                    "the terms {} need the anchor body: {place} is missing {}",
                    anchor_users.join(", "),
                    supply.hint("anchor_body")
                ));
            }
        }
    }
    if !problems.is_empty() {
        if !m.note.is_empty() {
            problems.insert(0, m.note.clone());
        }
        return Err(UnsupportedPolicy {
            what: what.to_string(),
            problems,
        });
    }
    Ok(PolicyConfig {
        joint_names: names.unwrap_or_default(),
        default_joint_pos: default.unwrap_or_default(),
        action_scale: scale.unwrap_or_default(),
        joint_stiffness: stiffness,
        joint_damping: damping,
        observation_terms: terms,
        anchor_body: anchor,
        action_clip: m.action_clip,
        convention: m.convention,
    })
}
