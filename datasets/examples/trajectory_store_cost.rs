//! What a submission's trajectory storage costs, on the server's path: N episodes of T rows
//! written as part files (on every core, as the committer does), then merged into one HDF5 file
//! (parts read and compressed on every core while one thread writes), against the one-episode
//! HDF5 files and object copies of before.
//!   cargo run --release -p arena-data --example trajectory_store_cost -- [episodes] [rows]
use arena_data::episode_part;
use arena_data::trajectory_file::{self, EpisodeRecord, PreparedEpisode, TrajectoryFile};
use std::time::Instant;

/// Values like the simulator's: the actions and observations were 32-bit floats.
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
    for (v, (name, w)) in r.rows.arrays_mut().into_iter().zip(trajectory_file::DATASETS) {
        let single = ["actions", "state", "ref_state"].contains(&name);
        *v = (0..rows * w)
            .map(|_| if single { next() as f32 as f64 } else { next() })
            .collect();
    }
    r.rows.times = (0..rows).map(|i| i as f64 * 0.02).collect();
    for v in r.rows.optional_arrays_mut() {
        *v = (0..rows * 29).map(|_| next()).collect();
    }
    r
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let episodes = args.first().copied().unwrap_or(1024);
    let rows = args.get(1).copied().unwrap_or(101);
    let dir = std::env::temp_dir().join(format!("trajectory-store-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let records: Vec<_> = (0..episodes as u32).map(|e| record(e, rows)).collect();
    let part = |e: u32| dir.join(format!("ep{e}.part"));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("{episodes} episodes × {rows} rows, {cores} cores");

    // Before: one HDF5 file per episode (the library's lock: one at a time), then object copies.
    let started = Instant::now();
    for r in &records {
        let path = dir.join(format!("ep{}.h5", r.episode));
        TrajectoryFile::open_or_create(&path, "sub", "bench")
            .unwrap()
            .write_episode(r)
            .unwrap();
    }
    let hdf5_parts = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let mut out = TrajectoryFile::open_or_create(&dir.join("copied.h5"), "sub", "bench").unwrap();
    for r in &records {
        let name = trajectory_file::episode_group_name(r.episode);
        out.copy_episode_from(&dir.join(format!("ep{}.h5", r.episode)), &name)
            .unwrap();
    }
    let copies = started.elapsed().as_secs_f64();
    println!(
        "one-episode HDF5 files {hdf5_parts:.3} s + object copies {copies:.3} s = {:.3} s",
        hdf5_parts + copies
    );

    // Now: part files on every core, then the merged file written once.
    let started = Instant::now();
    std::thread::scope(|s| {
        for shard in records.chunks(episodes.div_ceil(cores)) {
            s.spawn(move || {
                for r in shard {
                    let mut out = std::io::BufWriter::new(std::fs::File::create(part(r.episode)).unwrap());
                    episode_part::write(r, &mut out).unwrap();
                }
            });
        }
    });
    let parts = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let mut all = Vec::with_capacity(episodes);
    for batch in records.chunks(64) {
        let prepared: Vec<_> = std::thread::scope(|s| {
            let shards: Vec<_> = batch
                .chunks(batch.len().div_ceil(cores))
                .map(|shard| {
                    s.spawn(move || {
                        shard
                            .iter()
                            .map(|r| {
                                let bytes = std::fs::read(part(r.episode)).unwrap();
                                PreparedEpisode::new(episode_part::read(&bytes).unwrap())
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            shards.into_iter().flat_map(|h| h.join().unwrap()).collect::<Vec<_>>()
        });
        all.extend(prepared);
    }
    let prepare_s = started.elapsed().as_secs_f64();
    // The HDF5 calls, on one thread: every episode in one opening of the file, as the server's
    // merge writes them.
    let started = Instant::now();
    let mut out = TrajectoryFile::open_or_create(&dir.join("merged.h5"), "sub", "bench").unwrap();
    out.write_prepared_all(&all).unwrap();
    let write_s = started.elapsed().as_secs_f64();
    let merge = prepare_s + write_s;
    let size = std::fs::metadata(dir.join("merged.h5")).unwrap().len();
    println!(
        "part files {parts:.3} s + merge {merge:.3} s (parts read and compressed {prepare_s:.3} s, then written \
         {write_s:.3} s) = {:.3} s (merged file {:.1} MB; here the merge's reading and compressing does not \
         overlap its writing, as it does in the server)",
        parts + merge,
        size as f64 / 1e6
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
