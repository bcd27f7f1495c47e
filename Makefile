# On a fresh machine (each target creates .venv and installs what it needs):
#   make demo          run the default recipes (quickstart: operators; training) and write reports
#   make distributed   compare the distributed schemes on 2 MPI ranks and write a report
#   make test          run the test suite
#   make lock          re-resolve the newest allowed versions into constraints.txt
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.deep500-installed

.PHONY: demo distributed test benchmark lock clean

$(STAMP): setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[all]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/deep500 run recipes/quickstart.yaml
	$(BIN)/deep500 run recipes/training.yaml
	@echo "Deep500 is installed in $(VENV): '. $(VENV)/bin/activate' puts deep500, python and mpirun on the PATH (or call $(BIN)/deep500)"

distributed: $(STAMP)
	$(BIN)/deep500 run --np 2 recipes/distributed.yaml

test: $(STAMP)
	$(BIN)/python -m pytest tests

benchmark: $(STAMP)
	$(BIN)/python benchmarks/lv0_overhead.py

# A fresh environment with no constraints takes the newest versions setup.py allows;
# its freeze becomes the lock (torch's local "+cpu" label dropped: ==2.13.0 matches it).
LOCK_VENV := .lock-venv
lock:
	rm -rf $(LOCK_VENV)
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LOCK_VENV)/bin/python -m pip install --quiet -e '.[all]'
	{ echo "# Versions a fresh 'make demo' / 'make test' installs (pip install -c constraints.txt)."; \
	  echo "# Resolved on CPython $$($(LOCK_VENV)/bin/python -c 'import platform; print(platform.python_version(), platform.machine())'), Linux; refresh with 'make lock' (see README)."; \
	  $(LOCK_VENV)/bin/python -m pip freeze --exclude-editable | grep -v '^deep500' | sed 's/+cpu$$//'; } > constraints.txt
	rm -rf $(LOCK_VENV)

clean:
	rm -rf $(VENV) results
