"""One file per dataset: its parser and its DataModule. A dataset file imports no other dataset file
(tests/test_layers.py), except the canonical format, which can write the synthetic corpus."""
