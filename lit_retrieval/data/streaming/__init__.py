"""Sharded, streaming video-text data on litdata (docs/datasets.md, "Sharded, streaming data"): the shard
folder's manifest (`manifest`), samples as stored (`samples`), the writer behind `lit-retrieval shard`
(`writer`), the chunk checks (`chunks`), the data module that streams the shards (`datamodule`) and the
`s3://` downloader for plain-http endpoints (`object_store`). video2dataset's WebDataset tars are a source
in `data/datasets/webdataset_tars.py`.

Importing the package registers that downloader, so every process that touches it does: the trainer's and
its loader workers, whether forked or spawned (they import `samples` to unpickle the dataset's transform)."""

from lit_retrieval.data.streaming import object_store  # noqa: F401  (registers the s3:// downloader)
