"""The networks, without training loops (those are `lit_retrieval.modules`):

- `encoders/`: video-text backbones that turn frames and text into token-level features
  (`VideoTextEncoder`: CLIP, Long-CLIP's 248 positions, open_clip, SigLIP; tiny ones for tests);
- `heads/`: similarity heads on those features, one file per baseline (`SimilarityHead`: meanP,
  seqLSTM/seqTransf, tightTransf, X-CLIP, TS2-Net, UCoFiA, UATVR, PAU, TempMe, MeVTR, SALI), each
  saying what it supports (indexable, pairwise scoring, word-level text, grad-cache);
- `gve/`: Qwen2.5-VL as a universal embedder (GVE Sec. 3.3): input processing, M-RoPE positions,
  last-token pooling, LoRA, export;
- `features.py`: the token-level feature record every head reads; `matching.py`: SALI's matching
  operators (greedy max, capacity-constrained Sinkhorn OT).
"""
