"""`lit-retrieval serve`: an HTTP API and a search page over an index built by `lit-retrieval index`."""
