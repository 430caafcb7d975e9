//! Where a submission's trajectory storage goes: N episodes of T rows written as part files
//! (as the server's committer does), then merged into one file (as at completion).
//!   cargo run --release -p arena-data --example trajectory_store_cost -- [episodes] [rows]
use arena_data::trajectory_file::{EpisodeRecord, PreparedEpisode, TrajectoryFile};
use std::time::Instant;

fn record(episode: u32, rows: usize) -> EpisodeRecord {
    let mut r = EpisodeRecord {
        episode,
        motion: "walk".into(),
        category: "locomotion".into(),
        status: "completed".into(),
        duration_s: 2.0,
        ..Default::default()
    };
    let mut x = episode as f64 * 0.37 + 0.1;
    let mut next = || {
        x = (x * 1.618_033_9 + 0.123).fract();
        x
    };
    let widths = arena_data::trajectory_file::DATASETS.iter().map(|d| d.1).collect::<Vec<_>>();
    for (v, w) in r.rows.arrays_mut().into_iter().zip(widths) {
        *v = (0..rows * w).map(|_| next()).collect();
    }
    for (i, v) in r.rows.arrays_mut()[4..5].iter_mut().enumerate() {
        let _ = i;
        for a in v.iter_mut() {
            *a = (*a as f32) as f64;
        }
    }
    r.rows.times = (0..rows).map(|i| i as f64 * 0.02).collect();
    for v in r.rows.optional_arrays_mut() {
        *v = (0..rows * 29).map(|_| next()).collect();
    }
    r
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().unwrap()).collect();
    let episodes = args.first().copied().unwrap_or(1024);
    let rows = args.get(1).copied().unwrap_or(101);
    let dir = std::env::temp_dir().join(format!("trajectory-store-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let records: Vec<_> = (0..episodes as u32).map(|e| record(e, rows)).collect();
    let bytes: Vec<Vec<u8>> = records.iter().map(|r| r.rows.arrays().iter().flat_map(|a| a.iter().flat_map(|x| x.to_le_bytes())).collect()).collect();
    let started = Instant::now();
    for (r, b) in records.iter().zip(&bytes) {
        std::fs::write(dir.join(format!("raw{}.bin", r.episode)), b).unwrap();
    }
    println!("plain files: {:.3} s", started.elapsed().as_secs_f64());
    let (mut create, mut write) = (0.0, 0.0);
    let started = Instant::now();
    for r in &records {
        let path = dir.join(format!("old{}.h5", r.episode));
        let t = Instant::now();
        let mut f = TrajectoryFile::open_or_create(&path, "sub", "bench").unwrap();
        create += t.elapsed().as_secs_f64();
        let t = Instant::now();
        f.write_episode(r).unwrap();
        write += t.elapsed().as_secs_f64();
    }
    println!("open_or_create {create:.3} s + write_episode {write:.3} s = {:.3} s", started.elapsed().as_secs_f64());
    let copies = records.clone();
    let started = Instant::now();
    let prepared: Vec<_> = copies.into_iter().map(PreparedEpisode::new).collect();
    let prepare = started.elapsed().as_secs_f64();
    for p in &prepared {
        let path = dir.join(format!("ep{}.h5", p.record().episode));
        arena_data::trajectory_file::write_episode_file(&path, "sub", "bench", p).unwrap();
    }
    let store = started.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut one = TrajectoryFile::open_or_create(&dir.join("one.h5"), "sub", "bench").unwrap();
    for p in &prepared {
        one.write_prepared(p).unwrap();
    }
    println!("all prepared episodes into one file: {:.3} s", t.elapsed().as_secs_f64());
    println!("write_episode_file: filter {prepare:.3} s (one core), then write {:.3} s", store - prepare);
    let merged = dir.join("merged.h5");
    let started = Instant::now();
    let mut out = TrajectoryFile::open_or_create(&merged, "sub", "bench").unwrap();
    for r in &records {
        let name = arena_data::trajectory_file::episode_group_name(r.episode);
        out.copy_episode_from(&dir.join(format!("ep{}.h5", r.episode)), &name).unwrap();
    }
    let merge = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let mut out = TrajectoryFile::open_or_create(&dir.join("merged-old.h5"), "sub", "bench").unwrap();
    for r in &records {
        let name = arena_data::trajectory_file::episode_group_name(r.episode);
        out.copy_episode_from(&dir.join(format!("old{}.h5", r.episode)), &name).unwrap();
    }
    println!("merge of the files write_episode wrote: {:.3} s", started.elapsed().as_secs_f64());
    let size = std::fs::metadata(&merged).unwrap().len();
    println!(
        "{episodes} episodes × {rows} rows: store {store:.3} s ({:.3} ms each), merge {merge:.3} s ({:.3} ms each), merged file {:.1} MB",
        store * 1e3 / episodes as f64,
        merge * 1e3 / episodes as f64,
        size as f64 / 1e6
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
