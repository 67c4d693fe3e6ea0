"""The local stack launcher: `passband up/down` (local.py), the PostgreSQL stack from source (postgres.py), task workers (task_workers.py)."""
