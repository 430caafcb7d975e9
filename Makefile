# MimicArena: two commands.
#   make run   build and run the main job
#   make test  run every test (Rust and the Python cross-checks)
# Both bootstrap native dependencies first (idempotent; quick when already done).

SHELL := /bin/bash
MUJOCO_LIB := third_party/mujoco/lib/libmujoco.so.3.17.0
VENV_STAMP := .venv/.installed
WEB_STAMP := web/node_modules/.installed
TORCH_STAMP := third_party/pytorch/.installed-2.11.0
MJLAB_STAMP := third_party/mjlab-1.6.0/.installed
GPU_STAMP := .venv/.installed-gpu-backend
S3S_BIN := third_party/s3s/bin/s3s-fs
PYTHON := .venv/bin/python

.PHONY: bench-onnx run test deps deps-torch deps-mjlab deps-browser deps-gpu deps-s3 bench bench-load lint

deps: $(MUJOCO_LIB) $(VENV_STAMP) $(WEB_STAMP)

# The web pages' npm packages (three.js for the 3-D replay; playwright-core for the browser test).
$(WEB_STAMP): web/package-lock.json
	bash scripts/browser.sh npm

# Chromium for the browser test (Debian's package, installed when missing).
deps-browser: $(WEB_STAMP)
	bash scripts/browser.sh

# libtorch for the baseline (arena-bfm) and torch for its Python test oracle; `make run` needs
# neither, since the server does not link libtorch.
deps-torch: $(TORCH_STAMP)

$(TORCH_STAMP):
	bash scripts/bootstrap-torch.sh

# mjlab 1.6.0's sources (its PyPI wheel, unpacked, not installed) for the test that runs mjlab's
# own tracking metrics on the arena's episodes (docs/metrics.md); `make run` does not need them.
deps-mjlab: $(MJLAB_STAMP)

$(MJLAB_STAMP): scripts/bootstrap-mjlab.sh
	bash scripts/bootstrap-mjlab.sh

$(MUJOCO_LIB):
	bash scripts/bootstrap-mujoco.sh

# JAX with MuJoCo MJX, and MuJoCo Warp with warp-lang, for the GPU simulation backend's worker (CPU wheels: the tests run it on
# JAX's CPU backend); `make run` does not need them.
deps-gpu: $(GPU_STAMP)

$(GPU_STAMP): python/requirements-gpu.txt $(VENV_STAMP)
	.venv/bin/pip install --quiet --disable-pip-version-check -r python/requirements-gpu.txt
	touch $@

# An S3-compatible server (s3s-fs, built from crates.io) for the object-store and replica tests;
# `make run` does not need it.
deps-s3: $(S3S_BIN)

$(S3S_BIN): scripts/bootstrap-s3.sh
	bash scripts/bootstrap-s3.sh

$(VENV_STAMP): python/requirements-dev.txt
	python3 -m venv .venv
	.venv/bin/pip install --quiet --disable-pip-version-check -r python/requirements-dev.txt
	touch $@

run: deps
	cargo run --release --quiet -p arena-server --bin arena -- demo

# A throwaway PostgreSQL (scripts/postgres.sh) serves the storage tests' PostgreSQL half; it is
# stopped and deleted whatever the tests do, and the recipe keeps the tests' exit status. The
# Python SDK's tests run after cargo test, which builds the arena and arena-ppo binaries they start.
test: deps deps-torch deps-mjlab deps-browser deps-gpu deps-s3
	status=0; \
	bash scripts/postgres.sh start || status=$$?; \
	if [ $$status -eq 0 ]; then \
		ARENA_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:54329/arena_test ARENA_REQUIRE_POSTGRES=1 \
		ARENA_PYTHON=$(CURDIR)/$(PYTHON) ARENA_REQUIRE_TORCH_ORACLE=1 ARENA_REQUIRE_BROWSER=1 \
		ARENA_GPU_PYTHON=$(CURDIR)/$(PYTHON) ARENA_REQUIRE_GPU_BACKEND=1 \
		ARENA_S3S_BIN=$(CURDIR)/$(S3S_BIN) ARENA_REQUIRE_S3=1 \
		cargo test --workspace --release || status=$$?; \
		ARENA_BIN=$(CURDIR)/target/release/arena ARENA_PPO_BIN=$(CURDIR)/target/release/arena-ppo \
			$(PYTHON) -m pytest -q sdk/python/tests || status=$$?; \
	fi; \
	bash scripts/postgres.sh stop; \
	exit $$status

lint: deps deps-torch
	cargo fmt --all --check
	cargo clippy --release --workspace --all-targets -- -D warnings
	$(PYTHON) -m mypy --config-file sdk/python/pyproject.toml
	bash docker/validate.sh

