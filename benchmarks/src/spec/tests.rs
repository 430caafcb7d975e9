use super::*;
use arena_data::{NUM_COLUMNS, write_g1_csv};

const KNOWN: [&str; 30] = [
    "emd",
    "mpjpe_l",
    "distance",
    "proximity",
    "vel_dist",
    "accel_dist",
    "bfm_vel_dist",
    "bfm_accel_dist",
    "obs_state_emd",
    "obs_state_distance",
    "obs_state_proximity",
    "emd_xpos",
    "mpjpe_g",
    "mpjpe_g_all",
    "mpjpe_rr",
    "mpjpe_rr_all",
    "body_vel_dist",
    "body_accel_dist",
    "success",
    "success_phc_linf",
    "success_phc_mean",
    "failure_time_s",
    "ndtw",
    "mjlab_success",
    "mjlab_failure_time_s",
    "mpkpe",
    "r_mpkpe",
    "joint_vel_error",
    "ee_pos_error",
    "ee_ori_error",
];

const MINIMAL: &str = r#"
name = "t"
version = 1
description = "test"
task = "tracking"
[motions]
builtin = ["stand", "squat"]
[metrics]
list = ["emd", "mpjpe_g"]
[ranking]
primary = "emd"
"#;

fn parse(text: &str) -> Result<BenchmarkSpec, SpecError> {
    BenchmarkSpec::parse(text, Path::new("bad.toml"), &KNOWN)
}

/// MINIMAL with `from` replaced by `to` (which must occur).
fn variant(from: &str, to: &str) -> String {
    assert!(MINIMAL.contains(from), "{from}");
    MINIMAL.replacen(from, to, 1)
}

#[test]
fn every_wrong_section_is_reported_at_once() {
    let text = variant("version = 1", "version = 0")
        .replace("[ranking]\nprimary = \"emd\"", "[ranking]\nprimary = \"nope\"")
        + "[episodes]\ndr_level = 7\n";
    let err = parse(&text).unwrap_err().to_string();
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    assert!(lines.iter().all(|l| l.starts_with("bad.toml: ")), "{err}");
    assert!(
        lines[0].contains(" version: ") && lines[1].contains(" episodes.dr_level: "),
        "{err}"
    );
    assert!(lines[2].contains(" ranking.primary: "), "{err}");
    // Each names the line its key is written on.
    for (line, at) in lines.iter().zip([3, 13, 11]) {
        assert!(line.ends_with(&format!("(line {at})")), "{line}");
    }
}

/// A consistency error (a value toml accepts, wrong for a benchmark) names its key's line,
/// written as a table's key, as a dotted key or inline.
#[test]
fn consistency_errors_name_the_line() {
    let unknown = variant("list = [\"emd\", \"mpjpe_g\"]", "list = [\"emd\", \"mpjpe_x\"]");
    let err = parse(&unknown).unwrap_err().to_string();
    assert!(err.contains("metrics.list: ") && err.ends_with("(line 9)"), "{err}");
    let dotted = "name = \"t\"\nversion = 1\ndescription = \"test\"\ntask = \"tracking\"\n\
                  metrics.list = [\"emd\", \"mpjpe_g\"]\nranking.primary = \"ndtw\"\n\
                  [motions]\nbuiltin = [\"stand\", \"squat\"]\n";
    let err = parse(dotted).unwrap_err().to_string();
    assert!(err.contains("ranking.primary: ") && err.ends_with("(line 6)"), "{err}");
    let inline = dotted.replace("ranking.primary = \"ndtw\"", "ranking = { primary = \"ndtw\" }");
    let err = parse(&inline).unwrap_err().to_string();
    assert!(err.contains("ranking.primary: ") && err.ends_with("(line 6)"), "{err}");
}

/// Parses `text`, expects an error naming bad.toml and `key` (and `also`).
fn expect_err(text: &str, key: &str, also: &str) {
    let err = parse(text).expect_err(text).to_string();
    assert!(err.starts_with("bad.toml: "), "{err}");
    assert!(err.contains(&format!(" {key}: ")), "wanted key {key}: {err}");
    assert!(err.contains(also), "wanted {also:?}: {err}");
}

