//! Reading a benchmark file: serde reads it into raw structs of optional fields, then
//! [`Check`] applies defaults and range checks, naming the dotted key of every problem.

use super::*;

/// Each repeat is one more episode per window: the cap keeps a typo from expanding a benchmark
/// into billions of episodes (the scale tests run 4096).
pub const MAX_REPEATS: u32 = 10_000;

/// The longest benchmark name: the server serves no longer one, so none is accepted.
pub const MAX_NAME_LEN: usize = 128;

/// An nDTW band of an hour is as good as unconstrained for any episode; larger values would
/// only overflow frame counts.
pub const MAX_NDTW_WINDOW_S: f64 = 3600.0;

impl BenchmarkSpec {
    /// Reads and validates a benchmark file; see [`BenchmarkSpec::parse`].
    pub fn read(path: &Path, known_metrics: &[&str]) -> Result<Self, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|cause| SpecError::Io {
            path: path.to_path_buf(),
            cause,
        })?;
        Self::parse(&text, path, known_metrics)
    }

    /// Parses and validates a benchmark definition; `path` is used only in error messages.
    /// Metric names (`metrics.list`, `ranking.*`) must be in `known_metrics`.
    pub fn parse(text: &str, path: &Path, known_metrics: &[&str]) -> Result<Self, SpecError> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| SpecError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let raw: RawSpec = toml::Value::Table(table)
            .try_into()
            .map_err(|e| schema_error(&e, text, path))?;
        Check { path }.spec(raw, known_metrics).map_err(|e| with_line(e, text))
    }
}

/// Adds to a consistency error the line where its key is written (schema errors have theirs
/// from toml already).
fn with_line(e: SpecError, text: &str) -> SpecError {
    match e {
        SpecError::Invalid { path, key, message } if !message.contains("(line ") => {
            let message = match line_of(text, &key) {
                Some(l) => format!("{message} (line {l})"),
                None => message,
            };
            SpecError::Invalid { path, key, message }
        }
        SpecError::Several(errors) => SpecError::Several(errors.into_iter().map(|e| with_line(e, text)).collect()),
        e => e,
    }
}

/// The 1-based line of the dotted `key` in `text`: the key itself, or the nearest enclosing
/// table the text writes when the key is absent (a required key left out).
fn line_of(text: &str, key: &str) -> Option<usize> {
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    let mut table: &dyn toml_edit::TableLike = doc.as_table();
    let mut span = None;
    for part in key.split('.') {
        let Some((k, item)) = table.get_key_value(part) else {
            break;
        };
        span = k.span().or_else(|| item.span()).or(span);
        match item.as_table_like() {
            Some(t) => table = t,
            None => break,
        }
    }
    Some(text[..span?.start].matches('\n').count() + 1)
}

/// Turns a serde error into one that names the key. Deserialising from a `toml::Value` records
/// the key path but no position; toml exposes that path only in its Display form, as a
/// trailing "in `a.b`" line, so it is taken from there. The position comes from a second,
/// span-aware pass over the text.
fn schema_error(e: &toml::de::Error, text: &str, path: &Path) -> SpecError {
    let message = e.message().trim().to_string();
    let shown = e.to_string();
    let mut key = shown
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("in `")?.strip_suffix('`'))
        .unwrap_or("")
        .to_string();
    // An unknown key is reported against its parent table; name the key itself.
    if let Some((field, _)) = message.strip_prefix("unknown field `").and_then(|r| r.split_once('`')) {
        key = if key.is_empty() {
            field.to_string()
        } else {
            format!("{key}.{field}")
        };
    }
    let line = match toml::from_str::<RawSpec>(text) {
        Err(d) if d.message().trim() == message => d.span().map(|s| text[..s.start].matches('\n').count() + 1),
        _ => None,
    };
    // The raw structs read integers as i64 (see below); say what the user would write.
    let message = message
        .replace("expected i64", "expected an integer")
        .replace("expected f64", "expected a number");
    let message = match line {
        Some(l) => format!("{message} (line {l})"),
        None => message,
    };
    if key.is_empty() {
        SpecError::Parse {
            path: path.to_path_buf(),
            message,
        }
    } else {
        SpecError::Invalid {
            path: path.to_path_buf(),
            key,
            message,
        }
    }
}