bench: deps deps-torch
	cargo build --release --quiet -p arena-server --bin arena
	$(PYTHON) bench/sim_vs_mujoco_rollout.py --arena target/release/arena
	$(PYTHON) python/emd_vs_pot.py --arena target/release/arena --moves ../shared/motions/g1-moves --bench
	cargo run --release --quiet -p arena-bench --example emd_solvers -- --repeats 20
	cargo run --release --quiet -p arena-server --example remote_vs_local -- \
		--benchmark g1-moves-dance --motions-root ../shared/motions/g1-moves --batch 16 --lanes 2 --repeats 3
	cargo run --release --quiet -p arena-server --example robot_groups_cost -- --repeats 8 --runs 3
	cargo build --release --quiet -p arena-sdk --example replay
	$(PYTHON) bench/gpu_eval_scale.py --arena target/release/arena --agent target/release/examples/replay \
		--episodes 1024 --window-s 2 --backend cpu --repeats 3
	ARENA_GPU_PYTHON=$(CURDIR)/$(PYTHON) $(PYTHON) bench/gpu_eval_scale.py --arena target/release/arena \
		--agent target/release/examples/replay --episodes 4096 --window-s 2 --backend gpu --gpu-impl stub \
		--gpu-device cpu --repeats 3
	for n in 1024 4096 8192; do for rec in "" --no-record; do ARENA_GPU_PYTHON=$(CURDIR)/$(PYTHON) \
		target/release/arena sim bench --envs $$n --steps 100 --repeats 5 --backend gpu --gpu-impl stub --gpu-device cpu $$rec; \
		done; done
	for n in 1024 4096; do for b in g1-smoke bench/g1-command.toml; do ARENA_GPU_PYTHON=$(CURDIR)/$(PYTHON) \
		target/release/arena sim bench --envs $$n --steps 100 --backend gpu --gpu-impl stub --gpu-device cpu \
		--no-record --benchmark $$b; done; done
	ARENA_GPU_PYTHON=$(CURDIR)/$(PYTHON) target/release/arena sim bench --envs 4096 --steps 100 --backend gpu \
		--gpu-impl stub --gpu-device cpu --no-record --benchmark g1-smoke --whole-goal-rows
	ARENA_GPU_PYTHON=$(CURDIR)/$(PYTHON) $(PYTHON) bench/gpu_eval_scale.py --arena target/release/arena \
		--agent target/release/examples/replay --episodes 1024 --window-s 2 --backend gpu --gpu-impl stub \
		--gpu-device cpu --repeats 1 --observations bfm-zero
	ARENA_GPU_PYTHON=$(CURDIR)/$(PYTHON) $(PYTHON) bench/gpu_eval_scale.py --arena target/release/arena \
		--agent target/release/examples/replay --episodes 1024 --window-s 2 --backend gpu --gpu-impl stub \
		--gpu-device cpu --repeats 1 --observations bfm-zero --no-in-process --agent-arg=--whole-goal-rows
	ARENA_GPU_PYTHON=$(CURDIR)/$(PYTHON) $(PYTHON) bench/host_scaling.py --arena target/release/arena --envs 4096
	cargo build --release --quiet -p arena-server --example pages_latency
	target/release/examples/pages_latency --submissions 10000 --episodes 30 --requests 50
	PGURL=$$(bash scripts/postgres.sh start) && target/release/examples/pages_latency \
		--submissions 10000 --episodes 30 --requests 50 --database-url "$$PGURL"; \
		status=$$?; bash scripts/postgres.sh stop; exit $$status
	$(PYTHON) bench/dataset_export_vs_h5py.py --arena target/release/arena --runs 5 --repeats 3
	cargo build --release --quiet -p arena-bfm --example update_throughput
	PYTHONPATH=third_party/pytorch $(PYTHON) baseline/bench/update_throughput.py \
		--example target/release/examples/update_throughput --preset tiny --batch 1024 --updates 5 --repeats 3
	PYTHONPATH=third_party/pytorch $(PYTHON) baseline/bench/update_throughput.py \
		--example target/release/examples/update_throughput --preset small --batch 1024 --updates 3 --repeats 3
	cargo build --release --quiet -p arena-ppo --example ppo_update_throughput
	PYTHONPATH=third_party/pytorch $(PYTHON) ppo/bench/update_throughput.py \
		--example target/release/examples/ppo_update_throughput --updates 10 --repeats 3
	cargo run --release --quiet -p arena-ppo --example training_throughput -- --iterations 20 --runs 3
	ARENA_GPU_PYTHON=$(CURDIR)/$(PYTHON) cargo run --release --quiet -p arena-ppo --example training_throughput -- \
		--stub-physics --envs 4096 --iterations 2 --runs 1
	$(MAKE) --no-print-directory bench-onnx
	$(PYTHON) bench/hosted_vs_remote.py --arena target/release/arena --motions-root ../shared/motions/g1-moves --repeats 3
	$(PYTHON) bench/hosted_scale.py --arena target/release/arena --episodes 1024 --window-s 2 --repeats 3
	$(MAKE) --no-print-directory bench-load

# The inference engine of hosted ONNX policies (issue 40): tract against onnxruntime (the PyPI
# wheel's library, loaded at run time) on the committed policies, batches 1, 64 and 1024.
bench-onnx: deps
	cargo run --release --quiet -p arena-onnx --features ort --example onnx_engines -- \
		--ort-lib $$(ls .venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.* | head -1) --repeats 3

# Load: 64 teams' sessions at once against one server (SQLite), then against two replicas on
# PostgreSQL (server/examples/load_sessions.rs; throughput, step round trip, memory, fairness).
bench-load: deps
	cargo build --release --quiet -p arena-server --bin arena --example load_sessions
	target/release/examples/load_sessions --sessions 64 --seconds 20
	PGURL=$$(bash scripts/postgres.sh start) && target/release/examples/load_sessions \
		--sessions 64 --seconds 20 --replicas 2 --database-url "$$PGURL"; \
		status=$$?; bash scripts/postgres.sh stop; exit $$status