#[test]
fn shipped_files_parse() {
    let listed = list_benchmarks(&shipped_dir(), &KNOWN);
    let names: Vec<&str> = listed
        .iter()
        .map(|(p, r)| match r {
            Ok(spec) => spec.name.as_str(),
            Err(e) => panic!("{}: {e}", p.display()),
        })
        .collect();
    assert!(
        names.contains(&"g1-smoke") && names.contains(&"g1-moves-dance"),
        "{names:?}"
    );
    let (_, smoke) = find_benchmark("g1-smoke", &shipped_dir(), &KNOWN).unwrap();
    let builtin: Vec<String> = builtin_motion_names().iter().map(|s| s.to_string()).collect();
    assert_eq!(smoke.motions.source, MotionSource::Builtin(builtin));
    assert_eq!(smoke.metrics.list.len(), KNOWN.len());
    assert_eq!(smoke.ranking.success.as_deref(), Some("success"));
    assert_eq!(smoke.ranking.survival.as_deref(), Some("failure_time_s"));
    assert_eq!(smoke.ranking.tie_breakers, ["mpjpe_g"]);
    // Both shipped benchmarks send 8 future reference rows for the BFM-Zero agent's window.
    assert_eq!(smoke.observations.reference_goal_horizon, 8);
    let (_, dance) = find_benchmark("g1-moves-dance", &shipped_dir(), &KNOWN).unwrap();
    assert_eq!(
        dance.motions.source,
        MotionSource::Dir {
            dir: PathBuf::from("."),
            pattern: Some("dance__*.csv".into())
        }
    );
    assert_eq!(dance.motions.fps, Some(60.0));
    assert!(dance.description.contains("CC-BY-4.0"));
    assert_eq!(dance.observations.reference_goal_horizon, 8);
    // The JSON form (`arena bench show --json`) round-trips.
    let json = serde_json::to_string(&dance).unwrap();
    assert_eq!(serde_json::from_str::<BenchmarkSpec>(&json).unwrap(), dance);
}

#[test]
fn defaults_apply() {
    let spec = parse(MINIMAL).unwrap();
    assert_eq!(spec.task, Task::Tracking);
    assert_eq!(spec.motions.split, SplitFilter::All);
    assert_eq!(
        spec.episodes,
        EpisodeRules {
            window: Window::Whole,
            repeats: 1,
            dr_level: 0,
            seed: 0
        }
    );
    assert_eq!(
        spec.limits,
        Limits {
            control_hz: 50,
            max_episode_s: 0.0,
            step_timeout_ms: 1000
        }
    );
    assert_eq!(spec.fall, FallSpec::None);
    assert_eq!(spec.observations.groups, DEFAULT_OBSERVATION_GROUPS);
    assert_eq!(spec.observations.reference_horizon, 1);
    assert_eq!(spec.observations.reference_goal_horizon, 0, "off unless asked for");
    assert!(!spec.observations.reveal_reference && !spec.observations.hide_motion_names);
    assert_eq!(spec.metrics.state_slice, [0, 23]);
    assert_eq!(spec.metrics.success_threshold_m, 0.5);
    assert_eq!(spec.metrics.ndtw_window_s, 1.0);
    assert_eq!(spec.ranking.direction, None);
    assert!(spec.ranking.tie_breakers.is_empty());
}

#[test]
fn full_sections_parse() {
    let text = format!(
        "{MINIMAL}direction = \"higher\"\ntie_breakers = [\"mpjpe_g\"]\n\
         [episodes]\nwindow = {{ length_s = 10, stride_s = 5.0 }}\nrepeats = 3\ndr_level = 2\nseed = 7\n\
         [limits]\nmax_episode_s = 20\nstep_timeout_ms = 200\n\
         [fall]\nrule = \"min_root_height\"\nthreshold_m = 0.3\n\
         [observations]\ngroups = [\"privileged_state\"]\nreference_horizon = 0\nreference_goal_horizon = 8\nreveal_reference = true\n"
    );
    let spec = parse(&text).unwrap();
    assert_eq!(spec.ranking.direction, Some(Direction::Higher));
    assert_eq!(
        spec.episodes.window,
        Window::Sliding {
            length_s: 10.0,
            stride_s: 5.0
        }
    );
    assert_eq!(
        (spec.episodes.repeats, spec.episodes.dr_level, spec.episodes.seed),
        (3, 2, 7)
    );
    assert_eq!(spec.limits.max_episode_s, 20.0);
    assert_eq!(spec.limits.step_timeout_ms, 200);
    assert_eq!(spec.fall, FallSpec::MinRootHeight(0.3));
    assert_eq!(spec.observations.groups, ["privileged_state"]);
    assert_eq!(spec.observations.reference_goal_horizon, 8);
    assert!(spec.observations.reveal_reference);
    let text = variant(
        "builtin = [\"stand\", \"squat\"]",
        "manifest = \"m.toml\"\nsplit = \"test\"",
    );
    let spec = parse(&text).unwrap();
    assert_eq!(spec.motions.source, MotionSource::Manifest("m.toml".into()));
    assert_eq!(spec.motions.split, SplitFilter::Test);
}

