"""Chunks from an S3-compatible store behind a plain `http://` endpoint (an in-cluster MinIO, a loopback server).

litdata 0.2.76 fetches chunks with obstore, whose store it builds from the boto3 client's endpoint, region and
credentials but with fixed client options that lack `allow_http`: an `http://` endpoint failed at the first
chunk (`BadScheme`; obstore does not read `AWS_ALLOW_HTTP` there), while the manifest and indexes, read through
boto3, came down. `PlainHttpS3Downloader` is litdata's S3 downloader whose obstore store also allows plain http
where the endpoint is `http://` (everything else unchanged); importing this module (the package `__init__`
does) registers it for `s3://` through litdata's `register_downloader`.
"""

from __future__ import annotations

from typing import Any

from litdata.streaming.downloader import S3Downloader, register_downloader


class PlainHttpS3Downloader(S3Downloader):
    """litdata's `S3Downloader`, its obstore store rebuilt once with `allow_http` for an `http://` endpoint."""

    def _get_store(self, bucket: str) -> Any:
        store = super()._get_store(bucket)
        options = dict(store.client_options or {})
        if not str(store.config.get("endpoint", "")).startswith("http://") or options.get("allow_http") == "true":
            return store
        from obstore.store import S3Store

        config = {k: v for k, v in store.config.items() if k != "bucket"}
        self._store = S3Store(
            bucket,
            config=config,
            client_options={**options, "allow_http": True},
            credential_provider=store.credential_provider,
            retry_config=store.retry_config,
        )
        return self._store


register_downloader("s3://", PlainHttpS3Downloader, overwrite=True)
