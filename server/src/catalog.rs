//! The benchmarks a server offers: benchmark files read from the benchmarks folder, each loaded
//! once (motions, FK, episode list) and shared by every session that runs it.

use arena_bench::metrics::metric_names;
use arena_bench::spec::{self, BenchmarkSpec, Episode, SpecError};
use arena_runner::episode::load_benchmark_and_clips;
use arena_sim::RobotConfig;
use arena_sim::motion::MotionLibrary;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// A benchmark ready to run: its rules, motions and expanded episodes. Cloning is cheap enough
/// for a per-session variant (a phase's view): the motion library is shared.
#[derive(Debug, Clone)]
pub struct LoadedBenchmark {
    pub spec: BenchmarkSpec,
    pub path: PathBuf,
    pub library: Arc<MotionLibrary>,
    pub episodes: Vec<Episode>,
    /// What the file defines, as [`definition`] digests it (of the file, not of a phase's view).
    pub definition: String,
}

impl LoadedBenchmark {
    /// The motion's category of an episode.
    pub fn category(&self, episode: &Episode) -> &str {
        &self.library.motions[episode.motion].category
    }

    pub fn motion_name(&self, episode: &Episode) -> &str {
        &self.library.motions[episode.motion].name
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error(
        "no benchmark named {}; available: {} (see GET /api/v1/benchmarks)",
        arena_sdk::protocol::quoted(.0),
        if .1.is_empty() { "none".to_string() } else { .1.join(", ") }
    )]
    UnknownName(String, Vec<String>),
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("loading the motions of benchmark {name}: {message}")]
    Motions { name: String, message: String },
    /// The benchmark asks for what this server's lanes cannot simulate (said to clients as it
    /// is: it names no server file).
    #[error("{0}")]
    Backend(String),
}

/// A load failure as an agent or a REST caller sees it: spec and motion errors name the
/// server's files, so a client gets benchmark names only and the details go to the log.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientLoadError {
    /// No benchmark of that name (the message lists the names there are).
    Unknown(String),
    /// The benchmark exists but cannot be loaded here: the organisers' problem.
    Unavailable(String),
}

impl CatalogError {
    /// What a client is told when loading `requested` failed; logs the details of a benchmark
    /// that exists but cannot be loaded.
    pub fn for_client(&self, requested: &str) -> ClientLoadError {
        let told = self.told_to_client(requested);
        if let ClientLoadError::Unavailable(_) = told {
            tracing::error!(benchmark = %requested, "cannot load the benchmark: {self}");
        }
        told
    }

    /// [`Self::for_client`] without the log line.
    fn told_to_client(&self, requested: &str) -> ClientLoadError {
        match self {
            CatalogError::UnknownName(..) => ClientLoadError::Unknown(self.to_string()),
            CatalogError::Spec(SpecError::UnknownBenchmark { name, available, .. }) => {
                ClientLoadError::Unknown(CatalogError::UnknownName(name.clone(), available.clone()).to_string())
            }
            CatalogError::Backend(why) => ClientLoadError::Unavailable(why.clone()),
            _ => ClientLoadError::Unavailable(format!(
                "benchmark {requested} cannot be loaded on the server (a configuration problem; the organisers have the details in the server log)"
            )),
        }
    }
}

/// Whether an offered benchmark can run here, as its last load found.
#[derive(Debug, Clone, PartialEq)]
pub enum Availability {
    /// Loaded: its sessions run.
    Loaded,
    /// Its last load failed (a clip missing, a motion file that does not parse): what a client
    /// is told. Tried again at the next load, so a fixed folder needs no restart.
    Unavailable(String),
    /// Not loaded yet (the server's start loads every benchmark behind it).
    Unchecked,
}

/// Whether the server's lanes can run a benchmark, and if not why ([`runs_on_gpu`]).
pub type BackendCheck = fn(&BenchmarkSpec) -> Result<(), String>;

