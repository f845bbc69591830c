"""tools/bench/compare as a package: `harness` (commands, timing, spreads, rows, goals, the specs'
facts), `servers` (Redis and nginx on loopback), `report` (the table, the machine, the docs page),
`sections` (one module per section, and the registry) and `cli` (the command line)."""