#[test]
fn bad_files_name_the_key() {
    expect_err(&format!("{MINIMAL}\n[extra]\n"), "extra", "unknown field");
    expect_err(
        &variant("version = 1", "version = 1\nnmae = \"x\""),
        "nmae",
        "unknown field",
    );
    expect_err(
        &format!("{MINIMAL}[episodes]\ndr_levl = 1\n"),
        "episodes.dr_levl",
        "line 13",
    );
    expect_err(
        &format!("{MINIMAL}[episodes]\ndr_level = 7\n"),
        "episodes.dr_level",
        "expected an integer 0-3, got 7",
    );
    expect_err(
        &format!("{MINIMAL}[episodes]\ndr_level = \"x\"\n"),
        "episodes.dr_level",
        "string \"x\", expected an integer (line 13)",
    );
    expect_err(
        &format!("{MINIMAL}[limits]\ncontrol_hz = 30\n"),
        "limits.control_hz",
        "fixed",
    );
    expect_err(
        &format!("{MINIMAL}[limits]\nstep_timeout_ms = 1000000000000\n"),
        "limits.step_timeout_ms",
        "at most a day",
    );
    expect_err(
        &variant("primary = \"emd\"", "primary = \"ndtw\""),
        "ranking.primary",
        "\"ndtw\"",
    );
    expect_err(&variant("\"mpjpe_g\"]", "\"mpjpe_x\"]"), "metrics.list", "emd, mpjpe_l");
    expect_err(
        &variant("[\"emd\", \"mpjpe_g\"]", "[\"emd\", \"emd\"]"),
        "metrics.list",
        "twice",
    );
    expect_err(
        &variant("builtin = [\"stand\", \"squat\"]", "builtin = []"),
        "motions.builtin",
        "non-empty",
    );
    expect_err(&variant("\"squat\"]", "\"jump\"]"), "motions.builtin", "step_in_place");
    expect_err(
        &variant("builtin = [\"stand\", \"squat\"]", "files = [\"a.csv\"]\ndir = \".\""),
        "motions",
        "files and dir",
    );
    expect_err(
        &variant("builtin = [\"stand\", \"squat\"]", "fps = 60"),
        "motions",
        "found none",
    );
    expect_err(
        &variant("[motions]\nbuiltin = [\"stand\", \"squat\"]", ""),
        "motions",
        "missing",
    );
    expect_err(
        &variant("builtin = [\"stand\", \"squat\"]", "files = [\"a.csv\"]"),
        "motions.fps",
        "required",
    );
    expect_err(
        &variant("\"squat\"]", "\"squat\"]\nfps = 50"),
        "motions.fps",
        "not allowed",
    );
    expect_err(
        &variant("\"squat\"]", "\"squat\"]\nsplit = \"val\""),
        "motions.split",
        "manifest",
    );
    expect_err(
        &variant("\"squat\"]", "\"squat\"]\nsplit = \"dev\""),
        "motions.split",
        "unknown variant",
    );
    expect_err(
        &variant(
            "builtin = [\"stand\", \"squat\"]",
            "dir = \".\"\nfps = 60\npattern = \"a*b*\"",
        ),
        "motions.pattern",
        "at most one",
    );
    expect_err(
        &format!("{MINIMAL}[episodes]\nwindow = {{ length_s = 10.0, stride_s = 0 }}\n"),
        "episodes.window.stride_s",
        "got 0",
    );
    expect_err(
        &format!("{MINIMAL}[episodes]\nwindow = \"half\"\n"),
        "episodes.window",
        "\"whole\"",
    );
    expect_err(
        &format!("{MINIMAL}[episodes]\nwindow = {{ length_s = 10.0 }}\n"),
        "episodes.window.stride_s",
        "missing",
    );
    expect_err(
        &format!("{MINIMAL}[episodes]\nrepeats = 0\n"),
        "episodes.repeats",
        "1-10000",
    );
    // Billions of repeats would expand into billions of episodes.
    expect_err(
        &format!("{MINIMAL}[episodes]\nrepeats = 4294967295\n"),
        "episodes.repeats",
        "got 4294967295",
    );
    expect_err(
        &variant("[\"emd\", \"mpjpe_g\"]", "[\"emd\"]\nndtw_window_s = 1e300"),
        "metrics.ndtw_window_s",
        "0-3600",
    );
    expect_err(
        &variant("[\"emd\", \"mpjpe_g\"]", "[\"emd\"]\nstate_slice = [10, 5]"),
        "metrics.state_slice",
        "[10, 5]",
    );
    expect_err(
        &variant("[\"emd\", \"mpjpe_g\"]", "[\"emd\"]\nstate_slice = [0, 65]"),
        "metrics.state_slice",
        "<= 61",
    );
    // The root's angular velocity: body frame × 0.25 for the robot, world frame for the reference.
    expect_err(
        &variant("[\"emd\", \"mpjpe_g\"]", "[\"emd\"]\nstate_slice = [58, 64]"),
        "metrics.state_slice",
        "different frames and scales",
    );
    assert_eq!(
        parse(&variant("[\"emd\", \"mpjpe_g\"]", "[\"emd\"]\nstate_slice = [0, 61]"))
            .unwrap()
            .metrics
            .state_slice,
        [0, 61]
    );
    expect_err(
        &format!("{MINIMAL}[fall]\nrule = \"min_root_height\"\n"),
        "fall.threshold_m",
        "missing",
    );
    expect_err(
        &format!("{MINIMAL}[fall]\nthreshold_m = 0.3\n"),
        "fall.threshold_m",
        "not allowed",
    );
    expect_err(
        &format!("{MINIMAL}[fall]\nrule = \"max_body_deviation\"\nthreshold_m = -1\n"),
        "fall.threshold_m",
        "positive",
    );
    expect_err(&variant("name = \"t\"\n", ""), "name", "missing");
    expect_err(&variant("name = \"t\"", "name = \"G1 Smoke\""), "name", "[a-z0-9-]+");
    expect_err(&variant("version = 1", "version = 0"), "version", ">= 1");
    expect_err(
        &variant("description = \"test\"", "description = \" \""),
        "description",
        "non-empty",
    );
    expect_err(
        &variant("task = \"tracking\"", "task = \"walking\""),
        "task",
        "tracking",
    );
    expect_err(
        &format!("{MINIMAL}[observations]\ngroups = [\"state\", \"state\"]\n"),
        "observations.groups",
        "twice",
    );
    expect_err(
        &format!("{MINIMAL}[observations]\ngroups = [\"secret\"]\n"),
        "observations.groups",
        "history_actor",
    );
    expect_err(
        &format!("{MINIMAL}[observations]\nreference_horizon = 251\n"),
        "observations.reference_horizon",
        "0-250",
    );
    expect_err(
        &format!("{MINIMAL}[observations]\nreference_goal_horizon = 251\n"),
        "observations.reference_goal_horizon",
        "0-250",
    );
    expect_err(
        &format!("{MINIMAL}[observations]\nreference_goal_horizon = -1\n"),
        "observations.reference_goal_horizon",
        "got -1",
    );
    expect_err(
        &format!("{MINIMAL}tie_breakers = [\"emd\"]\n"),
        "ranking.tie_breakers",
        "primary",
    );
    expect_err(
        &format!("{MINIMAL}tie_breakers = [\"ndtw\"]\n"),
        "ranking.tie_breakers",
        "metrics.list",
    );
    expect_err(
        &format!("{MINIMAL}[observations]\ngroups = [\"state\", \"reference\"]\n"),
        "observations.groups",
        "observations.reference_horizon",
    );
    // A success metric that is not 0/1 is named as such, even when a tie-breaker repeats it.
    expect_err(
        &format!("{MINIMAL}success = \"mpjpe_g\"\ntie_breakers = [\"mpjpe_g\"]\n"),
        "ranking.success",
        "0/1 success metric",
    );
    // PHC's single criteria are metrics, not rules: no failure time of their own.
    let with_mean = MINIMAL.replace("[\"emd\", \"mpjpe_g\"]", "[\"emd\", \"mpjpe_g\", \"success_phc_mean\"]");
    expect_err(
        &format!("{with_mean}success = \"success_phc_mean\"\n"),
        "ranking.success",
        "no failure time of its own",
    );
    expect_err(&format!("{MINIMAL}direction = \"up\"\n"), "ranking.direction", "lower");
    // ranking.survival: failure_time_s from metrics.list, and only there.
    expect_err(
        &format!("{MINIMAL}survival = \"failure_time_s\"\n"),
        "ranking.survival",
        "metrics.list",
    );
    expect_err(
        &format!("{MINIMAL}survival = \"mpjpe_g\"\n"),
        "ranking.survival",
        "time-to-failure",
    );
    let with_failure_time = MINIMAL.replace("[\"emd\", \"mpjpe_g\"]", "[\"emd\", \"mpjpe_g\", \"failure_time_s\"]");
    expect_err(
        &format!("{with_failure_time}survival = \"failure_time_s\"\ntie_breakers = [\"failure_time_s\"]\n"),
        "ranking.tie_breakers",
        "ranking.survival",
    );
    let spec = parse(&format!("{with_failure_time}survival = \"failure_time_s\"\n")).unwrap();
    assert_eq!(spec.ranking.survival.as_deref(), Some("failure_time_s"));
    assert!(
        spec.ranking.describe().contains("then highest mean failure_time_s"),
        "{}",
        spec.ranking.describe()
    );
    expect_err(&variant("[ranking]\nprimary = \"emd\"\n", ""), "ranking", "missing");
    // Syntax errors carry toml's position.
    let err = parse("name = \n").unwrap_err().to_string();
    assert!(err.starts_with("bad.toml: ") && err.contains("line 1"), "{err}");
}

