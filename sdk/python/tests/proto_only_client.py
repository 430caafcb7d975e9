"""A complete gRPC agent built from sdk/proto/arena.proto alone, without arena_sdk: proof that the
schema is all a client needs. It runs one submission with all-zero actions (PD targets at the
default pose) and exits 0 when the submission is COMPLETED.

    python -m grpc_tools.protoc -I sdk/proto --python_out=GEN --grpc_python_out=GEN arena.proto
    python proto_only_client.py GEN HOST:PORT TOKEN [BENCHMARK]
"""

import queue
import sys
import time

import grpc


def main(generated_dir: str, target: str, token: str, benchmark: str = "g1-smoke") -> int:
    sys.path.insert(0, generated_dir)
    import arena_pb2 as pb
    import arena_pb2_grpc

    # The request stream: whatever is put in `outbox` is sent; None ends the stream.
    outbox: queue.Queue = queue.Queue()

    def requests():
        while (envelope := outbox.get()) is not None:
            yield envelope

    outbox.put(
        pb.Envelope(
            connect=pb.Connect(
                protocol_version=1, agent_name="proto-only", token=token, mode="submission", benchmark=benchmark
            )
        )
    )
    channel = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", -1)])
    stub = arena_pb2_grpc.AgentGatewayStub(channel)
    action_size, status = 0, ""
    for envelope in stub.Session(requests()):
        kind = envelope.WhichOneof("msg")
        if kind == "connected":
            c = envelope.connected
            action_size = c.spec.action_size
            print(f"submission {c.submission_id}: {c.episodes_remaining} episodes, action size {action_size}")
        elif kind == "get_action":
            request = envelope.get_action
            actions = [
                pb.EpisodeAction(episode_id=o.episode_id, values=[0.0] * action_size) for o in request.observations
            ]
            outbox.put(pb.Envelope(action=pb.Action(step=request.step, actions=actions)))
        elif kind == "heartbeat":
            outbox.put(pb.Envelope(heartbeat=pb.Heartbeat(time=time.time())))
        elif kind == "episode_end":
            e = envelope.episode_end
            print(f"episode {e.episode_id}: {e.status}, {e.steps} steps, emd {e.metrics.get('emd', float('nan')):.4f}")
        elif kind == "error":
            print(f"error {envelope.error.code}: {envelope.error.message}")
        elif kind == "disconnect":
            status = envelope.disconnect.submission_status
            print(f"end: {envelope.disconnect.reason} {status}")
            break
    outbox.put(None)
    channel.close()
    return 0 if status == "COMPLETED" else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
