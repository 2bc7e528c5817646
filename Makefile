# Two commands do all the set-up: `make quickstart` and `make test`.
# TORCH is the torch + torchvision pair installed before the project (transformers' Qwen2.5-VL video
# processor needs torchvision). On this project's machines both resolve to local files; a GPU
# cluster user runs e.g.
#   make install TORCH='torch==2.6.0 torchvision==0.21.0' EXTRAS='dev,gpu'
# faiss: EXTRAS without `gpu` get the `cpu` extra (faiss-cpu) added; with `gpu`, faiss-gpu-cu12 only (the two
# share one faiss/ folder and break each other). flash-attn is opt-in, `make install-flash-attn` (after install):
# --no-build-isolation, since its build imports the torch installed first; it needs a prebuilt wheel for that
# torch/CUDA/Python or nvcc and MAX_JOBS parallel compiles (README, "flash-attn"). pyproject.toml says why.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.14.1 torchvision==0.29.1
EXTRAS ?= dev,deepspeed
FLASH_ATTN ?= flash-attn>=2.7,<3
MAX_JOBS ?= 4
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
comma := ,
FAISS_EXTRA := $(if $(filter gpu,$(subst $(comma), ,$(EXTRAS))),,$(comma)cpu)

.PHONY: install install-flash-attn quickstart quickstart-mea quickstart-gve test lint bench mea-comparison sali-comparison clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH)
	DS_BUILD_OPS=0 $(PY) -m pip install --quiet -e '.[$(EXTRAS)$(FAISS_EXTRA)]'
	touch $(STAMP)

install: $(STAMP)

# GPU nodes only (CUDA torch installed by `install`): a prebuilt wheel if flash-attn publishes one for this
# torch/CUDA/Python, else an nvcc build of MAX_JOBS parallel jobs (each takes several GB of memory)
install-flash-attn: $(STAMP)
	$(PY) -m pip install --quiet setuptools wheel packaging psutil ninja
	MAX_JOBS=$(MAX_JOBS) $(PY) -m pip install --no-build-isolation '$(FLASH_ATTN)'

quickstart: $(STAMP)
	$(VENV)/bin/lit-retrieval fit --config configs/quickstart.yaml
	$(VENV)/bin/lit-retrieval test --config configs/quickstart.yaml --trainer.logger.init_args.version test \
		--ckpt_path runs/quickstart/checkpoints/last.ckpt

quickstart-mea: $(STAMP)
	$(VENV)/bin/lit-retrieval fit --config configs/quickstart_mea.yaml
	$(VENV)/bin/lit-retrieval test --config configs/quickstart_mea.yaml --trainer.logger.init_args.version test \
		--ckpt_path runs/quickstart_mea/logs/fit/checkpoints/last.ckpt

# GVE on CPU: a tiny random Qwen2.5-VL, synthetic multi-task data, the Modality Pyramid
quickstart-gve: $(STAMP)
	$(VENV)/bin/lit-retrieval tiny-qwen --out runs/gve_tiny/model
	$(VENV)/bin/lit-retrieval synth --out data/gve_synthetic --num-videos 24
	$(VENV)/bin/lit-retrieval gve-tasks --corpus data/gve_synthetic --out data/gve_tasks
	$(VENV)/bin/lit-retrieval fit --config configs/gve/tiny_cpu.yaml

# pytest-xdist workers: the suite's subprocess and DDP tests are independent. One OpenMP thread per process
# (torch, faiss, and every fit, rank and job the tests start inherit it): 2 workers with 2 spinning threads each,
# plus their subprocesses' ranks, oversubscribed the 2 cores (83 tests timed by hand: 173 s vs 100 s).
# Three workers on the 2 cores, stealing work (tests/conftest.py puts the real-Slurm tests first): the CPUs stay busy
# while one worker waits on Slurm (2026-12-07: 28 min 52 s under `-n 2` with 12.5 % of the CPU idle, docs/benchmarks.md).
# The 25 slowest tests are listed at the end, to keep the suite within its 20 minutes on 2 cores.
test: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 3 --dist worksteal --durations=25

# style and error checks and formatting (ruff, configured in pyproject.toml); CI runs it before the tests
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# speed benchmarks (minutes); the comparisons on the synthetic corpus are training sweeps (hours) in sweeps/
bench: $(STAMP)
	for b in frame_sampling metrics_speed mea_step heads sali_ot shots_speed tempme gve_speed gve_positions; do $(PY) benchmarks/$$b.py; done

mea-comparison: $(STAMP)
	$(PY) sweeps/mea_synthetic.py --seeds 0 1 2 --variants baseline mea

sali-comparison: $(STAMP)
	$(PY) sweeps/sali_synthetic.py --seeds 0 1 2 --train max ot
	$(PY) sweeps/sali_synthetic.py --seeds 0 --train max_pen ot_pen

clean:
	rm -rf $(VENV) runs data/synthetic data/synthetic_rel