fn spec_with(window: Window, repeats: u32, max_episode_s: f64, seed: u64) -> BenchmarkSpec {
    let mut spec = parse(MINIMAL).unwrap();
    spec.episodes.window = window;
    spec.episodes.repeats = repeats;
    spec.episodes.seed = seed;
    spec.limits.max_episode_s = max_episode_s;
    spec
}

fn starts(episodes: &[Episode]) -> Vec<(usize, f64, f64)> {
    episodes.iter().map(|e| (e.motion, e.start_s, e.duration_s)).collect()
}

#[test]
fn expand_whole_and_sliding() {
    let whole = spec_with(Window::Whole, 1, 0.0, 0)
        .expand_episodes(&[4.0, 2.5])
        .unwrap();
    assert_eq!(starts(&whole), [(0, 0.0, 4.0), (1, 0.0, 2.5)]);
    let sliding = Window::Sliding {
        length_s: 4.0,
        stride_s: 3.0,
    };
    // 10 s clip: windows at 0, 3, 6 (6 + 4 = 10 fits exactly); 3 s clip: one whole window.
    let eps = spec_with(sliding, 1, 0.0, 0).expand_episodes(&[10.0, 3.0]).unwrap();
    assert_eq!(
        starts(&eps),
        [(0, 0.0, 4.0), (0, 3.0, 4.0), (0, 6.0, 4.0), (1, 0.0, 3.0)]
    );
    // Float strides still keep a window that ends exactly at the clip's end.
    let fine = Window::Sliding {
        length_s: 0.3,
        stride_s: 0.1,
    };
    assert_eq!(spec_with(fine, 1, 0.0, 0).expand_episodes(&[1.0]).unwrap().len(), 8);
    assert!(
        spec_with(Window::Whole, 1, 0.0, 0)
            .expand_episodes(&[])
            .unwrap()
            .is_empty()
    );
}

