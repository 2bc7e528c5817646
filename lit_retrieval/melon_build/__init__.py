"""`lit-retrieval build-melon`: MELON's construction pipeline (MELON Sec. 3, supp. C, F) as resumable,
per-video cached stages: collect -> qa-to-caption -> t2t -> v2t -> summarise -> judge -> write."""
