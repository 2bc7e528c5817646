"""Paper tables as grids of runs: plans (`plan`), run folders (`runs`) and seed statistics (`report`)."""
