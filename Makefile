# r2s2r — every target a user needs; `make demo` and `make test` set everything up first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.r2s2r-installed
export MUJOCO_GL ?= egl
export PYOPENGL_PLATFORM ?= egl

.PHONY: setup demo test test-fast test-slow bench lint format docs clean lerobot-venv studio studio-deps studio-bench isaaclab-setup test-isaaclab test-learning test-long flexiv-venv test-flexiv

setup: $(STAMP)

# Re-runs only when the project's dependency list changes. openpi's robot-side client, which
# the policy server's tests drive, goes in without its pins: it pins numpy < 2, which the
# rest of the stack outgrew, and its websocket client needs only packages already installed
# (msgpack, websockets). robomimic 0.3, whose own loader the robomimic export's tests run, also
# goes in without its requirements: they add tensorboard and egl_probe (built from source with
# CMake), which its dataset and training code never import; what they do import is in the dev
# extra.
$(STAMP): pyproject.toml
	@bash scripts/ensure_debian_libs.sh "headless rendering (EGL, Mesa; or set MUJOCO_GL=osmesa)" \
		"libEGL.so.1 libGL.so.1" "libegl1 libgl1 libgles2 libgl1-mesa-dri"
	@$(MAKE) --no-print-directory studio-deps
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	$(BIN)/python -m pip install --quiet --no-deps "openpi-client==0.1.2"
	$(BIN)/python -m pip install --quiet --no-deps "robomimic==0.3.0"
	@touch $(STAMP)
	@echo "r2s2r installed: $(BIN)/r2s2r"

# The study's smoke preset end to end on the twin (README, "The study"): ends with the
# report's path and the success table. Rerunning skips what is up to date.
demo: $(STAMP)
	$(BIN)/r2s2r study --preset smoke --out outputs/demo

# The tests run on one pytest-xdist worker per core (at most 4) and print the ten slowest.
# `make test` skips the tests marked slow or long and keeps each test module on one worker
# (--dist loadscope, in file order: by test count the grounding pipeline's module, whose
# fixture takes two minutes, would start last), so a module fixture is made once;
# `make test-slow` runs only the slow tests, spread test by test (--dist loadgroup: a module
# marked with an xdist_group, the whole study's, stays on one worker for its fixture).
# pytest-timeout stops a test after 450 s, a slow or long one after 1200 s (pyproject.toml,
# tests/conftest.py). CI (.ci/run) runs lint, docs, test, test-slow, test-flexiv, then
# test-isaaclab.
PYTEST := $(BIN)/python -m pytest -q -n auto --maxprocesses 4 --durations=10

test: $(STAMP)
	$(PYTEST) --dist loadscope --no-loadscope-reorder

# The edit-test loop's tier, under 2 minutes on 2 cores: the specs and configs, the
# registries, the observation/action contract, geometry (rotations, kinematics, the
# embodiment, retargeting), the evaluation's statistics and protocols, the CLI's parsing and
# errors. A file joins only if it renders, trains and records nothing in a fixture.
FAST_TESTS := $(patsubst %,tests/test_%.py,spec configs presets registry contract rotations \
	kinematics embodiment robots retarget conditions eval_stats eval_protocol cli)

test-fast: $(STAMP)
	$(PYTEST) $(FAST_TESTS)

test-slow: $(STAMP)
	$(PYTEST) --dist loadgroup -m "slow and not long"

# The longest checks (marked long): the whole study killed in every stage, grounding on
# seeds 0, 2 and 5, identification on seeds 1-3, the operator on 100 seeds, the
# absolute-action learning test. Not in CI, which stays under 45 min with the Isaac Lab tests.
test-long: $(STAMP)
	$(PYTEST) --dist loadgroup -m long

