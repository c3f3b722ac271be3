.DEFAULT_GOAL := help
PYTHON ?= python3

.PHONY: help
help: ## Show this help
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-12s %s\n", $$1, $$2}'

.PHONY: dev
dev: ## Build the extension (dev profile) and install it into the current Python
	rm -rf target/wheels-dev
	maturin build -o target/wheels-dev
	$(PYTHON) -m pip install --force-reinstall --no-deps target/wheels-dev/*.whl

.PHONY: install
install: ## Build a release wheel and install ferrule with its test dependencies
	$(PYTHON) -m pip install '.[test]'

.PHONY: wheels
wheels: ## Build and check the release artefacts in dist/: every platform's wheels, the sdist
	bash scripts/build-wheels.sh

.PHONY: test
test: ## Run the Python test suite against the installed ferrule
	$(PYTHON) -m pytest tests

.PHONY: test-rust
test-rust: ## Run the Rust unit tests
	cargo test --workspace

.PHONY: lint
lint: ## cargo fmt --check, clippy -D warnings, ruff, the module graphs
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	ruff check .
	ruff format --check .
	$(PYTHON) scripts/module_graph.py

.PHONY: lint-targets
lint-targets: ## clippy -D warnings for aarch64 and musl Linux, macOS arm64 and x86_64 (zig's C compiler)
	bash scripts/clippy-targets.sh

.PHONY: format
format: ## Format Rust and Python sources
	cargo fmt --all
	ruff format .
	ruff check --fix .

.PHONY: docs
docs: ## Write docs/settings.md from the settings table
	$(PYTHON) scripts/settings_doc.py
