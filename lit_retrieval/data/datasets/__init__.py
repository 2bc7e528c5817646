"""One file per dataset: its DataModule and its parser (the parser in `data/formats/` for the datasets that
commands outside training read). A dataset file imports no other dataset file (tests/repository/test_layers.py),
except the canonical format, which can write the synthetic corpus."""