#[test]
fn expand_repeats_cap_and_seeds() {
    let eps = spec_with(Window::Whole, 3, 5.0, 11)
        .expand_episodes(&[8.0, 2.0])
        .unwrap();
    assert_eq!(eps.len(), 6);
    for (i, e) in eps.iter().enumerate() {
        assert_eq!(e.index, i);
        assert_eq!(e.motion, i / 3);
        assert_eq!(e.repeat, (i % 3) as u32);
        assert_eq!(e.seed, episode_seed(11, i));
    }
    assert_eq!(eps[0].duration_s, 5.0, "capped by max_episode_s");
    assert_eq!(eps[3].duration_s, 2.0, "shorter than the cap");
    let mut seeds: Vec<u64> = eps.iter().map(|e| e.seed).collect();
    seeds.sort_unstable();
    seeds.dedup();
    assert_eq!(seeds.len(), 6, "distinct");
    let again = spec_with(Window::Whole, 3, 5.0, 11)
        .expand_episodes(&[8.0, 2.0])
        .unwrap();
    assert_eq!(again, eps, "deterministic");
    let other = spec_with(Window::Whole, 3, 5.0, 12)
        .expand_episodes(&[8.0, 2.0])
        .unwrap();
    assert!(other.iter().zip(&eps).all(|(a, b)| a.seed != b.seed));
    assert_ne!(episode_seed(1, 0), episode_seed(0, 1));
}

#[test]
fn an_expansion_beyond_the_limit_is_an_error_before_any_episode_is_made() {
    // One-step strides over two-hour clips, 10000 repeats: billions of episodes.
    let tiny = Window::Sliding {
        length_s: 0.02,
        stride_s: 0.02,
    };
    let e = spec_with(tiny, 10_000, 0.0, 0)
        .expand_episodes(&[7200.0, 7200.0])
        .unwrap_err();
    assert!(
        e.contains("7200000000 episodes") && e.contains("2 motions") && e.contains("at most 1000000"),
        "{e}"
    );
    // Exactly at the limit: made.
    let at = spec_with(Window::Whole, 10_000, 0.0, 0)
        .expand_episodes(&vec![1.0; 100])
        .unwrap();
    assert_eq!(at.len(), MAX_EPISODES);
    let over = spec_with(Window::Whole, 10_000, 0.0, 0).expand_episodes(&vec![1.0; 101]);
    assert!(over.unwrap_err().contains("1010000 episodes"));
}

/// A fresh folder under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!("arena-bench-spec-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

fn write_clip(dir: &Path, file: &str, frames: usize) {
    let mut qpos = Vec::new();
    for i in 0..frames {
        let mut f = vec![0.01 * i as f64; NUM_COLUMNS];
        f[3..7].copy_from_slice(&[1.0, 0.0, 0.0, 0.0]);
        qpos.extend(f);
    }
    let clip = MotionClip {
        name: file.into(),
        category: "cat".into(),
        fps: 30.0,
        qpos,
        witness: None,
    };
    write_g1_csv(&dir.join(file), &clip).unwrap();
}

fn source_spec(source: &str) -> BenchmarkSpec {
    parse(&variant("builtin = [\"stand\", \"squat\"]", source)).unwrap()
}

