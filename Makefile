# On a fresh machine (each target creates .venv and installs what it needs):
#   make demo          run the default recipes (quickstart: operators; training) and write reports
#   make distributed   compare the distributed schemes on 2 MPI ranks and write a report
#   make test          run the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.deep500-installed

.PHONY: demo distributed test benchmark clean

$(STAMP): setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/deep500 run recipes/quickstart.yaml
	$(BIN)/deep500 run recipes/training.yaml

distributed: $(STAMP)
	$(BIN)/deep500 run --np 2 recipes/distributed.yaml

test: $(STAMP)
	$(BIN)/python -m pytest tests

benchmark: $(STAMP)
	$(BIN)/python benchmarks/lv0_overhead.py

clean:
	rm -rf $(VENV) results
