"""Similarity heads, one file per method (`SimilarityHead`: representations of a text and a video
batch and their score matrix); YAML configs name them by these class paths."""

from lit_retrieval.models.heads.base import SimilarityHead
from lit_retrieval.models.heads.meanp import MeanPHead
from lit_retrieval.models.heads.mevtr import MeVTRHead
from lit_retrieval.models.heads.pau import PAUHead
from lit_retrieval.models.heads.sali import SALIHead
from lit_retrieval.models.heads.seq import SeqLSTMHead, SeqTransfHead
from lit_retrieval.models.heads.tight import TightTransfHead
from lit_retrieval.models.heads.tempme import TempMeHead
from lit_retrieval.models.heads.ts2net import TS2NetHead
from lit_retrieval.models.heads.uatvr import UATVRHead
from lit_retrieval.models.heads.ucofia import UCoFiAHead
from lit_retrieval.models.heads.xclip import XCLIPHead

__all__ = [
    "MeVTRHead",
    "MeanPHead",
    "PAUHead",
    "SALIHead",
    "SeqLSTMHead",
    "SeqTransfHead",
    "SimilarityHead",
    "TS2NetHead",
    "TempMeHead",
    "TightTransfHead",
    "UATVRHead",
    "UCoFiAHead",
    "XCLIPHead",
]