# The closed-loop learning check (tests/test_closed_loop.py: record four takes, train the
# tiny policy, evaluate it on four trials of the takes' instance; about 8 min on 2 cores).
# Not in CI, which stays under 45 min with the Isaac Lab tests; run it after a change to
# training, the policy, the runtime or the twin (README, "The closed-loop learning check").
test-learning: $(STAMP)
	$(BIN)/python -m pytest -q -s -m learning tests/test_closed_loop.py

# Every stage's bench (`r2s2r bench all`; the suite and each one's headline figures are in
# source/r2s2r/app/bench_suite.py), one after another: a record each in benchmarks/, then the
# page generated from them, docs/reference/benchmark-results.md. Both are committed. A failed
# bench writes its error into its record, the rest still run, and the target fails at the end.
# BENCH_NOTE says what else the machine was doing (e.g. BENCH_NOTE="beside a training job").
BENCH_NOTE ?=

bench: $(STAMP)
	$(BIN)/r2s2r bench all --out benchmarks --page docs/reference/benchmark-results.md \
		--note "$(BENCH_NOTE)"

# r2s2r Studio (tools/r2s2r_studio). Under a real X server PySide6's xcb platform needs
# libxcb-icccm4 and libxcb-keysyms1 beyond a headless system's libraries; the screenshot test
# runs the window under Xvfb (xvfb, xauth).
studio-deps:
	@bash scripts/ensure_debian_libs.sh "r2s2r Studio under X (PySide6 xcb, Xvfb)" \
		"libxcb-icccm.so.4 libxcb-keysyms.so.1 bin:Xvfb bin:xauth" \
		"libxcb-icccm4 libxcb-keysyms1 xvfb xauth"

studio: $(STAMP)
	$(BIN)/r2s2r-studio

# The camera views' frame rate and memory while the real-time twin runs (README figure).
studio-bench: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/r2s2r-studio --bench 30 --json

lint: $(STAMP)
	$(BIN)/ruff check source tests tasks tools exts scripts
	$(BIN)/ruff format --check source tests tasks tools exts scripts
	$(BIN)/mypy
	$(BIN)/lint-imports

format: $(STAMP)
	$(BIN)/ruff format source tests tasks tools exts scripts
	$(BIN)/ruff check --fix source tests tasks tools exts scripts

# The documentation site (mkdocs.yml; mkdocs-material from the `docs` extra): the reference
# pages generated from the commands' --help and the specs' JSON schema, the site built with
# --strict (a broken link or anchor between pages fails it), then the built site's and the
# README's links checked offline (scripts/check_links.py). Output in site/, not in git.
DOCS_STAMP := $(VENV)/.r2s2r-docs-installed

$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[docs]"
	@touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	@# Not --quiet: it hides the warnings that --strict counts, and the build then passes.
	@# (mkdocs-material prints a notice about its successor unless told not to.)
	$(BIN)/python scripts/docs_reference.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
	$(BIN)/python scripts/check_links.py

# LeRobot's own dataset loader in its own venv, for `r2s2r train bench` to compare against:
# lerobot 0.6.1 needs Python 3.12 (from PATH if it runs there, else pyenv's 3.12.1) and
# torch < 2.12. From PyPI that is torch 2.11's CUDA build, whose NVIDIA libraries make the
# download several GB; `make lerobot-venv LEROBOT_TORCH_INDEX=URL` takes torch from another
# index (e.g. PyTorch's CPU wheels) where one is reachable.
LEROBOT_VENV := .venv-lerobot
LEROBOT_TORCH_INDEX ?=
PY312 = $(shell (python3.12 -c 'import sys' >/dev/null 2>&1 && command -v python3.12) || \
	PYENV_VERSION=3.12.1 pyenv which python3.12 2>/dev/null)

