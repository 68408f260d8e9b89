"""The simulator: replay a workload through the scheduling core in simulated time.

- `engine`: `run_simulation`, a trace through the simulated cluster (`gpupool.simcluster`)
  into samples and outcomes;
- `workload`, `cluster`: strict loaders of workload files (JSONL, CSV) and cluster files (YAML),
  the default cluster and the policies (`static`, `guaranteed`);
- `synthetic`: the seeded synthetic lab workload;
- `metrics`, `fragmentation`: pure measures over a run's samples and outcomes;
- `compare`, `report`, `console`: several policies side by side, the HTML report, the JSON
  summary and the terminal table (`gpupool simulate`);
- `packing`, `packing_report`: the packing benchmark (`gpupool bench packing`); the report's
  rooms are `packing_summary` (one pod list), `packing_jobs` and `packing_matrix` (`--all`);
- `openb`: loaders of the Alibaba GPU-sharing trace "openb" (`data/openb` of a source checkout).

See docs/simulator.md.
"""