// Raw file shapes: every field optional, so defaults and "required" are decided in `Check`
// with messages that name the key. Integers are read as i64 (TOML's integer type) so that
// out-of-range values get a message with the allowed range instead of serde's "expected u8".

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    name: Option<String>,
    version: Option<i64>,
    description: Option<String>,
    task: Option<Task>,
    motions: Option<RawMotions>,
    #[serde(default)]
    episodes: RawEpisodes,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    fall: RawFall,
    #[serde(default)]
    observations: RawObservations,
    metrics: Option<RawMetrics>,
    ranking: Option<RawRanking>,
    #[serde(default)]
    action: RawAction,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawAction {
    mode: Option<ActionMode>,
    gains: Option<String>,
    presets: Option<Vec<String>>,
    // A number (every joint) or 29 numbers; checked by hand to name the key.
    kp_max: Option<toml::Value>,
    kd_max: Option<toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMotions {
    builtin: Option<Vec<String>>,
    files: Option<Vec<PathBuf>>,
    dir: Option<PathBuf>,
    manifest: Option<PathBuf>,
    pattern: Option<String>,
    fps: Option<f64>,
    split: Option<SplitFilter>,
    attribution: Option<String>,
    hidden: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawEpisodes {
    // "whole" or a table; checked by hand because an untagged enum's error names neither form.
    window: Option<toml::Value>,
    repeats: Option<i64>,
    dr_level: Option<i64>,
    seed: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    control_hz: Option<i64>,
    max_episode_s: Option<f64>,
    step_timeout_ms: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFall {
    rule: Option<FallRule>,
    threshold_m: Option<f64>,
}

#[derive(Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "snake_case")]
enum FallRule {
    None,
    MinRootHeight,
    MaxBodyDeviation,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawObservations {
    groups: Option<Vec<String>>,
    reference_horizon: Option<i64>,
    reference_goal_horizon: Option<i64>,
    reveal_reference: Option<bool>,
    hide_motion_names: Option<bool>,
    anchor_body: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    list: Option<Vec<String>>,
    state_slice: Option<Vec<i64>>,
    success_threshold_m: Option<f64>,
    ndtw_window_s: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRanking {
    success: Option<String>,
    survival: Option<String>,
    primary: Option<String>,
    direction: Option<Direction>,
    tie_breakers: Option<Vec<String>>,
}

/// Whether a motion path names an NPZ file (which carries its own frame rate).
pub fn is_npz(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("npz"))
}

/// Validation of the raw file against the schema; every error names `path` and the key.
struct Check<'a> {
    path: &'a Path,
}

impl Check<'_> {
    fn err(&self, key: &str, message: impl Into<String>) -> SpecError {
        SpecError::Invalid {
            path: self.path.to_path_buf(),
            key: key.to_string(),
            message: message.into(),
        }
    }

    fn required<T>(&self, key: &str, value: Option<T>, expected: &str) -> Result<T, SpecError> {
        value.ok_or_else(|| self.err(key, format!("missing; expected {expected}")))
    }

    fn int(
        &self,
        key: &str,
        value: Option<i64>,
        default: i64,
        range: (i64, i64),
        expected: &str,
    ) -> Result<i64, SpecError> {
        let v = value.unwrap_or(default);
        if (range.0..=range.1).contains(&v) {
            Ok(v)
        } else {
            Err(self.err(key, format!("expected {expected}, got {v}")))
        }
    }

    fn float(
        &self,
        key: &str,
        value: Option<f64>,
        default: f64,
        ok: fn(f64) -> bool,
        expected: &str,
    ) -> Result<f64, SpecError> {
        let v = value.unwrap_or(default);
        if v.is_finite() && ok(v) {
            Ok(v)
        } else {
            Err(self.err(key, format!("expected {expected}, got {v}")))
        }
    }

    /// A non-empty list of distinct names, each in `allowed`.
    fn names(&self, key: &str, list: Vec<String>, allowed: &[&str], what: &str) -> Result<Vec<String>, SpecError> {
        if list.is_empty() {
            return Err(self.err(key, format!("expected a non-empty list of {what} names")));
        }
        for (i, name) in list.iter().enumerate() {
            if !allowed.contains(&name.as_str()) {
                return Err(self.err(
                    key,
                    format!("unknown {what} {name:?}; expected one of: {}", allowed.join(", ")),
                ));
            }
            if list[..i].contains(name) {
                return Err(self.err(key, format!("{name:?} is listed twice")));
            }
        }
        Ok(list)
    }

    /// Checks every section and reports every section's problem at once (one per section: a
    /// section's later keys may depend on its first bad one).
    fn spec(&self, raw: RawSpec, known_metrics: &[&str]) -> Result<BenchmarkSpec, SpecError> {
        let mut problems = Vec::new();
        fn keep<T>(problems: &mut Vec<SpecError>, r: Result<T, SpecError>) -> Option<T> {
            r.map_err(|e| problems.push(e)).ok()
        }
        macro_rules! take {
            ($e:expr) => {
                keep(&mut problems, $e)
            };
        }
        let name = take!(self.name(raw.name));
        let version = take!(self.version(raw.version));
        let description = take!(self.description(raw.description));
        let task = take!(self.required("task", raw.task, "\"tracking\""));
        let motions = take!(self.motions(raw.motions));
        let episodes = take!(self.episodes(raw.episodes));
        let limits = take!(self.limits(raw.limits));
        let fall = take!(self.fall(raw.fall));
        let observations = take!(self.observations(raw.observations));
        let mut metrics = take!(
            self.required("metrics", raw.metrics, "a [metrics] table with `list`")
                .and_then(|m| self.metrics(m, known_metrics))
        );
        let raw_ranking = take!(self.required("ranking", raw.ranking, "a [ranking] table with `primary`"));
        let ranking = match (&metrics, raw_ranking) {
            (Some(m), Some(r)) => take!(self.ranking(r, &m.list)),
            _ => None,
        };
        // A benchmark that ranks by one success rule shows the other beside it: both rules'
        // success and failure-time metrics are computed whatever the list says.
        if let (Some(m), Some(Ranking { success: Some(_), .. })) = (&mut metrics, &ranking) {
            for name in crate::metrics::SUCCESS_RULE_METRICS {
                if !m.list.iter().any(|l| l == name) {
                    m.list.push(name.to_string());
                }
            }
        }
        let action = take!(self.action(raw.action));
        match (
            name,
            version,
            description,
            task,
            motions,
            episodes,
            limits,
            fall,
            observations,
            metrics,
            ranking,
            action,
        ) {
            (
                Some(name),
                Some(version),
                Some(description),
                Some(task),
                Some(motions),
                Some(episodes),
                Some(limits),
                Some(fall),
                Some(observations),
                Some(metrics),
                Some(ranking),
                Some(action),
            ) => Ok(BenchmarkSpec {
                name,
                version,
                description,
                task,
                motions,
                episodes,
                limits,
                fall,
                observations,
                metrics,
                ranking,
                action,
            }),
            _ if problems.len() == 1 => Err(problems.remove(0)),
            _ => Err(SpecError::Several(problems)),
        }
    }

    fn name(&self, raw: Option<String>) -> Result<String, SpecError> {
        let name = self.required("name", raw, "a name of lowercase letters, digits and '-'")?;
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(self.err(
                "name",
                format!("expected lowercase letters, digits and '-' ([a-z0-9-]+), got {name:?}"),
            ));
        }
        // A leading '-' reads as a flag on every command line that takes the name.
        if name.starts_with('-') {
            return Err(self.err("name", format!("must not start with '-', got {name:?}")));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(self.err(
                "name",
                format!(
                    "at most {MAX_NAME_LEN} characters (the server's limit on names), got {}",
                    name.len()
                ),
            ));
        }
        Ok(name)
    }

    fn version(&self, raw: Option<i64>) -> Result<u32, SpecError> {
        let version = self.required("version", raw, "an integer >= 1")?;
        Ok(self.int("version", Some(version), 1, (1, u32::MAX as i64), "an integer >= 1")? as u32)
    }

    fn description(&self, raw: Option<String>) -> Result<String, SpecError> {
        let description = self.required("description", raw, "a non-empty string")?;
        if description.trim().is_empty() {
            return Err(self.err("description", "expected a non-empty string"));
        }
        Ok(description)
    }

    fn motions(&self, raw: Option<RawMotions>) -> Result<MotionSet, SpecError> {
        const SOURCES: &str = "exactly one of `builtin`, `files`, `dir`, `manifest`";
        let m = self.required("motions", raw, &format!("a [motions] table with {SOURCES}"))?;
        let given: Vec<&str> = [
            ("builtin", m.builtin.is_some()),
            ("files", m.files.is_some()),
            ("dir", m.dir.is_some()),
            ("manifest", m.manifest.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, set)| set.then_some(k))
        .collect();
        match given.len() {
            0 => return Err(self.err("motions", format!("expected {SOURCES}, found none"))),
            1 => {}
            _ => return Err(self.err("motions", format!("expected {SOURCES}, found {}", given.join(" and ")))),
        }
        if m.pattern.is_some() && m.dir.is_none() {
            return Err(self.err("motions.pattern", "only allowed with `dir`"));
        }
        if let Some(fps) = m.fps {
            self.float("motions.fps", Some(fps), 0.0, |v| v > 0.0, "a positive frame rate")?;
        }
        let split = m.split.unwrap_or_default();
        if split != SplitFilter::All && m.manifest.is_none() {
            return Err(self.err(
                "motions.split",
                format!(
                    "expected \"all\" (only a manifest assigns clips to train/val/test), got {:?}",
                    split.as_str()
                ),
            ));
        }
        let need_fps = |source: &str| {
            if m.fps.is_none() {
                Err(self.err(
                    "motions.fps",
                    format!(
                        "required with `{source}` of G1 CSV files (they do not store their frame rate), e.g. fps = 60; NPZ motions carry their own"
                    ),
                ))
            } else {
                Ok(())
            }
        };
        // An `fps` that would be ignored is refused: whoever set it meant something by it.
        let npz_only = |source: &str| {
            if m.fps.is_some() {
                Err(self.err(
                    "motions.fps",
                    format!(
                        "not used with `{source}` of NPZ motions alone (they carry their own frame rate); remove it"
                    ),
                ))
            } else {
                Ok(())
            }
        };
        let source = if let Some(names) = m.builtin {
            if m.fps.is_some() {
                return Err(self.err(
                    "motions.fps",
                    "not allowed with `builtin` (built-in motions are generated at their own frame rate)",
                ));
            }
            MotionSource::Builtin(self.names("motions.builtin", names, &builtin_motion_names(), "built-in motion")?)
        } else if let Some(files) = m.files {
            if files.is_empty() {
                return Err(self.err("motions.files", "expected a non-empty list of file paths"));
            }
            if files.iter().any(|f| f.as_os_str().is_empty()) {
                return Err(self.err("motions.files", "expected file paths, got an empty string"));
            }
            if files.iter().all(|f| is_npz(f)) {
                npz_only("files")?;
            } else {
                need_fps("files")?;
            }
            MotionSource::Files(files)
        } else if let Some(dir) = m.dir {
            // Without a pattern the folder may hold NPZ motions alone: a G1 CSV file found there
            // without `fps` fails when the clips are loaded, named.
            match m.pattern.as_deref() {
                Some(p) if is_npz(Path::new(p)) => npz_only("dir")?,
                Some(_) => need_fps("dir")?,
                None => {}
            }
            if let Some(p) = &m.pattern {
                let stars = p.matches('*').count();
                if p.is_empty() || stars > 1 || p.contains(['/', '\\']) {
                    return Err(self.err(
                        "motions.pattern",
                        format!("expected a file name with at most one `*` wildcard, e.g. \"dance__*.csv\", got {p:?}"),
                    ));
                }
            }
            MotionSource::Dir {
                dir,
                pattern: m.pattern,
            }
        } else {
            // `given` has exactly one entry, so this is the manifest.
            let manifest = self.required("motions.manifest", m.manifest, "a manifest path")?;
            MotionSource::Manifest(manifest)
        };
        Ok(MotionSet {
            source,
            fps: m.fps,
            split,
            attribution: m.attribution,
            hidden: m.hidden.unwrap_or(false),
        })
    }

    fn episodes(&self, raw: RawEpisodes) -> Result<EpisodeRules, SpecError> {
        Ok(EpisodeRules {
            window: self.window(raw.window)?,
            repeats: self.int(
                "episodes.repeats",
                raw.repeats,
                1,
                (1, MAX_REPEATS as i64),
                &format!("an integer 1-{MAX_REPEATS}"),
            )? as u32,
            dr_level: self.int("episodes.dr_level", raw.dr_level, 0, (0, 3), "an integer 0-3")? as u8,
            seed: self.int("episodes.seed", raw.seed, 0, (0, i64::MAX), "a non-negative integer")? as u64,
        })
    }

    fn window(&self, raw: Option<toml::Value>) -> Result<Window, SpecError> {
        const KEY: &str = "episodes.window";
        // Shorter windows or strides than one control step mean nothing and could expand into
        // an unbounded number of episodes.
        const MIN_S: f64 = 1.0 / CONTROL_HZ as f64;
        let table = match raw {
            None => return Ok(Window::Whole),
            Some(toml::Value::String(s)) if s == "whole" => return Ok(Window::Whole),
            Some(toml::Value::Table(t)) => t,
            Some(other) => {
                let got = match &other {
                    toml::Value::String(s) => format!("{s:?}"),
                    v => a_type(v),
                };
                return Err(self.err(
                    KEY,
                    format!(
                        "expected \"whole\" or a table {{ length_s = <seconds>, stride_s = <seconds> }}, got {got}"
                    ),
                ));
            }
        };
        if let Some(k) = table.keys().find(|k| *k != "length_s" && *k != "stride_s") {
            return Err(self.err(&format!("{KEY}.{k}"), "unknown key; expected `length_s` or `stride_s`"));
        }
        let seconds = |k: &str| -> Result<f64, SpecError> {
            let key = format!("{KEY}.{k}");
            let expected = format!("a number of seconds >= {MIN_S}");
            let v = match table.get(k) {
                None => return Err(self.err(&key, format!("missing; expected {expected}"))),
                Some(toml::Value::Float(f)) => *f,
                Some(toml::Value::Integer(i)) => *i as f64,
                Some(other) => return Err(self.err(&key, format!("expected {expected}, got {}", a_type(other)))),
            };
            self.float(&key, Some(v), 0.0, |v| v >= MIN_S - WINDOW_EPS, &expected)
        };
        Ok(Window::Sliding {
            length_s: seconds("length_s")?,
            stride_s: seconds("stride_s")?,
        })
    }

    fn limits(&self, raw: RawLimits) -> Result<Limits, SpecError> {
        let control_hz = raw.control_hz.unwrap_or(CONTROL_HZ as i64);
        if control_hz != CONTROL_HZ as i64 {
            return Err(self.err(
                "limits.control_hz",
                format!("expected {CONTROL_HZ} (the simulator's control rate is fixed), got {control_hz}"),
            ));
        }
        Ok(Limits {
            control_hz: CONTROL_HZ,
            max_episode_s: self.float(
                "limits.max_episode_s",
                raw.max_episode_s,
                0.0,
                |v| v >= 0.0,
                "a number of seconds >= 0 (0 = no limit)",
            )?,
            step_timeout_ms: self.int(
                "limits.step_timeout_ms",
                raw.step_timeout_ms,
                1000,
                // At most a day, as the server's own `step_timeout_s`: one silent agent must
                // not hold a lane for good.
                (1, 86_400_000),
                "a positive number of milliseconds, at most a day (86400000)",
            )? as u64,
        })
    }

    fn fall(&self, raw: RawFall) -> Result<FallSpec, SpecError> {
        let rule = raw.rule.unwrap_or(FallRule::None);
        let rule_name = match rule {
            FallRule::None => {
                return match raw.threshold_m {
                    None => Ok(FallSpec::None),
                    Some(_) => Err(self.err("fall.threshold_m", "not allowed with rule = \"none\"")),
                };
            }
            FallRule::MinRootHeight => "min_root_height",
            FallRule::MaxBodyDeviation => "max_body_deviation",
        };
        const EXPECTED: &str = "a positive distance in metres";
        let t = raw.threshold_m.ok_or_else(|| {
            self.err(
                "fall.threshold_m",
                format!("missing; rule = {rule_name:?} needs {EXPECTED}"),
            )
        })?;
        let t = self.float("fall.threshold_m", Some(t), 0.0, |v| v > 0.0, EXPECTED)?;
        Ok(if rule == FallRule::MinRootHeight {
            FallSpec::MinRootHeight(t)
        } else {
            FallSpec::MaxBodyDeviation(t)
        })
    }

    fn observations(&self, raw: RawObservations) -> Result<ObservationAccess, SpecError> {
        let groups = raw
            .groups
            .unwrap_or_else(|| DEFAULT_OBSERVATION_GROUPS.iter().map(|s| s.to_string()).collect());
        // The reference groups are sent by their horizons, not listed: say so.
        if let Some(g) = groups.iter().find(|g| *g == "reference" || *g == "reference_goal") {
            return Err(self.err(
                "observations.groups",
                format!(
                    "{g:?} is not listed in groups: set observations.{g}_horizon (> 0 sends it); groups are the robot's own: {}",
                    OBSERVATION_GROUPS.join(", ")
                ),
            ));
        }
        Ok(ObservationAccess {
            groups: self.names("observations.groups", groups, &OBSERVATION_GROUPS, "observation group")?,
            reference_horizon: self.int(
                "observations.reference_horizon",
                raw.reference_horizon,
                1,
                (0, MAX_REFERENCE_HORIZON as i64),
                &format!("an integer 0-{MAX_REFERENCE_HORIZON}"),
            )? as u32,
            reference_goal_horizon: self.int(
                "observations.reference_goal_horizon",
                raw.reference_goal_horizon,
                0,
                (0, MAX_REFERENCE_GOAL_HORIZON as i64),
                &format!("an integer 0-{MAX_REFERENCE_GOAL_HORIZON} (future reference rows of 527 values each)"),
            )? as u32,
            reveal_reference: raw.reveal_reference.unwrap_or(false),
            hide_motion_names: raw.hide_motion_names.unwrap_or(false),
            anchor_body: match raw.anchor_body {
                None => "torso_link".to_string(),
                Some(b) if ANCHOR_BODIES.contains(&b.as_str()) => b,
                Some(b) => {
                    return Err(self.err(
                        "observations.anchor_body",
                        format!("unknown body {b:?}; expected one of: {}", ANCHOR_BODIES.join(", ")),
                    ));
                }
            },
        })
    }

    fn action(&self, raw: RawAction) -> Result<ActionRules, SpecError> {
        let mode = raw.mode.unwrap_or_default();
        if mode == ActionMode::Normalized {
            if raw.gains.is_some() || raw.presets.is_some() || raw.kp_max.is_some() || raw.kd_max.is_some() {
                return Err(self.err(
                    "action",
                    "gains, presets, kp_max and kd_max apply to mode = \"joint_position\" only (the normalized mode uses the arena's gains)",
                ));
            }
            return Ok(ActionRules::default());
        }
        let preset = |key: &str, name: String| -> Result<String, SpecError> {
            if GAIN_PRESETS.contains(&name.as_str()) {
                Ok(name)
            } else {
                Err(self.err(
                    key,
                    format!(
                        "unknown gain preset {name:?}; expected one of: {}",
                        GAIN_PRESETS.join(", ")
                    ),
                ))
            }
        };
        let gains_given = raw.gains.is_some();
        let gains = preset("action.gains", raw.gains.unwrap_or_else(|| "armature".to_string()))?;
        // Without `presets` an agent may pick the default alone. A list given is the whole
        // list: the default is never added to it behind the organiser's back.
        let presets = match raw.presets {
            None => vec![gains.clone()],
            Some(names) => {
                let mut presets: Vec<String> = Vec::new();
                for name in names {
                    let name = preset("action.presets", name)?;
                    if presets.contains(&name) {
                        return Err(self.err("action.presets", format!("{name:?} is listed twice")));
                    }
                    presets.push(name);
                }
                if !presets.contains(&gains) {
                    return Err(self.err(
                        "action.gains",
                        format!(
                            "{gains:?}{} is not among action.presets [{}]: a session without declared gains must get one an agent may pick; set gains to one of them or add it",
                            if gains_given { "" } else { " (the default)" },
                            presets.join(", ")
                        ),
                    ));
                }
                presets
            }
        };
        let kp_max = self.per_joint("action.kp_max", raw.kp_max)?;
        let kd_max = self.per_joint("action.kd_max", raw.kd_max)?;
        if kp_max.is_some() != kd_max.is_some() {
            return Err(self.err(
                "action",
                "set both kp_max and kd_max (bounded gains) or neither (the presets only)",
            ));
        }
        Ok(ActionRules {
            mode,
            gains,
            presets,
            kp_max,
            kd_max,
        })
    }

    /// A positive bound for every joint: one number, or 29 (G1 joint order).
    fn per_joint(&self, key: &str, raw: Option<toml::Value>) -> Result<Option<Vec<f64>>, SpecError> {
        const EXPECTED: &str = "a positive number or a list of 29 positive numbers (G1 joint order)";
        let number = |v: &toml::Value| match v {
            toml::Value::Float(f) => Some(*f),
            toml::Value::Integer(i) => Some(*i as f64),
            _ => None,
        };
        let values = match raw {
            None => return Ok(None),
            Some(toml::Value::Array(items)) => items.iter().map(number).collect::<Option<Vec<f64>>>(),
            Some(v) => number(&v).map(|x| vec![x; arena_data::NUM_JOINTS]),
        };
        match values {
            Some(v) if v.len() == arena_data::NUM_JOINTS && v.iter().all(|x| x.is_finite() && *x > 0.0) => Ok(Some(v)),
            Some(v) if v.len() != arena_data::NUM_JOINTS => {
                Err(self.err(key, format!("expected {EXPECTED}, got a list of {}", v.len())))
            }
            _ => Err(self.err(key, format!("expected {EXPECTED}"))),
        }
    }

    fn metrics(&self, raw: RawMetrics, known: &[&str]) -> Result<MetricSelection, SpecError> {
        let list = self.required("metrics.list", raw.list, "a non-empty list of metric names")?;
        let list = self.names("metrics.list", list, known, "metric")?;
        // The last three `state` columns are the root's angular velocity, which the robot's row
        // holds in the body frame × 0.25 and the reference's row in the world frame, unscaled
        // (docs/observations.md §10.2): not comparable, so no slice reaches them.
        const COMPARABLE: i64 = STATE_DIM as i64 - 3;
        let state_slice = match raw.state_slice.as_deref() {
            None => [0, 23],
            Some(&[lo, hi]) if 0 <= lo && lo < hi && hi <= COMPARABLE => [lo as usize, hi as usize],
            Some(other) => {
                return Err(self.err(
                    "metrics.state_slice",
                    format!(
                        "expected [lo, hi] with 0 <= lo < hi <= {COMPARABLE} (columns {COMPARABLE}-{STATE_DIM}, the root's \
                         angular velocity, are in different frames and scales in the robot's and the reference's \
                         rows), got {other:?}"
                    ),
                ));
            }
        };
        Ok(MetricSelection {
            list,
            state_slice,
            success_threshold_m: self.float(
                "metrics.success_threshold_m",
                raw.success_threshold_m,
                0.5,
                |v| v > 0.0,
                "a positive distance in metres",
            )?,
            ndtw_window_s: self.float(
                "metrics.ndtw_window_s",
                raw.ndtw_window_s,
                1.0,
                |v| (0.0..=MAX_NDTW_WINDOW_S).contains(&v),
                &format!("a number of seconds 0-{MAX_NDTW_WINDOW_S} (0 = unconstrained)"),
            )?,
        })
    }

    fn ranking(&self, raw: RawRanking, list: &[String]) -> Result<Ranking, SpecError> {
        let in_list = |key: &str, name: &str| {
            if list.iter().any(|m| m == name) {
                Ok(())
            } else {
                Err(self.err(
                    key,
                    format!(
                        "expected a metric from metrics.list ({}), got {name:?}",
                        list.join(", ")
                    ),
                ))
            }
        };
        let primary = self.required("ranking.primary", raw.primary, "a metric from metrics.list")?;
        in_list("ranking.primary", &primary)?;
        // Checked before the tie-breakers, whose messages assume a valid success metric.
        if let Some(success) = &raw.success {
            in_list("ranking.success", success)?;
            if !crate::metrics::SUCCESS_RULES.contains(&success.as_str()) {
                let why = if crate::metrics::SUCCESS_METRICS.contains(&success.as_str()) {
                    " (a single PHC criterion has no failure time of its own to stop scoring at and rank by)"
                } else {
                    ""
                };
                return Err(self.err(
                    "ranking.success",
                    format!(
                        "expected a 0/1 success metric with its failure time ({}), got {success:?}{why}",
                        crate::metrics::SUCCESS_RULES.join(", ")
                    ),
                ));
            }
        }
        if let Some(survival) = &raw.survival {
            // The rule first: the other rule's failure time is the likelier slip than a metric
            // left out of the list (which the success rule's own failure time never is).
            let expected = raw.success.as_deref().map(crate::metrics::survival_metric_for);
            if !crate::metrics::SURVIVAL_METRICS.contains(&survival.as_str()) || expected.is_some_and(|e| e != survival)
            {
                let wanted = match (expected, &raw.success) {
                    (Some(e), Some(s)) => format!("{e:?} (the failure time of {s:?}, ranking.success)"),
                    _ => format!(
                        "a time-to-failure metric ({})",
                        crate::metrics::SURVIVAL_METRICS.join(", ")
                    ),
                };
                return Err(self.err("ranking.survival", format!("expected {wanted}, got {survival:?}")));
            }
            in_list("ranking.survival", survival)?;
            if *survival == primary {
                return Err(self.err(
                    "ranking.survival",
                    format!("{survival:?} is already the primary metric"),
                ));
            }
        }
        let tie_breakers = raw.tie_breakers.unwrap_or_default();
        for (i, t) in tie_breakers.iter().enumerate() {
            in_list("ranking.tie_breakers", t)?;
            if *t == primary {
                return Err(self.err("ranking.tie_breakers", format!("{t:?} is already the primary metric")));
            }
            if raw.success.as_deref() == Some(t.as_str()) {
                return Err(self.err(
                    "ranking.tie_breakers",
                    format!("{t:?} already ranks first (ranking.success)"),
                ));
            }
            if raw.survival.as_deref() == Some(t.as_str()) {
                return Err(self.err(
                    "ranking.tie_breakers",
                    format!("{t:?} already ranks before the primary metric (ranking.survival)"),
                ));
            }
            if tie_breakers[..i].contains(t) {
                return Err(self.err("ranking.tie_breakers", format!("{t:?} is listed twice")));
            }
        }
        Ok(Ranking {
            success: raw.success,
            survival: raw.survival,
            primary,
            direction: raw.direction,
            tie_breakers,
        })
    }
}

/// "a string", "an integer", ...: a TOML value's type with its article, for messages.
fn a_type(v: &toml::Value) -> String {
    let t = v.type_str();
    let article = if t.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {t}")
}
