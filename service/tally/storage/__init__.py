"""Storage: everything that talks to ClickHouse. Nothing in here knows about HTTP."""
