//! Generates the protocol types and the gRPC client and server of `proto/arena.proto` with a
//! pure-Rust protobuf compiler (protox), so no `protoc` is needed. The generated structs also
//! derive serde for the JSON encoding: every message defaults missing fields, and the
//! `Envelope.msg` oneof becomes an internally tagged enum (`{"type": "get_action", ...}`).
fn main() {
    println!("cargo:rerun-if-changed=proto/arena.proto");
    let descriptors = protox::compile(["proto/arena.proto"], ["proto"]).expect("proto/arena.proto must compile");
    let mut config = prost_build::Config::new();
    config
        .btree_map(["."])
        .message_attribute(".", "#[derive(serde::Serialize, serde::Deserialize)] #[serde(default)]")
        // JSON writes a NaN metric as null (protocol.md): read back as NaN; held to a batch too.
        .field_attribute(
            ".arena.v1.EpisodeEnd.metrics",
            "#[serde(deserialize_with = \"crate::protocol::metrics_from_json\")]",
        )
        // Every list is held to the most a batch holds as it is read (src/protocol/bounds.rs).
        .field_attribute(
            ".arena.v1.EpisodeSpec.observations",
            "#[serde(deserialize_with = \"crate::protocol::entries_from_json\")]",
        )
        .field_attribute(
            ".arena.v1.EpisodeStart.episodes",
            "#[serde(deserialize_with = \"crate::protocol::entries_from_json\")]",
        )
        .field_attribute(
            ".arena.v1.GetAction.observations",
            "#[serde(deserialize_with = \"crate::protocol::entries_from_json\")]",
        )
        .field_attribute(
            ".arena.v1.Action.actions",
            "#[serde(deserialize_with = \"crate::protocol::entries_from_json\")]",
        )
        .enum_attribute(
            ".arena.v1.Envelope.msg",
            "#[derive(serde::Serialize, serde::Deserialize)] #[serde(tag = \"type\", rename_all = \"snake_case\")]",
        );
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Same bytes as tonic's prost codec, through contiguous buffers (see src/grpc_codec.rs).
        .codec_path("crate::grpc_codec::EnvelopeCodec")
        .compile_fds_with_config(descriptors, config)
        .expect("generating protocol types and gRPC stubs");
}