#[test]
fn load_clips_from_dir_files_and_manifest() {
    let tmp = TempDir::new("load");
    let root = &tmp.0;
    write_clip(root, "cat__y.csv", 4);
    write_clip(root, "cat__x.csv", 3);
    write_clip(root, "other__z.csv", 2);
    std::fs::write(root.join("README.md"), "not a motion").unwrap();

    let clips = source_spec("dir = \".\"\npattern = \"cat__*.csv\"\nfps = 30")
        .load_clips(root)
        .unwrap();
    let names: Vec<&str> = clips.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["x", "y"], "sorted by file name, filtered");
    assert_eq!(clips[0].num_frames(), 3);
    assert_eq!(clips[0].fps, 30.0);

    let all = source_spec("dir = \".\"\nfps = 30").load_clips(root).unwrap();
    assert_eq!(all.len(), 3, "every *.csv without a pattern");

    let err = source_spec("dir = \".\"\npattern = \"dance__*.csv\"\nfps = 30")
        .load_clips(root)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&root.display().to_string()) && err.contains("dance__*.csv"),
        "{err}"
    );

    let files = source_spec("files = [\"other__z.csv\", \"cat__x.csv\"]\nfps = 60")
        .load_clips(root)
        .unwrap();
    let names: Vec<&str> = files.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["z", "x"], "in the listed order");
    assert_eq!(files[0].fps, 60.0);

    let err = source_spec("files = [\"cat__missing.csv\"]\nfps = 60")
        .load_clips(root)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cat__missing.csv")
            && err.contains("no such file")
            && err.contains("relative to the motions root"),
        "{err}"
    );

    std::fs::create_dir_all(root.join("sets")).unwrap();
    std::fs::write(
        root.join("sets/m.toml"),
        "fps = 30\n[[clip]]\nfile = \"../cat__x.csv\"\nsplit = \"test\"\n[[clip]]\nfile = \"../cat__y.csv\"\n",
    )
    .unwrap();
    let test = source_spec("manifest = \"sets/m.toml\"\nsplit = \"test\"")
        .load_clips(root)
        .unwrap();
    assert_eq!(test.len(), 1);
    assert_eq!(test[0].name, "x");
    let every = source_spec("manifest = \"sets/m.toml\"\nfps = 30")
        .load_clips(root)
        .unwrap();
    assert_eq!(every.len(), 2);
    assert!(every.iter().all(|c| c.fps == 30.0), "the manifest's rate, said again");
    // Another rate would replace the manifest's unsaid: refused, naming the clip.
    let err = source_spec("manifest = \"sets/m.toml\"\nfps = 25")
        .load_clips(root)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("motions.fps = 25 would replace") && err.contains("\"x\" (30)"),
        "{err}"
    );
    let err = source_spec("manifest = \"sets/m.toml\"\nsplit = \"val\"")
        .load_clips(root)
        .unwrap_err()
        .to_string();
    assert!(err.contains("m.toml") && err.contains("\"val\""), "{err}");
}

#[test]
fn fps_that_would_be_ignored_is_refused_and_npz_folders_need_none() {
    let text = |source: &str| variant("builtin = [\"stand\", \"squat\"]", source);
    expect_err(
        &text("files = [\"a.npz\"]\nfps = 30"),
        "motions.fps",
        "NPZ motions alone",
    );
    expect_err(
        &text("dir = \"m\"\npattern = \"*.npz\"\nfps = 30"),
        "motions.fps",
        "remove it",
    );
    expect_err(&text("dir = \"m\"\npattern = \"*.csv\""), "motions.fps", "required");
    parse(&text("files = [\"a.npz\"]")).unwrap();
    parse(&text("files = [\"a.npz\", \"b.csv\"]\nfps = 30")).unwrap();
    // A folder without a pattern may hold NPZ motions alone; a CSV file found there without
    // fps fails when the clips load, named.
    parse(&text("dir = \"m\"")).unwrap();
    let tmp = TempDir::new("nofps");
    write_clip(&tmp.0, "a.csv", 3);
    let err = source_spec("dir = \".\"").load_clips(&tmp.0).unwrap_err().to_string();
    assert!(
        err.contains("a.csv") && err.contains("motions.fps is required"),
        "{err}"
    );
    // A folder whose files are NPZ alone would ignore `fps`: refused when the clips load.
    let npz = TempDir::new("npzfps");
    std::fs::write(npz.0.join("b.npz"), b"").unwrap();
    let err = source_spec("dir = \".\"\nfps = 30")
        .load_clips(&npz.0)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("NPZ files alone") && err.contains("remove motions.fps"),
        "{err}"
    );
}

#[test]
fn benchmark_names_the_server_cannot_serve_are_refused() {
    let long = "a".repeat(MAX_NAME_LEN + 1);
    expect_err(
        &variant("name = \"t\"", &format!("name = \"{long}\"")),
        "name",
        "at most 128",
    );
    expect_err(
        &variant("name = \"t\"", "name = \"-t\""),
        "name",
        "must not start with '-'",
    );
    parse(&variant(
        "name = \"t\"",
        &format!("name = \"{}\"", "a".repeat(MAX_NAME_LEN)),
    ))
    .unwrap();
}

