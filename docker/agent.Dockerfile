# syntax=docker/dockerfile:1
# The BFM-Zero baseline agent (`arena-bfm agent`, docs/baseline.md): a participant's inference
# service that connects to the server through the Rust SDK. The checkpoint is mounted at run time:
#   docker build -f docker/agent.Dockerfile -t mimicarena/baseline-agent .
#   docker run -v $PWD/runs/tiny/checkpoint:/checkpoint -e ARENA_TOKEN=... \
#       mimicarena/baseline-agent agent --checkpoint /checkpoint --server http://HOST:8080

FROM rust:1.95-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# libtorch 2.11.0 (tch 0.24) from the CPU build of the torch wheel; .cargo/config.toml's
# LIBTORCH is overridden to point at it.
RUN bash scripts/bootstrap-mujoco.sh \
    && python3 -m venv .venv \
    && .venv/bin/pip install --no-cache-dir cmake==4.1.2 \
    && .venv/bin/pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cpu torch==2.11.0
RUN LIBTORCH="$(.venv/bin/python -c 'import torch, os; print(os.path.dirname(torch.__file__))')" \
    cargo build --release --locked -p arena-bfm --bin arena-bfm \
    && install -D -m 0755 target/release/arena-bfm /opt/mimicarena/bin/arena-bfm \
    && mkdir -p /opt/mimicarena/lib \
    && cp -a third_party/mujoco/lib/libmujoco.so* /opt/mimicarena/lib/ \
    && cp -a .venv/lib/python3*/site-packages/torch/lib/*.so* /opt/mimicarena/lib/

FROM debian:bookworm-slim AS runtime
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libgomp1 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --create-home agent
COPY --from=build /opt/mimicarena /opt/mimicarena
USER 10001
ENV PATH=/opt/mimicarena/bin:$PATH \
    LD_LIBRARY_PATH=/opt/mimicarena/lib
ENTRYPOINT ["arena-bfm"]
CMD ["--help"]
