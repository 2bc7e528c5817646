"""Records -> batches: the item dataset, the base DataModules, samplers, worker set-up, mid-epoch resume."""
