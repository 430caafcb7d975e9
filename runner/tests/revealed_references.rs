//! A revealed reference is computed once per motion for episodes that start together; each
//! episode must still get its own motion's whole reference, in the order given.

use arena_bench::spec::{find_benchmark, shipped_dir};
use arena_runner::episode;
use arena_runner::local::episode_infos;
use arena_sim::motion::MotionLibrary;
use std::path::Path;

#[test]
fn each_episode_gets_its_own_motions_reference() {
    let names = arena_bench::metrics::metric_names();
    let (_, mut spec) = find_benchmark("g1-smoke", &shipped_dir(), &names).unwrap();
    let config = episode::env_config(&spec, None, 1, 1);
    let clips = episode::benchmark_clips(&spec, Path::new("."), &config.robot).unwrap();
    let library = MotionLibrary::from_clips(&clips, &config.robot).unwrap();
    let lengths: Vec<f64> = library.motions.iter().map(|m| m.length_s).collect();
    let episodes = spec.expand_episodes(&lengths).unwrap();
    // Motions interleaved and repeated: 0, 1, 0, 2, 1, …
    let order: Vec<usize> = [0, 1, 0, 2, 1, 2, 0].iter().map(|&k| k % episodes.len()).collect();
    let picked: Vec<_> = order.iter().map(|&k| (&episodes[k], k as u32 + 1)).collect();

    spec.observations.reveal_reference = false;
    let hidden = episode_infos(&spec, &library, picked.iter().copied());
    assert!(hidden.iter().all(|i| i.reference.is_none()));

    spec.observations.reveal_reference = true;
    let infos = episode_infos(&spec, &library, picked.iter().copied());
    assert_eq!(infos.len(), picked.len());
    for (info, (ep, attempt)) in infos.iter().zip(&picked) {
        assert_eq!((info.episode_id, info.attempt), (ep.index as u32, *attempt));
        let motion = &library.motions[ep.motion];
        assert_eq!(info.motion, motion.name);
        let expected = episode::reference_of(motion);
        assert_eq!(info.reference.as_ref(), Some(&expected), "episode {}", ep.index);
        assert_eq!(expected.frames as usize, episode::reference_frames(motion));
    }
    // Different motions differ, so a reference handed to the wrong episode is caught.
    assert_ne!(infos[0].reference, infos[1].reference);
}