lerobot-venv:
	@test -n "$(PY312)" || { echo "lerobot-venv: no Python 3.12 (not on PATH, no pyenv 3.12.1)" >&2; exit 1; }
	@# torchcodec loads FFmpeg's libraries; without them LeRobot reads videos with PyAV.
	@bash scripts/ensure_debian_libs.sh "torchcodec (FFmpeg)" "libavcodec.so libavfilter.so" \
		"libavcodec59 libavformat59 libavutil57 libswscale6 libswresample4 libavdevice59 libavfilter8"
	test -x $(LEROBOT_VENV)/bin/python || $(PY312) -m venv $(LEROBOT_VENV)
	$(LEROBOT_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LEROBOT_VENV)/bin/python -m pip install --quiet \
		$(if $(LEROBOT_TORCH_INDEX),--extra-index-url $(LEROBOT_TORCH_INDEX)) \
		"lerobot[dataset]==0.6.1" "torch<2.12"
	$(LEROBOT_VENV)/bin/python -c "import lerobot.datasets.lerobot_dataset" && \
		echo "LeRobot installed: $(LEROBOT_VENV)/bin/python"

# The Isaac Lab extension (source/r2s2r_isaaclab) in its own Python 3.12 venv. isaaclab 3.0.0
# goes in without its ~50 requirements (open3d, transformers, tensorboard, RL libraries, Pink
# IK, teleop and UI packages none of the extension's code paths import); then what its config
# classes, Newton physics, Mimic and dataset code import, with Isaac Lab's pins (torch 2.11,
# warp-lang 1.17, newton[sim] 1.6.1: torch's CUDA libraries are most of the ~3 GB download,
# PyPI has no CPU build of torch 2.11 for Python 3.12). The core goes in without its own pins
# (its mujoco 4.0 pin would replace newton's mujoco 3.12), with the packages it imports.
ISAACLAB_VENV := .venv-isaaclab
ISAACLAB_BIN := $(ISAACLAB_VENV)/bin
ISAACLAB_STAMP := $(ISAACLAB_VENV)/.r2s2r-isaaclab-installed

isaaclab-setup: $(ISAACLAB_STAMP)

$(ISAACLAB_STAMP): pyproject.toml source/r2s2r_isaaclab/pyproject.toml
	@test -n "$(PY312)" || { echo "isaaclab-setup: no Python 3.12 (not on PATH, no pyenv 3.12.1)" >&2; exit 1; }
	@bash scripts/ensure_debian_libs.sh "headless rendering (EGL, Mesa; or set MUJOCO_GL=osmesa)" \
		"libEGL.so.1 libGL.so.1" "libegl1 libgl1 libgles2 libgl1-mesa-dri"
	test -x $(ISAACLAB_BIN)/python || $(PY312) -m venv $(ISAACLAB_VENV)
	$(ISAACLAB_BIN)/python -m pip install --quiet --upgrade pip
	$(ISAACLAB_BIN)/python -m pip install --quiet --no-deps "isaaclab==3.0.0"
	$(ISAACLAB_BIN)/python -m pip install --quiet "torch==2.11.0" "torchvision==0.26.0" \
		"warp-lang==1.17.0" "newton[sim]==1.6.1" "usd-exchange==3.0.1" "newton-usd-schemas>=0.5.0" \
		pyyaml rich hydra-core prettytable psutil lazy_loader "h5py>=3.15" scipy "gymnasium>=1.2" \
		"tqdm>=4.67.1" packaging Jinja2 toml
	$(ISAACLAB_BIN)/python -m pip install --quiet "pydantic>=2.6,<3" "numba>=0.63.1" \
		"opencv-python-headless>=4.10,<5" "av>=12" pyarrow typer pytest pytest-timeout
	@# The extension's editable install puts its project folder on sys.path (compat mode): the
	@# core's puts source/ there, where source/r2s2r_isaaclab would otherwise be imported as an
	@# empty namespace package.
	$(ISAACLAB_BIN)/python -m pip install --quiet --no-deps -e .
	$(ISAACLAB_BIN)/python -m pip install --quiet --no-deps --config-settings editable_mode=compat \
		-e source/r2s2r_isaaclab
	cd / && $(abspath $(ISAACLAB_BIN))/python -c "import isaaclab_newton.physics, isaaclab_tasks.utils, \
		r2s2r_isaaclab; assert r2s2r_isaaclab.__file__, 'r2s2r_isaaclab imports as a namespace'"
	@touch $(ISAACLAB_STAMP)
	@echo "Isaac Lab extension installed: $(ISAACLAB_BIN)/python"

