# MimicArena: two commands.
#   make run   build and run the main job
#   make test  run every test (Rust and the Python cross-checks)
# Both bootstrap native dependencies first (idempotent; quick when already done).

SHELL := /bin/bash
MUJOCO_LIB := third_party/mujoco/lib/libmujoco.so.3.17.0
VENV_STAMP := .venv/.installed
PYTHON := .venv/bin/python

.PHONY: run test deps bench lint

deps: $(MUJOCO_LIB) $(VENV_STAMP)

$(MUJOCO_LIB):
	bash scripts/bootstrap-mujoco.sh

$(VENV_STAMP): python/requirements-dev.txt
	python3 -m venv .venv
	.venv/bin/pip install --quiet --disable-pip-version-check -r python/requirements-dev.txt
	touch $@

run: deps
	cargo run --release --quiet -p arena-server --bin arena -- demo

test: deps
	ARENA_PYTHON=$(CURDIR)/$(PYTHON) cargo test --workspace --release

lint: deps
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings

bench: deps
	cargo build --release --quiet -p arena-server --bin arena
	$(PYTHON) bench/sim_vs_mujoco_rollout.py --arena target/release/arena
	$(PYTHON) python/emd_vs_pot.py --arena target/release/arena --moves ../shared/motions/g1-moves --bench
