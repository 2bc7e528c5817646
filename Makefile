# Two commands do all the set-up: `make quickstart` and `make test`.
# TORCH is the torch requirement installed before the project. On this project's CPU machines
# `torch==2.13.0` resolves to a local CPU wheel; a GPU cluster user runs e.g.
#   make install TORCH='torch==2.6.0' EXTRAS='dev,gpu'
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
EXTRAS ?= dev
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install quickstart quickstart-mea test bench mea-comparison sali-comparison clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet '$(TORCH)'
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	touch $(STAMP)

install: $(STAMP)

quickstart: $(STAMP)
	$(VENV)/bin/lit-retrieval fit --config configs/quickstart.yaml
	$(VENV)/bin/lit-retrieval test --config configs/quickstart.yaml --trainer.logger.init_args.version test \
		--ckpt_path runs/quickstart/checkpoints/last.ckpt

quickstart-mea: $(STAMP)
	$(VENV)/bin/lit-retrieval fit --config configs/quickstart_mea.yaml
	$(VENV)/bin/lit-retrieval test --config configs/quickstart_mea.yaml --trainer.logger.init_args.version test \
		--ckpt_path runs/quickstart_mea/logs/fit/checkpoints/last.ckpt

test: $(STAMP)
	$(PY) -m pytest -q

# speed benchmarks (minutes); the MEA comparison on the synthetic corpus is a training sweep (hours)
bench: $(STAMP)
	for b in frame_sampling metrics_speed mea_step heads sali_ot shots_speed tempme; do $(PY) benchmarks/$$b.py; done

mea-comparison: $(STAMP)
	$(PY) benchmarks/mea_synthetic.py --seeds 0 1 2 --variants baseline mea

sali-comparison: $(STAMP)
	$(PY) benchmarks/sali_synthetic.py --seeds 0 1 2 --train max ot
	$(PY) benchmarks/sali_synthetic.py --seeds 0 --train max_pen ot_pen

clean:
	rm -rf $(VENV) runs data/synthetic data/synthetic_rel
