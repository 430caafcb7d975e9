//! arena-runner: what runs episodes on the simulator for an [`arena_sdk::Agent`]. The server's
//! simulator workers and the local runner share [`episode`], so a local score is what a
//! submission would get; [`local`] drives an agent through a whole benchmark in process;
//! [`gains`] and [`pose`] check what a policy declares (PD gains, default pose) before it runs;
//! [`audit`] re-runs stored episodes with their recorded actions on either physics backend.

pub mod audit;
pub mod episode;
pub mod gains;
pub mod local;
pub mod observations;
pub mod pose;
pub mod revealed;