#[derive(Debug)]
pub struct Catalog {
    dir: PathBuf,
    motions_root: PathBuf,
    loaded: Mutex<HashMap<String, Arc<LoadedBenchmark>>>,
    /// The benchmarks whose last load failed, with what a client is told.
    unavailable: Mutex<HashMap<String, String>>,
    /// Whether the server's lanes can run the benchmark (`None`: every one).
    runs_here: Option<BackendCheck>,
}

impl Catalog {
    pub fn new(dir: PathBuf, motions_root: PathBuf) -> Self {
        Self {
            dir,
            motions_root,
            loaded: Mutex::new(HashMap::new()),
            unavailable: Mutex::new(HashMap::new()),
            runs_here: None,
        }
    }

    /// A catalog whose benchmarks load only where `runs_here` says the server's lanes can
    /// run them; the others are unavailable with its reason (a GPU server offered the IMU
    /// benchmarks, then failed each session of theirs on an opaque `internal` error).
    pub fn with_backend_check(mut self, runs_here: BackendCheck) -> Self {
        self.runs_here = Some(runs_here);
        self
    }

    /// Whether the named benchmark can run here, as its last load found (no load is made).
    pub fn availability(&self, name: &str) -> Availability {
        if self.loaded.lock().expect("catalog lock").contains_key(name) {
            return Availability::Loaded;
        }
        match self.unavailable.lock().expect("catalog lock").get(name) {
            Some(message) => Availability::Unavailable(message.clone()),
            None => Availability::Unchecked,
        }
    }

    /// The version and definition of a loaded benchmark as this process loaded it (`None`
    /// before its first load or after a failed one).
    pub fn loaded_definition(&self, name: &str) -> Option<(u32, String)> {
        self.loaded
            .lock()
            .expect("catalog lock")
            .get(name)
            .map(|b| (b.spec.version, b.definition.clone()))
    }

    /// The names of the offered benchmarks a client may choose: those whose last load did not
    /// fail (an `unknown_benchmark` answer lists these, not ones whose motions are missing).
    fn runnable_names(&self) -> Vec<String> {
        let unavailable = self.unavailable.lock().expect("catalog lock").clone();
        self.offered()
            .into_iter()
            .map(|s| s.name)
            .filter(|n| !unavailable.contains_key(n))
            .collect()
    }

    /// Every benchmark file of the folder with its parse result.
    pub fn list(&self) -> Vec<(PathBuf, Result<BenchmarkSpec, SpecError>)> {
        spec::list_benchmarks(&self.dir, &metric_names())
    }

    /// The benchmarks a client can run: the files that parse and whose name no other file uses
    /// (a shared name is refused when loading, so it is not offered either).
    pub fn offered(&self) -> Vec<BenchmarkSpec> {
        let (specs, _) = self.survey();
        specs
    }

    /// The offered benchmarks, and a line per problem of the folder: a file that does not parse,
    /// a name that several files use. A server prints the problems at start, so an organiser
    /// hears of them before a team does.
    pub fn survey(&self) -> (Vec<BenchmarkSpec>, Vec<String>) {
        let mut problems = Vec::new();
        let mut by_name: HashMap<String, Vec<(PathBuf, BenchmarkSpec)>> = HashMap::new();
        for (path, spec) in self.list() {
            match spec {
                Ok(spec) => by_name.entry(spec.name.clone()).or_default().push((path, spec)),
                Err(e) => problems.push(format!("{e} (not offered)")),
            }
        }
        let mut offered = Vec::new();
        for (name, mut files) in by_name {
            if files.len() == 1 {
                offered.push(files.pop().expect("one").1);
            } else {
                let paths: Vec<String> = files.iter().map(|(p, _)| p.display().to_string()).collect();
                problems.push(format!(
                    "benchmark name {name:?} is used by {} files ({}): none of them is offered",
                    files.len(),
                    paths.join(", ")
                ));
            }
        }
        offered.sort_by(|a, b| a.name.cmp(&b.name));
        problems.sort();
        (offered, problems)
    }

