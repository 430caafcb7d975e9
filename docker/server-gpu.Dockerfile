# syntax=docker/dockerfile:1
# The server with the GPU simulation backend (docs/gpu-backend.md): the server image plus a
# Python with MuJoCo MJX 3.17.0 on JAX with CUDA, which the backend's worker runs in. Needs the
# NVIDIA container toolkit at run time (`docker run --gpus all`). Build the server image first:
#   docker build -f docker/server.Dockerfile -t mimicarena/server .
#   docker build -f docker/server-gpu.Dockerfile -t mimicarena/server-gpu .

ARG SERVER_IMAGE=mimicarena/server:latest
FROM ${SERVER_IMAGE}
USER 0
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
COPY python/requirements-gpu.txt /opt/mimicarena/requirements-gpu.txt
# The CPU jaxlib of the requirements, plus JAX's CUDA plugin of the same version.
RUN python3 -m venv /opt/mimicarena/gpu-python \
    && /opt/mimicarena/gpu-python/bin/pip install --no-cache-dir \
        -r /opt/mimicarena/requirements-gpu.txt "jax[cuda13]==0.10.2"
USER 10001
ENV ARENA_SIM_BACKEND=gpu \
    ARENA_GPU_DEVICE=gpu \
    ARENA_GPU_PYTHON=/opt/mimicarena/gpu-python/bin/python