#[test]
fn clips_sharing_a_name_are_refused_and_errors_come_in_path_order() {
    let tmp = TempDir::new("shared-names");
    let root = &tmp.0;
    std::fs::create_dir_all(root.join("x")).unwrap();
    std::fs::create_dir_all(root.join("y")).unwrap();
    write_clip(&root.join("x"), "a.csv", 3);
    write_clip(&root.join("y"), "a.csv", 3);
    let err = source_spec("files = [\"x/a.csv\", \"y/a.csv\"]\nfps = 30")
        .load_clips(root)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("y/a.csv") && err.contains("x/a.csv") && err.contains("named \"a\""),
        "{err}"
    );
    std::fs::write(
        root.join("m.toml"),
        "fps = 30\n[[clip]]\nfile = \"x/a.csv\"\n[[clip]]\nfile = \"y/a.csv\"\nsplit = \"test\"\n",
    )
    .unwrap();
    let err = source_spec("manifest = \"m.toml\"")
        .load_clips(root)
        .unwrap_err()
        .to_string();
    assert!(err.contains("named \"a\""), "{err}");
    source_spec("manifest = \"m.toml\"\nsplit = \"test\"")
        .load_clips(root)
        .unwrap();
    // Of several bad files, the first in path order is reported, whichever thread reads it.
    for k in 0..40 {
        std::fs::write(root.join(format!("x/bad{k:02}.csv")), "not,numbers\n").unwrap();
    }
    for _ in 0..5 {
        let err = source_spec("dir = \"x\"\nfps = 30")
            .load_clips(root)
            .unwrap_err()
            .to_string();
        assert!(err.contains("bad00.csv"), "{err}");
    }
    // A manifest lists CSV files: an NPZ entry is refused in words.
    std::fs::write(root.join("n.toml"), "fps = 30\n[[clip]]\nfile = \"x/a.npz\"\n").unwrap();
    let err = source_spec("manifest = \"n.toml\"")
        .load_clips(root)
        .unwrap_err()
        .to_string();
    assert!(err.contains("a.npz") && err.contains("`files` or `dir`"), "{err}");
}

#[test]
fn load_clips_errors() {
    let tmp = TempDir::new("missing");
    let missing = tmp.0.join("no-such-root");
    let err = source_spec("dir = \".\"\nfps = 30").load_clips(&missing).unwrap_err();
    assert!(matches!(err, SpecError::MissingMotionsRoot { .. }));
    let err = err.to_string();
    assert!(err.contains(&missing.display().to_string()), "{err}");
    assert!(
        err.contains("--motions-root") && err.contains(MOTIONS_ROOT_ENV),
        "{err}"
    );
    let err = parse(MINIMAL).unwrap().load_clips(&tmp.0).unwrap_err();
    assert!(matches!(err, SpecError::BuiltinMotions { .. }), "{err}");
}

#[test]
fn registry_lookup() {
    let tmp = TempDir::new("registry");
    std::fs::write(tmp.0.join("a.toml"), MINIMAL).unwrap();
    std::fs::write(tmp.0.join("broken.toml"), "name = \"broken\"\n").unwrap();
    std::fs::write(tmp.0.join("Cargo.toml"), "[package]\n").unwrap();
    std::fs::write(tmp.0.join("notes.txt"), "x").unwrap();
    let listed = list_benchmarks(&tmp.0, &KNOWN);
    let files: Vec<String> = listed
        .iter()
        .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, ["a.toml", "broken.toml"]);
    let (path, spec) = find_benchmark("t", &tmp.0, &KNOWN).unwrap();
    assert_eq!(
        (path.file_name().unwrap().to_str(), spec.name.as_str()),
        (Some("a.toml"), "t")
    );
    let by_path = tmp.0.join("a.toml");
    assert_eq!(
        find_benchmark(by_path.to_str().unwrap(), &tmp.0, &KNOWN).unwrap().1,
        spec
    );
    let err = find_benchmark("broken", &tmp.0, &KNOWN).unwrap_err().to_string();
    assert!(err.contains("broken.toml") && err.contains("version"), "{err}");
    let err = find_benchmark("nope", &tmp.0, &KNOWN).unwrap_err().to_string();
    assert!(err.contains("\"nope\"") && err.contains("available: t"), "{err}");
    std::fs::write(tmp.0.join("b.toml"), MINIMAL).unwrap();
    let err = find_benchmark("t", &tmp.0, &KNOWN).unwrap_err().to_string();
    assert!(err.contains("b.toml: name:") && err.contains("a.toml"), "{err}");
    // A missing folder or file is said once, in words (error chains print the cause too).
    let err = find_benchmark("t", &tmp.0.join("nowhere"), &KNOWN).unwrap_err();
    assert!(err.to_string().contains("nowhere (no such folder)"), "{err}");
    let err = find_benchmark("./nope.toml", &tmp.0, &KNOWN).unwrap_err();
    assert!(err.to_string().contains("no such benchmark file"), "{err}");
    assert!(
        std::error::Error::source(&err).is_none(),
        "the cause is in the message only"
    );
}