    /// Only names of the catalog's folder are served, never paths: a client must not be able
    /// to make the server read (and echo parse errors of) arbitrary files.
    fn check_name(&self, name: &str) -> Result<(), CatalogError> {
        let ok = !name.is_empty()
            && name.len() <= arena_bench::spec::MAX_NAME_LEN
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && !name.starts_with('.')
            && !name.ends_with(".toml");
        if ok {
            Ok(())
        } else {
            Err(CatalogError::UnknownName(name.to_string(), self.runnable_names()))
        }
    }

    /// A spec lookup's error, a name the folder lacks listing the benchmarks a client may choose.
    fn lookup_error(&self, e: SpecError) -> CatalogError {
        match e {
            SpecError::UnknownBenchmark { name, .. } => CatalogError::UnknownName(name, self.runnable_names()),
            other => CatalogError::Spec(other),
        }
    }

    /// The named benchmark's spec, without loading motions.
    pub fn spec(&self, name: &str) -> Result<BenchmarkSpec, CatalogError> {
        self.check_name(name)?;
        if let Some(b) = self.loaded.lock().expect("catalog lock").get(name) {
            return Ok(b.spec.clone());
        }
        spec::find_benchmark_by_name(name, &self.dir, &metric_names())
            .map(|(_, spec)| spec)
            .map_err(|e| self.lookup_error(e))
    }

    /// Why a benchmark cannot be loaded, for an organiser (REST admin calls, the start-up log's
    /// neighbours): the details (which clips are missing, which key is wrong) with the server's
    /// folders written as `<motions root>` and `<benchmarks folder>`, so no absolute path leaves.
    pub fn organiser_message(&self, e: &CatalogError) -> String {
        let mut message = e.to_string();
        for (folder, name) in [
            (&self.motions_root, "<motions root>"),
            (&self.dir, "<benchmarks folder>"),
        ] {
            let folder = folder.display().to_string();
            if !folder.is_empty() && folder != "." {
                message = message.replace(&folder, name);
            }
        }
        message
    }

    /// Loads (once) the named benchmark. Blocking: reads motion files and runs FK.
    /// The clips of benchmark `name` that also appear in the benchmarks `others`, by content (the
    /// reference motion's frames, whatever the clip is called): `(other benchmark, shared clip
    /// names in `name`)`, for the benchmarks that share any. Benchmarks that cannot be loaded
    /// are left out.
    pub fn shared_clips(&self, name: &str, others: &[String]) -> Result<Vec<(String, Vec<String>)>, CatalogError> {
        let mine = self.load(name)?;
        let fingerprints: Vec<(String, [u8; 32])> = mine
            .library
            .motions
            .iter()
            .map(|m| (m.name.clone(), motion_fingerprint(m)))
            .collect();
        let mut out = Vec::new();
        for other in others.iter().filter(|o| o.as_str() != name) {
            let Ok(theirs) = self.load(other) else { continue };
            let theirs: std::collections::HashSet<[u8; 32]> =
                theirs.library.motions.iter().map(motion_fingerprint).collect();
            let shared: Vec<String> = fingerprints
                .iter()
                .filter(|(_, f)| theirs.contains(f))
                .map(|(n, _)| n.clone())
                .collect();
            if !shared.is_empty() {
                out.push((other.clone(), shared));
            }
        }
        Ok(out)
    }

    pub fn load(&self, name: &str) -> Result<Arc<LoadedBenchmark>, CatalogError> {
        self.check_name(name)?;
        if let Some(b) = self.loaded.lock().expect("catalog lock").get(name) {
            return Ok(b.clone());
        }
        let (path, spec) =
            spec::find_benchmark_by_name(name, &self.dir, &metric_names()).map_err(|e| self.lookup_error(e))?;
        let result = self.load_from(path, spec);
        // A load of the same name that succeeded meanwhile (two sessions at once) wins.
        let loaded = self.loaded.lock().expect("catalog lock").contains_key(name);
        let mut unavailable = self.unavailable.lock().expect("catalog lock");
        match &result {
            Err(e) if !loaded => match e.told_to_client(name) {
                ClientLoadError::Unavailable(message) => unavailable.insert(name.to_string(), message),
                ClientLoadError::Unknown(_) => unavailable.remove(name),
            },
            _ => unavailable.remove(name),
        };
        result
    }

