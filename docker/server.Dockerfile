# syntax=docker/dockerfile:1
# The evaluation server: the `arena` binary with MuJoCo 3.17.0, the shipped benchmarks and the
# web pages, installed in the relocatable layout of docs/server.md ("Installing the binary
# elsewhere"). Build from the repository root:
#   docker build -f docker/server.Dockerfile -t mimicarena/server .

FROM rust:1.95-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv nodejs npm \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# MuJoCo's library (from its PyPI wheel), CMake >= 3.26 for HDF5's static build (.cargo/config.toml
# points CMAKE at .venv), three.js for the replay page, then the binary.
RUN bash scripts/bootstrap-mujoco.sh \
    && python3 -m venv .venv \
    && .venv/bin/pip install --no-cache-dir cmake==4.1.2 \
    && npm --prefix web ci --omit=dev --no-audit --no-fund \
    && cargo build --release --locked -p arena-server --bin arena
RUN install -D -m 0755 target/release/arena /opt/mimicarena/bin/arena \
    && mkdir -p /opt/mimicarena/lib /opt/mimicarena/share/mimicarena/benchmarks \
        /opt/mimicarena/share/mimicarena/web/node_modules \
    && cp -a third_party/mujoco/lib/libmujoco.so* /opt/mimicarena/lib/ \
    && cp benchmarks/*.toml /opt/mimicarena/share/mimicarena/benchmarks/ \
    && cp -r web/index.html web/static /opt/mimicarena/share/mimicarena/web/ \
    && cp -r web/node_modules/three /opt/mimicarena/share/mimicarena/web/node_modules/

FROM debian:bookworm-slim AS runtime
# curl: the health check.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --create-home --home-dir /var/lib/arena arena
COPY --from=build /opt/mimicarena /opt/mimicarena
USER 10001
WORKDIR /var/lib/arena
ENV PATH=/opt/mimicarena/bin:$PATH \
    ARENA_BIND=0.0.0.0:8080 \
    ARENA_DATA_DIR=/var/lib/arena/data
EXPOSE 8080
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s --retries=5 \
    CMD ["curl", "-fsS", "http://127.0.0.1:8080/api/v1/health"]
ENTRYPOINT ["arena"]
CMD ["serve"]