#[test]
fn action_rules_and_anchor_body() {
    let spec = parse(MINIMAL).unwrap();
    assert_eq!(spec.action, ActionRules::default());
    assert_eq!(spec.observations.anchor_body, "torso_link");
    let jp =
        parse(&(MINIMAL.to_string() + "[action]\nmode = \"joint_position\"\nkp_max = 300\nkd_max = 20.0\n")).unwrap();
    assert_eq!(jp.action.mode, ActionMode::JointPosition);
    assert_eq!(
        (jp.action.gains.as_str(), jp.action.presets.clone()),
        ("armature", vec!["armature".to_string()])
    );
    assert_eq!(jp.action.kp_max, Some(vec![300.0; 29]));
    let with = |extra: &str| MINIMAL.to_string() + extra;
    expect_err(
        &with("[action]\nmode = \"joint_position\"\ngains = \"stiff\"\n"),
        "action.gains",
        "armature, arena",
    );
    expect_err(
        &with("[action]\nmode = \"joint_position\"\nkp_max = [1.0, 2.0]\nkd_max = 1\n"),
        "action.kp_max",
        "a list of 2",
    );
    expect_err(
        &with("[action]\nmode = \"joint_position\"\nkp_max = 100\n"),
        "action",
        "both kp_max and kd_max",
    );
    expect_err(
        &with("[action]\nkp_max = 100\nkd_max = 5\n"),
        "action",
        "joint_position",
    );
    expect_err(
        &with("[action]\nmode = \"joint_position\"\nkd_max = -1\nkp_max = 1\n"),
        "action.kd_max",
        "positive",
    );
    // A presets list is the whole list: the default gains are never added to it.
    expect_err(
        &with("[action]\nmode = \"joint_position\"\npresets = [\"arena\"]\n"),
        "action.gains",
        "\"armature\" (the default) is not among action.presets [arena]",
    );
    expect_err(
        &with("[action]\nmode = \"joint_position\"\ngains = \"arena\"\npresets = [\"arena\", \"arena\"]\n"),
        "action.presets",
        "listed twice",
    );
    let arena_only = parse(&with(
        "[action]\nmode = \"joint_position\"\ngains = \"arena\"\npresets = [\"arena\"]\n",
    ))
    .unwrap();
    assert_eq!(arena_only.action.presets, ["arena"]);
    expect_err(
        &with("[observations]\nanchor_body = \"head_link\"\n"),
        "observations.anchor_body",
        "torso_link",
    );
    expect_err(
        &with("[observations]\ngroups = [\"imu\", \"gps\"]\n"),
        "observations.groups",
        "motion_anchor_ori_b",
    );
    let (_, robot) = find_benchmark("g1-smoke-robot", &shipped_dir(), &KNOWN).unwrap();
    assert_eq!(robot.action.presets, ["armature", "arena"]);
    assert_eq!(robot.observations.groups.len(), 8);
    let (_, dance) = find_benchmark("g1-moves-dance-robot", &shipped_dir(), &KNOWN).unwrap();
    assert_eq!(dance.action.mode, ActionMode::JointPosition);
}

#[test]
fn a_success_rule_computes_both_rules_and_ranks_by_its_own_failure_time() {
    let text = variant(
        "list = [\"emd\", \"mpjpe_g\"]",
        "list = [\"emd\", \"mpjpe_g\", \"mjlab_success\", \"mjlab_failure_time_s\", \"failure_time_s\"]",
    ) + "success = \"mjlab_success\"\nsurvival = \"mjlab_failure_time_s\"\n";
    let spec = parse(&text).unwrap();
    for name in crate::metrics::SUCCESS_RULE_METRICS {
        assert!(
            spec.metrics.list.iter().any(|m| m == name),
            "{name} computed: {:?}",
            spec.metrics.list
        );
    }
    // Without a success rule nothing is added.
    assert_eq!(parse(MINIMAL).unwrap().metrics.list, ["emd", "mpjpe_g"]);
    // PHC's failure time does not rank mjlab's rule, nor mjlab's PHC's.
    expect_err(
        &text.replace("survival = \"mjlab_failure_time_s\"", "survival = \"failure_time_s\""),
        "ranking.survival",
        "\"mjlab_failure_time_s\" (the failure time of \"mjlab_success\"",
    );
    let phc = text
        .replace("success = \"mjlab_success\"", "success = \"success\"")
        .replace("\"mpjpe_g\", ", "\"mpjpe_g\", \"success\", ");
    expect_err(&phc, "ranking.survival", "expected \"failure_time_s\"");
    // The shipped benchmarks: the -robot ones rank by mjlab's rule, the others by PHC's.
    for (name, rule, survival) in [
        ("g1-smoke", "success", "failure_time_s"),
        ("g1-moves-dance", "success", "failure_time_s"),
        ("g1-smoke-robot", "mjlab_success", "mjlab_failure_time_s"),
        ("g1-moves-dance-robot", "mjlab_success", "mjlab_failure_time_s"),
    ] {
        let (_, spec) = find_benchmark(name, &shipped_dir(), &KNOWN).unwrap();
        assert_eq!(
            (spec.ranking.success.as_deref(), spec.ranking.survival.as_deref()),
            (Some(rule), Some(survival)),
            "{name}"
        );
    }
}