    /// Loads a benchmark whose file was found: its motions, FK and episodes.
    fn load_from(&self, path: PathBuf, spec: BenchmarkSpec) -> Result<Arc<LoadedBenchmark>, CatalogError> {
        if let Some(runs_here) = self.runs_here {
            runs_here(&spec).map_err(CatalogError::Backend)?;
        }
        let name = spec.name.clone();
        let robot = RobotConfig::default();
        let motions = |e: anyhow::Error| CatalogError::Motions {
            name: spec.name.clone(),
            message: format!("{e:#}"),
        };
        let (library, episodes, clips) =
            load_benchmark_and_clips(&spec, &self.motions_root, &robot).map_err(motions)?;
        let definition = definition(&spec, &clips);
        let loaded = Arc::new(LoadedBenchmark {
            spec,
            path,
            library: Arc::new(library),
            episodes,
            definition,
        });
        self.loaded.lock().expect("catalog lock").insert(name, loaded.clone());
        Ok(loaded)
    }
}

/// Whether lanes on the GPU backend can run a benchmark: not one that sends the IMU groups,
/// whose accelerometers the GPU backend does not simulate.
pub fn runs_on_gpu(spec: &BenchmarkSpec) -> Result<(), String> {
    match arena_runner::observations::needs_imu(spec) {
        true => Err(format!(
            "benchmark {} sends the imu observation groups, whose accelerometers this server's GPU backend does \
             not simulate: it runs on servers of the cpu backend",
            spec.name
        )),
        false => Ok(()),
    }
}

/// How [`definition`] reads a benchmark, written before its digest (`d1:…`). Bump it whenever
/// the digest of an unchanged file changes with the code (a field added to the spec's rules of
/// play, a reader that parses clips otherwise): a recorded definition of another scheme is then
/// recorded again, not taken for an edited file (`tests::the_digest_of_g1_smoke_is_pinned`
/// fails until it is bumped).
pub const DEFINITION_SCHEME: &str = "d1";

/// What a benchmark file defines for the episodes it runs: [`DEFINITION_SCHEME`], then a SHA-256
/// hex digest of the rules an agent's episodes run under (`task`, `[episodes]`, `[limits]`,
/// `[fall]`, `[observations]`, `[action]`) and of its motions as supplied, in order: each clip's
/// name, category, frame rate and frames as parsed from its file (built-in clips, the arena's
/// code, by name). Left out is what changes no episode: the description, the motions'
/// attribution, where their files lie, `fps` and `split` (the clips say what they select),
/// whether they are hidden, and the scoring (`[metrics]`, `[ranking]`: stored episodes are
/// scored again by `arena admin submissions rescore`). Its first submission records it per
/// version (`Storage::create_submission`), so a file whose episodes changed without a version
/// bump takes no new submissions: its results would not be comparable.
pub fn definition(spec: &BenchmarkSpec, clips: &[arena_data::MotionClip]) -> String {
    use sha2::{Digest, Sha256};
    let mut rules = serde_json::to_value(spec).expect("a benchmark spec serialises");
    let builtin = matches!(spec.motions.source, arena_bench::spec::MotionSource::Builtin(_));
    if let Some(object) = rules.as_object_mut() {
        for scoring_or_words in ["name", "version", "description", "metrics", "ranking"] {
            object.remove(scoring_or_words);
        }
        if let Some(motions) = object.get_mut("motions").and_then(|m| m.as_object_mut()) {
            for unplayed in ["attribution", "hidden", "fps", "split"] {
                motions.remove(unplayed);
            }
            // Where the files lie is no part of it (their content is, below); the names of
            // built-in clips are.
            if !builtin {
                motions.remove("source");
            }
        }
    }
    let mut h = Sha256::new();
    h.update(rules.to_string().as_bytes());
    // Clips as supplied (parsed exactly from their files), not as resampled: the same files
    // give the same digest on every replica, whatever its maths library.
    if !builtin {
        for c in clips {
            h.update(c.name.as_bytes());
            h.update([0]);
            h.update(c.category.as_bytes());
            h.update([0]);
            h.update(c.fps.to_le_bytes());
            for v in &c.qpos {
                h.update(v.to_le_bytes());
            }
        }
    }
    let digest: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("{DEFINITION_SCHEME}:{digest}")
}

