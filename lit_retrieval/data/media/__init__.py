"""File -> frames: decoding and sampling (`video`), the frame cache, shot detection, normalisation."""
