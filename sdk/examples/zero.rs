//! The all-zero agent (PD targets at the default pose): the floor of every benchmark.
//! `cargo run --release -p arena-sdk --example zero -- --server ws://HOST:PORT/api/v1/agent --token T`

mod common;

fn main() -> std::process::ExitCode {
    common::run(&mut arena_sdk::agents::ZeroAgent::default(), "zero")
}
