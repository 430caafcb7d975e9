//! Trajectory file (HDF5) round trips, validation, and crash safety.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use arena_data::TrajectoryRows;
use arena_data::trajectory_file::{
    self, ACTION_WIDTH, BODY_WIDTH, DATASETS, EpisodeRecord, FORMAT_NAME, OPTIONAL_DATASETS, PreparedEpisode,
    QPOS_WIDTH, QVEL_WIDTH, STATE_WIDTH, TrajectoryFile, TrajectoryFileError, episode_names, read_episode, read_header,
};

/// Environment variable that turns `crash_helper_writes_forever` into the crash test's child.
const CRASH_HELPER_ENV: &str = "MIMICARENA_TRAJECTORY_CRASH_HELPER";

/// A fresh, empty directory under cargo's per-target temp dir, unique per test and process.
fn test_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("trajectory_file-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// SplitMix64: deterministic, distinct values per (episode, salt).
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Full-precision values in [-1000, 1000): every mantissa bit matters for exact equality.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2000.0 - 1000.0
    }

    fn vec(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.next_f64()).collect()
    }
}

/// A deterministic episode of `rows` rows whose content depends on `episode` and `salt`.
fn sample_record(episode: u32, rows: usize, salt: u64) -> EpisodeRecord {
    let mut rng = Rng(u64::from(episode) * 1_000_003 + salt);
    EpisodeRecord {
        episode,
        motion: format!("walk_{episode}_{salt}"),
        category: "locomotion".into(),
        seed: rng.next_u64(),
        dr_level: episode % 4,
        status: if rows == 0 { "failed".into() } else { "completed".into() },
        reason: if rows == 0 {
            "policy crashed: ünïcode ✓".into()
        } else {
            String::new()
        },
        start_s: rng.next_f64().abs(),
        duration_s: rows as f64 * 0.02,
        // Where scoring stopped, on odd episodes only: the attribute is optional.
        scored_until_s: (rows > 1 && episode % 2 == 1).then_some(0.02 * (rows / 2) as f64),
        rows: TrajectoryRows {
            times: (0..rows).map(|i| i as f64 * 0.02).collect(),
            qpos: rng.vec(rows * QPOS_WIDTH),
            qvel: rng.vec(rows * QVEL_WIDTH),
            body_pos: rng.vec(rows * BODY_WIDTH),
            actions: rng.vec(rows * ACTION_WIDTH),
            ref_qpos: rng.vec(rows * QPOS_WIDTH),
            ref_body_pos: rng.vec(rows * BODY_WIDTH),
            state: rng.vec(rows * STATE_WIDTH),
            ref_state: rng.vec(rows * STATE_WIDTH),
            // Optional datasets: recorded on even episodes only (files without them still read).
            targets: if episode.is_multiple_of(2) {
                rng.vec(rows * ACTION_WIDTH)
            } else {
                Vec::new()
            },
            torques: if episode.is_multiple_of(2) {
                rng.vec(rows * ACTION_WIDTH)
            } else {
                Vec::new()
            },
            feedforward: if episode.is_multiple_of(4) {
                rng.vec(rows * ACTION_WIDTH)
            } else {
                Vec::new()
            },
        },
    }
}

/// Rows of the crash helper's episode `i`: varied, some above one 512-row chunk.
fn crash_rows(i: u32) -> usize {
    40 + (i as usize * 211) % 700
}

