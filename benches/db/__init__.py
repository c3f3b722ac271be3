"""The database benchmark: servers measured on the six classic web-framework test types against
a throwaway PostgreSQL. Run it with `python3 benches/db/run.py --quick` (see run.py)."""