# The tests that need Isaac Lab (tests/isaaclab; `make test` does not collect that folder).
test-isaaclab: $(ISAACLAB_STAMP)
	$(ISAACLAB_BIN)/python -m pytest -q --durations=10 tests/isaaclab

# The Flexiv driver's conformance test (tests/flexiv) against the real flexivrdk 2.0.0 wheel, in
# its own Python 3.12 venv: flexivrdk publishes wheels for Python 3.10 and 3.12 only. r2s2r goes
# in editable without its requirements, then the part of the core that the drivers' modules
# import, with pyproject.toml's pins (scripts/pyproject_requirements.py), and the `flexiv`
# extra. flexivrdk 2.1.0, which the driver refuses, is unpacked beside it (FLEXIV_RDK_21) for
# the test of that refusal. About 215 MB from PyPI (760 MB installed); the tests use no network.
FLEXIV_VENV := .venv-flexiv
FLEXIV_BIN := $(FLEXIV_VENV)/bin
FLEXIV_STAMP := $(FLEXIV_VENV)/.r2s2r-flexiv-installed
FLEXIV_RDK_21 := $(FLEXIV_VENV)/flexivrdk-2.1.0
FLEXIV_CORE := numpy scipy numba mujoco opencv-python-headless pydantic pyyaml gymnasium packaging

flexiv-venv: $(FLEXIV_STAMP)

$(FLEXIV_STAMP): pyproject.toml scripts/pyproject_requirements.py
	@test -n "$(PY312)" || { echo "flexiv-venv: no Python 3.12 (not on PATH, no pyenv 3.12.1)" >&2; exit 1; }
	test -x $(FLEXIV_BIN)/python || $(PY312) -m venv $(FLEXIV_VENV)
	$(FLEXIV_BIN)/python -m pip install --quiet --upgrade pip
	$(FLEXIV_BIN)/python scripts/pyproject_requirements.py $(FLEXIV_CORE) "[flexiv]" \
		> $(FLEXIV_VENV)/requirements.txt
	$(FLEXIV_BIN)/python -m pip install --quiet -r $(FLEXIV_VENV)/requirements.txt \
		pytest pytest-timeout
	$(FLEXIV_BIN)/python -m pip install --quiet --no-deps -e .
	rm -rf $(FLEXIV_RDK_21)
	$(FLEXIV_BIN)/python -m pip install --quiet --no-deps --target $(FLEXIV_RDK_21) "flexivrdk==2.1.0"
	cd / && $(abspath $(FLEXIV_BIN))/python -c "import flexivrdk, r2s2r.rig.hardware.drivers.flexiv as d; \
		assert flexivrdk.__version__ == d.FLEXIVRDK.written_for, flexivrdk.__version__"
	@touch $(FLEXIV_STAMP)
	@echo "flexivrdk $$($(FLEXIV_BIN)/python -c 'import flexivrdk; print(flexivrdk.__version__)') installed: $(FLEXIV_BIN)/python"

# The conformance test: every flexivrdk name the driver uses, in the real wheel; bring-up, state,
# command and stop against a stand-in robot on the wheel's own types; 2.1.0 refused.
test-flexiv: $(FLEXIV_STAMP)
	FLEXIV_RDK_21=$(abspath $(FLEXIV_RDK_21)) $(FLEXIV_BIN)/python -m pytest -q --durations=10 tests/flexiv

clean:
	rm -rf $(VENV) $(ISAACLAB_VENV) $(FLEXIV_VENV) outputs site .pytest_cache .mypy_cache .ruff_cache
