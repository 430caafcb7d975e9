# syntax=docker/dockerfile:1
# The example agent: the Python SDK (sdk/python) with its open-loop replay agent. With no
# ARENA_TOKEN it creates a team first (ARENA_ADMIN_TOKEN), as the compose file's demo does.
#   docker build -f docker/example-agent.Dockerfile -t mimicarena/example-agent .

FROM python:3.11-slim-bookworm
COPY sdk/python /opt/sdk
RUN pip install --no-cache-dir /opt/sdk \
    && useradd --system --uid 10001 --create-home agent
COPY sdk/python/examples/replay_agent.py /opt/agent/replay_agent.py
COPY docker/example-agent.sh /opt/agent/run.sh
USER 10001
WORKDIR /opt/agent
ENV ARENA_SERVER=http://proxy:8080 \
    ARENA_BENCHMARK=g1-smoke
ENTRYPOINT ["sh", "/opt/agent/run.sh"]
