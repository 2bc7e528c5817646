"""Release formats read outside training: the parsers (file -> `VideoRecord`s) of the datasets that
`validate-melon` and `build-melon` read, apart from their DataModules (`data/datasets/<name>.py`),
so those commands import no Lightning. A format imports no DataModule (tests/repository/test_layers.py)."""
