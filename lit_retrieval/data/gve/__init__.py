"""GVE's multi-task data: task files, the multi-task DataModule, hard negatives, synthetic tasks."""