/// Whether a recorded definition says the file changed since: another digest of the same
/// scheme (one of another scheme was read otherwise, not edited).
pub fn changed_since(recorded: &str, current: &str) -> bool {
    let scheme = |d: &str| d.split_once(':').map(|(s, _)| s.to_string());
    recorded != current && scheme(recorded) == scheme(current)
}

/// A motion's identity by content: SHA-256 of its frame rate and frames (qpos at the control
/// rate), so the same clip under another name, in another folder or another benchmark matches.
fn motion_fingerprint(m: &arena_sim::motion::Motion) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(m.fps.to_le_bytes());
    for v in &m.qpos {
        h.update(v.to_le_bytes());
    }
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g1_smoke() -> BenchmarkSpec {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../benchmarks/g1-smoke.toml");
        BenchmarkSpec::read(&path, &metric_names()).unwrap()
    }

    /// Words, scoring and file locations leave the definition as it is; a rule of play or a clip
    /// changes it.
    #[test]
    fn the_definition_covers_what_the_episodes_run() {
        let spec = g1_smoke();
        let clip = |first: f64| arena_data::MotionClip {
            name: "walk".into(),
            category: "loco".into(),
            fps: 30.0,
            qpos: vec![first; 2 * arena_data::NUM_COLUMNS],
            witness: None,
        };
        let base = definition(&spec, &[]);
        assert!(base.starts_with("d1:") && base.len() == 3 + 64, "{base}");
        let mut same = spec.clone();
        same.description = "another text".into();
        same.motions.attribution = Some("someone".into());
        same.motions.hidden = true;
        same.metrics.success_threshold_m = 0.3;
        same.ranking.tie_breakers.clear();
        assert_eq!(definition(&same, &[]), base);
        let mut harder = spec.clone();
        harder.episodes.dr_level = 2;
        assert_ne!(definition(&harder, &[]), base);
        // Files: their content counts, not where they lie.
        let mut files = spec.clone();
        files.motions.source = arena_bench::spec::MotionSource::Files(vec!["a/walk.csv".into()]);
        let mut moved = files.clone();
        moved.motions.source = arena_bench::spec::MotionSource::Files(vec!["b/walk.csv".into()]);
        assert_eq!(definition(&files, &[clip(0.0)]), definition(&moved, &[clip(0.0)]));
        assert_ne!(definition(&files, &[clip(0.0)]), definition(&files, &[clip(0.5)]));
    }

    /// The digest of an unchanged file must not move with the code unnoticed: every server that
    /// recorded it would refuse new submissions. If this fails, a change altered what
    /// `definition` reads (a field of the rules of play, their serialisation): bump
    /// `DEFINITION_SCHEME` and put the new value here (after an edit of g1-smoke.toml's rules
    /// of play, which takes a version bump of its own, only the value).
    #[test]
    fn the_digest_of_g1_smoke_is_pinned() {
        assert_eq!(definition(&g1_smoke(), &[]), PINNED_G1_SMOKE);
    }

    const PINNED_G1_SMOKE: &str = "d1:768ff7f11992d478bbc517fd7315bde5521531fe381845ffa942e8b294ff6be4";
}
