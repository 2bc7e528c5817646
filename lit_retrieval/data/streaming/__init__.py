"""Sharded, streaming video-text data on litdata (docs/datasets.md, "Sharded, streaming data"): the shard
folder's manifest (`manifest`), samples as stored (`samples`), the writer behind `lit-retrieval shard`
(`writer`), video2dataset's WebDataset tars as a source (`webdataset`) and the data module that streams
the shards (`datamodule`)."""
