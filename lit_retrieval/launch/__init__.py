"""Launching on Slurm, in one place: the shipped job templates (`sbatch/*.sbatch`, package data) and
their template language (`templates`), what a grid run asks Slurm for (`resources`), and the
submission of a grid's runs as job arrays with the records that keep a second submission from
repeating a queued one (`submission`). The `slurm` and `grid --slurm` commands only parse their
arguments and call these."""