#[test]
fn round_trip_two_episodes_with_attributes() {
    let dir = test_dir("round_trip");
    let path = dir.join("nested/deeper/sub.h5");
    let mut file = TrajectoryFile::open_or_create(&path, "sub-123", "g1-test").unwrap();
    assert_eq!(file.path(), path);
    let a = sample_record(0, 250, 1);
    let b = sample_record(7, 600, 2);
    file.write_episode(&a).unwrap();
    file.write_episode(&b).unwrap();

    assert_eq!(
        read_header(&path).unwrap(),
        ("sub-123".to_owned(), "g1-test".to_owned())
    );
    assert_eq!(episode_names(&path).unwrap(), ["episode_00000", "episode_00007"]);
    assert_eq!(read_episode(&path, "episode_00000").unwrap(), a);
    assert_eq!(read_episode(&path, "episode_00007").unwrap(), b);
    assert_ne!(a.rows.qpos[..10], b.rows.qpos[..10]);

    // Attributes as stored, including `steps` and the root header.
    let h5 = hdf5::File::open(&path).unwrap();
    let root_str = |n: &str| {
        h5.attr(n)
            .unwrap()
            .read_scalar::<hdf5::types::VarLenUnicode>()
            .unwrap()
            .to_string()
    };
    assert_eq!(root_str("format"), FORMAT_NAME);
    assert_eq!(h5.attr("version").unwrap().read_scalar::<u32>().unwrap(), 1);
    let g = h5.group("episode_00007").unwrap();
    assert_eq!(g.attr("steps").unwrap().read_scalar::<u64>().unwrap(), 599);
    assert_eq!(g.attr("seed").unwrap().read_scalar::<u64>().unwrap(), b.seed);
    assert_eq!(g.attr("dr_level").unwrap().read_scalar::<u32>().unwrap(), 3);
    let status = g
        .attr("status")
        .unwrap()
        .read_scalar::<hdf5::types::VarLenUnicode>()
        .unwrap();
    assert_eq!(status.as_str(), "completed");
    assert_eq!(g.dataset("times").unwrap().shape(), [600]);
    assert_eq!(g.dataset("body_pos").unwrap().shape(), [600, 93]);
    let mut names = g.member_names().unwrap();
    names.sort();
    let mut expected: Vec<&str> = DATASETS.iter().map(|(n, _)| *n).collect();
    expected.sort();
    assert_eq!(names, expected);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn datasets_are_chunked_and_the_32_bit_ones_compressed() {
    let dir = test_dir("chunked");
    let path = dir.join("sub.h5");
    let mut file = TrajectoryFile::open_or_create(&path, "s", "b").unwrap();
    // Episode 4 records every optional dataset.
    file.write_episode(&sample_record(4, 1000, 3)).unwrap();
    file.write_episode(&sample_record(2, 3, 3)).unwrap();
    let h5 = hdf5::File::open(&path).unwrap();
    for (group, rows) in [("episode_00004", 1000), ("episode_00002", 3)] {
        for (name, width) in DATASETS.iter().chain(&OPTIONAL_DATASETS) {
            let g = h5.group(group).unwrap();
            if !g.link_exists(name) {
                assert_eq!((group, *name), ("episode_00002", "feedforward"));
                continue;
            }
            let ds = g.dataset(name).unwrap();
            let rows_of = |r: usize| if *width == 1 { vec![r] } else { vec![r, *width] };
            if trajectory_file::COMPRESSED_DATASETS.contains(name) {
                assert_eq!(ds.chunk(), Some(rows_of(rows.min(512))), "{group}/{name}");
                assert_eq!(
                    ds.filters(),
                    [hdf5::filters::Filter::Shuffle, hdf5::filters::Filter::Deflate(1)],
                    "{group}/{name}"
                );
            } else {
                // Raw and contiguous: exactly its bytes, no partly filled last chunk.
                assert!(!ds.is_chunked() && ds.filters().is_empty(), "{group}/{name}");
                assert_eq!(ds.storage_size(), (rows * width * 8) as u64, "{group}/{name}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rewriting_an_episode_replaces_it() {
    let dir = test_dir("replace");
    let path = dir.join("sub.h5");
    let mut file = TrajectoryFile::open_or_create(&path, "s", "b").unwrap();
    file.write_episode(&sample_record(3, 300, 1)).unwrap();
    file.write_episode(&sample_record(4, 10, 1)).unwrap();
    let second = sample_record(3, 120, 2);
    file.write_episode(&second).unwrap();
    assert_eq!(episode_names(&path).unwrap(), ["episode_00003", "episode_00004"]);
    assert_eq!(read_episode(&path, "episode_00003").unwrap(), second);
    assert_eq!(read_episode(&path, "episode_00004").unwrap(), sample_record(4, 10, 1));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The run each group holds (`attempt`): absent until set, set again replaced, kept by a copy
/// into another file, and the episode's own contents untouched.
#[test]
fn the_run_a_group_holds_is_recorded() {
    let dir = test_dir("attempts");
    let path = dir.join("sub.h5");
    let mut file = TrajectoryFile::open_or_create(&path, "s", "b").unwrap();
    file.write_episode(&sample_record(3, 30, 1)).unwrap();
    file.write_episode(&sample_record(4, 10, 1)).unwrap();
    let attempts = |p: &Path| trajectory_file::episode_attempts(p).unwrap();
    assert_eq!(
        attempts(&path),
        [("episode_00003".to_string(), None), ("episode_00004".to_string(), None)]
    );
    file.set_attempts(&[(3, 1)]).unwrap();
    assert_eq!(
        attempts(&path),
        [
            ("episode_00003".to_string(), Some(1)),
            ("episode_00004".to_string(), Some(0))
        ],
        "a group without a run in a file that records them holds none"
    );
    file.set_attempts(&[(3, 5), (4, 2)]).unwrap();
    assert_eq!(
        attempts(&path),
        [
            ("episode_00003".to_string(), Some(5)),
            ("episode_00004".to_string(), Some(2))
        ]
    );
    assert_eq!(read_episode(&path, "episode_00003").unwrap(), sample_record(3, 30, 1));
    let copy = dir.join("copy.h5");
    let mut other = TrajectoryFile::open_or_create(&copy, "s", "b").unwrap();
    other.copy_episode_from(&path, "episode_00004").unwrap();
    assert_eq!(attempts(&copy), [("episode_00004".to_string(), Some(2))]);
    assert!(file.set_attempts(&[(9, 1)]).is_err(), "no such group");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn wrong_sized_array_is_refused_and_nothing_written() {
    let dir = test_dir("wrong_size");
    let path = dir.join("sub.h5");
    let mut file = TrajectoryFile::open_or_create(&path, "s", "b").unwrap();
    file.write_episode(&sample_record(0, 20, 1)).unwrap();
    let before = std::fs::read(&path).unwrap();

    let mut bad = sample_record(3, 250, 1);
    bad.rows.qpos.truncate(100);
    let err = file.write_episode(&bad).unwrap_err();
    assert!(matches!(err, TrajectoryFileError::WrongLength { .. }), "{err:?}");
    let msg = err.to_string();
    assert_eq!(
        msg,
        format!(
            "{}: episode_00003/qpos: expected 250×36 values, got 100",
            path.display()
        )
    );

    let mut bad = sample_record(5, 10, 1);
    bad.rows.ref_state.push(0.0);
    let msg = file.write_episode(&bad).unwrap_err().to_string();
    assert!(
        msg.contains("episode_00005/ref_state") && msg.contains("expected 10×64 values, got 641"),
        "{msg}"
    );

    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "file changed after a refused write"
    );
    assert_eq!(episode_names(&path).unwrap(), ["episode_00000"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn reopening_an_existing_file_appends() {
    let dir = test_dir("reopen");
    let path = dir.join("sub.h5");
    let first = sample_record(0, 50, 1);
    let second = sample_record(1, 60, 1);
    TrajectoryFile::open_or_create(&path, "sub-a", "bench-a")
        .unwrap()
        .write_episode(&first)
        .unwrap();
    // A restarted server reopens the file; the header keeps the original values.
    let mut again = TrajectoryFile::open_or_create(&path, "sub-a", "bench-a").unwrap();
    again.write_episode(&second).unwrap();
    assert_eq!(read_header(&path).unwrap(), ("sub-a".to_owned(), "bench-a".to_owned()));
    assert_eq!(episode_names(&path).unwrap(), ["episode_00000", "episode_00001"]);
    assert_eq!(read_episode(&path, "episode_00000").unwrap(), first);
    assert_eq!(read_episode(&path, "episode_00001").unwrap(), second);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn foreign_hdf5_file_is_refused() {
    let dir = test_dir("foreign");
    let path = dir.join("other.h5");
    {
        let h5 = hdf5::File::create(&path).unwrap();
        h5.new_dataset::<f64>().shape(3).create("x").unwrap();
    }
    let err = TrajectoryFile::open_or_create(&path, "s", "b").unwrap_err();
    assert!(matches!(err, TrajectoryFileError::NotTrajectoryFile { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.starts_with(&path.display().to_string()), "{msg}");
    assert!(
        msg.contains("not a mimicarena-trajectories file") && msg.contains("format"),
        "{msg}"
    );
    assert!(matches!(
        episode_names(&path),
        Err(TrajectoryFileError::NotTrajectoryFile { .. })
    ));

    // Right attribute name, wrong value.
    {
        let h5 = hdf5::File::create(&path).unwrap();
        let v: hdf5::types::VarLenUnicode = "something-else".parse().unwrap();
        h5.new_attr::<hdf5::types::VarLenUnicode>()
            .create("format")
            .unwrap()
            .write_scalar(&v)
            .unwrap();
    }
    let msg = TrajectoryFile::open_or_create(&path, "s", "b").unwrap_err().to_string();
    assert!(msg.contains("something-else"), "{msg}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn non_hdf5_file_is_refused() {
    let dir = test_dir("not_hdf5");
    let path = dir.join("notes.h5");
    std::fs::write(&path, "this is a text file, not HDF5\n").unwrap();
    let err = TrajectoryFile::open_or_create(&path, "s", "b").unwrap_err();
    assert!(matches!(err, TrajectoryFileError::NotTrajectoryFile { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "{}: not a mimicarena-trajectories file: not an HDF5 file",
            path.display()
        )
    );
    assert!(read_header(&path).is_err());
    // The file is left alone.
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "this is a text file, not HDF5\n"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn zero_row_episode_round_trips() {
    let dir = test_dir("zero_rows");
    let path = dir.join("sub.h5");
    let mut file = TrajectoryFile::open_or_create(&path, "s", "b").unwrap();
    let empty = sample_record(12, 0, 1);
    assert!(empty.rows.times.is_empty() && !empty.reason.is_empty());
    file.write_episode(&empty).unwrap();
    file.write_episode(&sample_record(13, 5, 1)).unwrap();
    assert_eq!(read_episode(&path, "episode_00012").unwrap(), empty);
    assert_eq!(read_episode(&path, "episode_00013").unwrap(), sample_record(13, 5, 1));
    let h5 = hdf5::File::open(&path).unwrap();
    let g = h5.group("episode_00012").unwrap();
    assert_eq!(g.attr("steps").unwrap().read_scalar::<u64>().unwrap(), 0);
    assert_eq!(g.dataset("qpos").unwrap().shape(), [0, 36]);
    assert_eq!(g.dataset("times").unwrap().shape(), [0]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_episode_and_missing_file_are_errors() {
    let dir = test_dir("missing");
    let path = dir.join("sub.h5");
    assert!(matches!(read_header(&path), Err(TrajectoryFileError::Io { .. })));
    TrajectoryFile::open_or_create(&path, "s", "b").unwrap();
    assert!(episode_names(&path).unwrap().is_empty());
    let err = read_episode(&path, "episode_00001").unwrap_err();
    assert!(matches!(err, TrajectoryFileError::MissingEpisode { .. }), "{err:?}");
    assert!(err.to_string().contains("episode_00001"));
    assert!(read_episode(&path, "qpos").is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn copying_an_episode_moves_its_stored_chunks() {
    let dir = test_dir("copy");
    let (part, merged) = (dir.join("part.h5"), dir.join("merged.h5"));
    let mut source = TrajectoryFile::open_or_create(&part, "s", "b").unwrap();
    // 1200 rows: three chunks; episode 4 carries every optional dataset; 6 has no rows.
    let records = [
        sample_record(4, 1200, 1),
        sample_record(5, 7, 1),
        sample_record(6, 0, 1),
    ];
    for r in &records {
        source.write_episode(r).unwrap();
    }
    let mut target = TrajectoryFile::open_or_create(&merged, "s", "b").unwrap();
    // A stale group of the same name is replaced.
    target.write_episode(&sample_record(4, 3, 9)).unwrap();
    for r in &records {
        let name = trajectory_file::episode_group_name(r.episode);
        target.copy_episode_from(&part, &name).unwrap();
        assert_eq!(&read_episode(&merged, &name).unwrap(), r, "{name}");
    }
    assert_eq!(
        episode_names(&merged).unwrap(),
        ["episode_00004", "episode_00005", "episode_00006"]
    );
    let (from, to) = (hdf5::File::open(&part).unwrap(), hdf5::File::open(&merged).unwrap());
    for (name, _) in DATASETS {
        let (a, b) = (
            from.dataset(&format!("episode_00004/{name}")).unwrap(),
            to.dataset(&format!("episode_00004/{name}")).unwrap(),
        );
        assert_eq!(b.filters(), a.filters(), "{name}");
        assert_eq!(b.chunk(), a.chunk(), "{name}");
        assert_eq!(b.storage_size(), a.storage_size(), "{name}");
    }
    // HDF5 shares an open file between handles, and these were opened with other options.
    drop((from, to));
    // Errors name what is wrong and leave the target as it was.
    let err = target.copy_episode_from(&part, "episode_00009").unwrap_err();
    assert!(matches!(err, TrajectoryFileError::MissingEpisode { .. }), "{err:?}");
    let err = target
        .copy_episode_from(&dir.join("none.h5"), "episode_00004")
        .unwrap_err();
    assert!(matches!(err, TrajectoryFileError::Io { .. }), "{err:?}");
    assert!(target.copy_episode_from(&part, "qpos").is_err());
    assert_eq!(episode_names(&merged).unwrap().len(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The crash test's child: appends episodes to the file named by `CRASH_HELPER_ENV` forever,
/// printing `wrote N` after each. A no-op in a normal test run.
#[test]
fn crash_helper_writes_forever() {
    let Some(path) = std::env::var_os(CRASH_HELPER_ENV) else {
        return;
    };
    let path = PathBuf::from(path);
    let mut file = TrajectoryFile::open_or_create(&path, "crash", "bench").unwrap();
    let started = Instant::now();
    // The time cap only matters if the parent died without killing us.
    for i in 0u32.. {
        if started.elapsed() > Duration::from_secs(120) {
            break;
        }
        file.write_episode(&sample_record(i, crash_rows(i), 9)).unwrap();
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "wrote {}", i + 1).unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn sigkill_between_episodes_keeps_completed_episodes() {
    let dir = test_dir("crash");
    let path = dir.join("sub.h5");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash_helper_writes_forever",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CRASH_HELPER_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut wrote = 0;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if line.starts_with("wrote ") {
            wrote += 1;
            if wrote == 3 {
                break;
            }
        }
    }
    // The child is now writing the next episode. Vary the moment of the kill across runs (by
    // pid) so it lands in different phases of that write: open, replace, datasets, flush, close.
    std::thread::sleep(Duration::from_millis(u64::from(std::process::id()) % 40));
    child.kill().unwrap(); // SIGKILL on Unix: no destructors, no HDF5 close.
    child.wait().unwrap();
    assert_eq!(wrote, 3, "helper stopped before writing 3 episodes");

    assert_eq!(read_header(&path).unwrap(), ("crash".to_owned(), "bench".to_owned()));
    let names = episode_names(&path).unwrap();
    assert!(names.len() >= 3, "{names:?}");
    for name in &names {
        let record = read_episode(&path, name).unwrap_or_else(|e| panic!("{e}"));
        let i = record.episode;
        assert_eq!(*name, trajectory_file::episode_group_name(i));
        assert_eq!(record, sample_record(i, crash_rows(i), 9), "{name}");
    }
    for (i, name) in names.iter().take(3).enumerate() {
        assert_eq!(*name, format!("episode_{i:05}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_group_with_a_wrong_shape_is_refused_by_readers_and_copies() {
    let dir = test_dir("wrong_shape");
    let (path, merged) = (dir.join("sub.h5"), dir.join("merged.h5"));
    TrajectoryFile::open_or_create(&path, "s", "b")
        .unwrap()
        .write_episode(&sample_record(2, 10, 1))
        .unwrap();
    {
        // `torques` (optional) with 9 rows where the episode has 10.
        let h5 = hdf5::File::open_rw(&path).unwrap();
        let g = h5.group("episode_00002").unwrap();
        g.unlink("torques").unwrap();
        g.new_dataset::<f64>()
            .shape((9, ACTION_WIDTH))
            .create("torques")
            .unwrap();
    }
    let err = read_episode(&path, "episode_00002").unwrap_err();
    assert!(matches!(err, TrajectoryFileError::InvalidEpisode { .. }), "{err:?}");
    assert!(err.to_string().contains("torques"), "{err}");
    let mut target = TrajectoryFile::open_or_create(&merged, "s", "b").unwrap();
    let err = target.copy_episode_from(&path, "episode_00002").unwrap_err();
    assert!(err.to_string().contains("torques"), "{err}");
    assert!(episode_names(&merged).unwrap().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// HDF5's deflate filter runs on zlib-ng (the features of `libz-sys` in Cargo.toml): a
/// dependency change that brings stock zlib back would make every submission's compression about
/// 2.5× slower without failing anything else.
#[test]
fn the_deflate_filter_links_zlib_ng() {
    // SAFETY: zlibVersion returns a static NUL-terminated string.
    let version = unsafe { std::ffi::CStr::from_ptr(libz_sys::zlibVersion()) };
    let version = version.to_string_lossy();
    assert!(version.contains("zlib-ng"), "zlib is {version}");
}

/// Chunk `i` (of 512 rows) of `ds` as stored: filtered bytes, all filters applied.
fn raw_chunk(ds: &hdf5::Dataset, i: u64) -> Vec<u8> {
    let offset = [i * 512, 0];
    let (mut mask, mut addr, mut size) = (1u32, 0, 0);
    // SAFETY: `offset` has an entry per dimension (rank ≤ 2); the outputs are plain integers.
    let status = hdf5::sync::sync(|| unsafe {
        hdf5_sys::h5d::H5Dget_chunk_info_by_coord(ds.id(), offset.as_ptr(), &mut mask, &mut addr, &mut size)
    });
    assert!(
        status >= 0 && mask == 0,
        "chunk {i}: status {status}, filter mask {mask}"
    );
    let mut buf = vec![0u8; size as usize];
    let mut len = buf.len();
    // SAFETY: as above; `buf` holds `len` bytes, the chunk's stored size.
    let status = hdf5::sync::sync(|| unsafe {
        let (id, plist) = (ds.id(), hdf5_sys::h5p::H5P_DEFAULT);
        hdf5_sys::h5d::H5Dread_chunk(id, plist, offset.as_ptr(), &mut mask, buf.as_mut_ptr().cast(), &mut len)
    });
    assert!(status >= 0, "reading chunk {i}: status {status}");
    buf
}

/// The compressed datasets are shuffled and deflated by `trajectory_chunks` (outside HDF5's
/// lock) and handed over with `H5Dwrite_chunk`: the chunks must be what HDF5's own filters
/// store for the same values, including the zero-padded last chunk past 512 rows.
#[test]
fn chunks_filtered_outside_hdf5_are_the_ones_hdf5_stores() {
    let dir = test_dir("filtered_outside");
    let ours = dir.join("ours.h5");
    let mut file = TrajectoryFile::open_or_create(&ours, "s", "b").unwrap();
    // Episode 4 records every optional dataset, `feedforward` among them.
    let record = sample_record(4, 1100, 5);
    let prepared = PreparedEpisode::new(record.clone());
    file.write_prepared(&prepared).unwrap();
    assert_eq!(read_episode(&ours, "episode_00004").unwrap(), record);

    let theirs = dir.join("theirs.h5");
    let h5 = hdf5::File::create(&theirs).unwrap();
    let mine = hdf5::File::open(&ours).unwrap();
    let rows = record.num_rows();
    let arrays = record.rows.arrays().into_iter().chain(record.rows.optional_arrays());
    for ((name, width), values) in DATASETS.iter().chain(&OPTIONAL_DATASETS).zip(arrays) {
        if !trajectory_file::COMPRESSED_DATASETS.contains(name) {
            continue;
        }
        assert!(!values.is_empty(), "{name} is recorded");
        let builder = h5.new_dataset::<f64>().shuffle().deflate(1);
        let ds = match width {
            1 => builder.chunk(512).shape(rows).create(*name),
            w => builder.chunk((512, *w)).shape((rows, *w)).create(*name),
        }
        .unwrap();
        ds.write_raw(values).unwrap();
        let stored = mine.group("episode_00004").unwrap().dataset(name).unwrap();
        assert_eq!(stored.storage_size(), ds.storage_size(), "{name}: stored bytes");
        for chunk in 0..3 {
            assert_eq!(
                raw_chunk(&stored, chunk),
                raw_chunk(&ds, chunk),
                "{name}: chunk {chunk}"
            );
        }
        assert_eq!(stored.read_raw::<f64>().unwrap(), values, "{name}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The merge's writer: many prepared episodes (a zero-row one among them) in one opening of a
/// file that already holds one, each read back as written, the earlier episode kept.
#[test]
fn prepared_episodes_written_in_one_opening_read_back() {
    let dir = test_dir("prepared_all");
    let path = dir.join("sub.h5");
    let mut file = TrajectoryFile::open_or_create(&path, "s", "b").unwrap();
    let first = sample_record(0, 7, 9);
    file.write_episode(&first).unwrap();
    let records = [
        sample_record(1, 600, 2),
        sample_record(2, 0, 3),
        sample_record(3, 101, 4),
    ];
    file.write_prepared_all(records.iter().cloned().map(PreparedEpisode::new))
        .unwrap();
    assert_eq!(read_episode(&path, "episode_00000").unwrap(), first);
    for r in &records {
        let name = format!("episode_{:05}", r.episode);
        assert_eq!(read_episode(&path, &name).unwrap(), *r, "{name}");
    }
    // A wrong-sized array stops the batch with the episode named; the file stays readable.
    let mut bad = sample_record(5, 10, 1);
    bad.rows.qvel.pop();
    let err = file
        .write_prepared_all([PreparedEpisode::new(sample_record(4, 10, 1)), PreparedEpisode::new(bad)])
        .unwrap_err()
        .to_string();
    assert!(err.contains("episode_00005/qvel"), "{err}");
    assert_eq!(read_episode(&path, "episode_00004").unwrap(), sample_record(4, 10, 1));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The batch writer makes its datasets and attributes with types and property lists made once
/// per opening: every one must get exactly the properties the `hdf5` crate's builder gives it
/// (datasets: layout, chunk, filters, fill time, no time stamps, type, shape, stored size;
/// attributes: type, shape, name encoding), and read back the same.
#[test]
fn a_batch_makes_the_datasets_the_builder_makes() {
    let dir = test_dir("batch_properties");
    let (one_by_one, batch) = (dir.join("one.h5"), dir.join("batch.h5"));
    // 600 rows (two chunks), none, 101, and episode 4 with every optional dataset.
    let records = [
        sample_record(1, 600, 2),
        sample_record(2, 0, 3),
        sample_record(3, 101, 4),
        sample_record(4, 40, 5),
    ];
    let mut file = TrajectoryFile::open_or_create(&one_by_one, "s", "b").unwrap();
    for r in &records {
        file.write_episode(r).unwrap();
    }
    TrajectoryFile::open_or_create(&batch, "s", "b")
        .unwrap()
        .write_prepared_all(records.iter().cloned().map(PreparedEpisode::new))
        .unwrap();
    let (a, b) = (
        hdf5::File::open(&one_by_one).unwrap(),
        hdf5::File::open(&batch).unwrap(),
    );
    let mut compared = 0;
    for r in &records {
        let name = format!("episode_{:05}", r.episode);
        let (ga, gb) = (a.group(&name).unwrap(), b.group(&name).unwrap());
        assert_eq!(ga.member_names().unwrap(), gb.member_names().unwrap(), "{name}");
        assert_eq!(ga.attr_names().unwrap(), gb.attr_names().unwrap(), "{name}");
        for attr in ga.attr_names().unwrap() {
            let (aa, ab) = (ga.attr(&attr).unwrap(), gb.attr(&attr).unwrap());
            let at = format!("{name}@{attr}");
            assert_eq!(
                aa.dtype().unwrap().to_descriptor().unwrap(),
                ab.dtype().unwrap().to_descriptor().unwrap(),
                "{at}"
            );
            assert_eq!(aa.shape(), ab.shape(), "{at}");
            assert_eq!(
                aa.acpl().unwrap().char_encoding(),
                ab.acpl().unwrap().char_encoding(),
                "{at}"
            );
            compared += 1;
        }
        for member in ga.member_names().unwrap() {
            let (da, db) = (ga.dataset(&member).unwrap(), gb.dataset(&member).unwrap());
            let (pa, pb) = (da.dcpl().unwrap(), db.dcpl().unwrap());
            let at = format!("{name}/{member}");
            assert_eq!(pa.layout(), pb.layout(), "{at}");
            assert_eq!(pa.chunk(), pb.chunk(), "{at}");
            assert_eq!(pa.filters(), pb.filters(), "{at}");
            assert_eq!(pa.fill_time(), pb.fill_time(), "{at}");
            assert_eq!(pa.obj_track_times(), pb.obj_track_times(), "{at}");
            assert!(!pb.obj_track_times(), "{at}");
            assert_eq!(
                da.dtype().unwrap().to_descriptor().unwrap(),
                db.dtype().unwrap().to_descriptor().unwrap(),
                "{at}"
            );
            assert_eq!(da.shape(), db.shape(), "{at}");
            assert_eq!(da.storage_size(), db.storage_size(), "{at}");
            compared += 1;
        }
    }
    assert!(
        compared >= 4 * (DATASETS.len() + 9),
        "{compared} datasets and attributes compared"
    );
    drop((a, b));
    for r in &records {
        let name = format!("episode_{:05}", r.episode);
        assert_eq!(read_episode(&batch, &name).unwrap(), *r, "{name}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
