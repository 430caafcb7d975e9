//! The reference-replay agent: targets the next reference frame of the `reference` observation.
//! `cargo run --release -p arena-sdk --example replay -- --server ws://HOST:PORT/api/v1/agent --token T`

mod common;

fn main() -> std::process::ExitCode {
    common::run(&mut arena_sdk::agents::ReplayAgent::new(), "reference-replay")
}
